"""Stage 8: system combination (``ensemble.members``).

CTC pipeline: trains and decodes each member (stages 3-5 as a run of its own, in
``<exp_dir>/member<i>/``, ``ensemble.jobs`` at a time), then combines their n-best lists
with this experiment's (:mod:`asrkit.decoding.combine`): the LM weight and word score are
swept on the dev set (``decode_combined_<dev>/wer_*``, ``best_wer``) and every set is
decoded with the best pair into ``decode_combined_<set>/``. Members share the
experiment's data and features.

Hybrid pipeline (the stage is :func:`asrkit.stages.hmm.hybrid_combine`): each member is
another network on this experiment's tied states and input: its stage 6 runs in
``<exp_dir>/member<i>/`` on this experiment's alignments and joined features
(``align.train``, ``align.dev``, ``align.inputs_from``), and the networks' log
posteriors, averaged frame by frame, are decoded through the same HCLG with the same
priors, the LM weight and word penalty swept on dev (``wfst.*``), into
``decode_combined_<set>/``. Frame-level averaging suits CE networks on shared tied states
(their posteriors are aligned frame by frame, unlike CTC spikes).

A finished member is skipped on a rerun (its own stage records), so an interrupted stage 8
goes on where it stopped.
"""

from __future__ import annotations

import itertools
import logging

from asrkit.decoding.combine import CombinedDecoder, system_decoder
from asrkit.decoding.decoder import Prepared
from asrkit.decoding.recognizer import check_exp_dir
from asrkit.device import pick_device
from asrkit.errors import ConfigError
from asrkit.stages.common import (
    decode_targets,
    method_folders,
    model_input,
    prepared_set,
    show_decoded,
    tune_and_decode,
    tune_target,
)
from asrkit.stages.members import train_members
from asrkit.stages.registry import StageContext, stage

log = logging.getLogger(__name__)


@stage(
    8,
    "combine",
    "system combination: train and decode each ensemble.members entry (stages 3-5 in "
    "<exp_dir>/member<i>/) and rescore all n-best lists with every model, tuned on dev; "
    "decode_combined_<set>/ (nothing without members)",
    uses=("ensemble",),
    needs=(5,),
    on_skip=lambda ctx: show_decoded(method_folders(ctx, "combined")),
    inputs=model_input,
)
def combine(ctx: StageContext) -> None:
    cfg = ctx.cfg.ensemble
    if not cfg.members:
        log.info("stage 8: ensemble.members is empty; no systems to combine")
        return
    if ctx.cfg.decode.method != "beam_lm":
        raise ConfigError(
            f"ensemble.members is set but decode={ctx.cfg.decode.method}; the combination "
            "rescores each system's beam search with the LM: use decode=beam_lm"
        )
    check_exp_dir(ctx.exp_dir, ctx.cfg.decode.model)
    dirs = [ctx.exp_dir, *train_members(ctx)]
    for number, system in enumerate(dirs):
        scores = [
            f"{name} {(system / f'decode_beam_lm_{name}' / 'scoring' / 'wer').read_text().split(' [')[0]}"
            for name, _ in decode_targets(ctx)
            if (system / f"decode_beam_lm_{name}" / "scoring" / "wer").is_file()
        ]
        log.info(
            "system %d (%s) on its own, beam + LM: %s", number, system, ", ".join(scores) or "not scored"
        )
    device = pick_device(ctx.cfg.train.device)
    systems = [system_decoder(d, device=str(device), max_frames=ctx.cfg.decode.max_frames) for d in dirs]
    decoder = CombinedDecoder(
        ctx.exp_dir, systems, list(itertools.product(cfg.lm_weights, cfg.word_scores)), nbest=cfg.nbest
    )
    prepared: dict[str, Prepared] = {}
    tune_and_decode(
        decoder,
        tune=lambda: tune_target(ctx),
        targets=[(name, prepared_set(ctx, name, path)) for name, path in decode_targets(ctx)],
        out_dir=lambda name: ctx.exp_dir / f"decode_combined_{name}",
        prepared=prepared,
        record_dir=ctx.exp_dir,  # what asrkit transcribe combines with
    )
    for name, done in prepared.items():
        per_utt = sum(len(c) for c in done.scores.values()) / max(len(done.scores), 1)
        log.info("%s: %d systems proposed %.1f distinct transcripts per utterance", name, len(dirs), per_utt)
