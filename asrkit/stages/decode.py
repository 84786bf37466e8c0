"""Stage 5: decode the dev and test sets, scored into ``scoring/``.

Greedy (best-path) results always go to ``decode_<set>/``. With ``decode=beam`` a
lexicon-free beam search adds ``decode_beam_<set>/``; with ``decode=beam_lm`` (the AN4
recipe's default) beam search with stage 3's lexicon and word LM adds
``decode_beam_lm_<set>/``: the LM weight x word score grid is swept on the tune set
(``decode.tune_set``, default the dev set) — one ``wer_<lm weight>_<word score>`` file
each and Kaldi's ``best_wer`` — and every other set is decoded with the best pair.
"""

from __future__ import annotations

import logging
from pathlib import Path

from asrkit.decoding.beam import lexicon_words
from asrkit.decoding.ctc import CTC_KINDS, CtcDecoder
from asrkit.decoding.decoder import Prepared, forget_record
from asrkit.scoring.wer import read_text
from asrkit.stages.common import (
    decode_targets,
    model_input,
    prepared_set,
    show_decoded,
    stage_recognizer,
    tune_and_decode,
    tune_target,
)
from asrkit.stages.registry import StageContext, stage

log = logging.getLogger(__name__)


def _folders(ctx: StageContext) -> list[tuple[str, Path, str]]:
    method, names = ctx.cfg.decode.method, [name for name, _ in decode_targets(ctx)]
    folders = [("greedy", ctx.exp_dir / f"decode_{name}", name) for name in names]
    if method != "greedy":
        folders += [(method, ctx.exp_dir / f"decode_{method}_{name}", name) for name in names]
    return folders  # in the order the stage reports them


@stage(
    5,
    "decode",
    "greedy CTC decoding, plus beam search with the lexicon and LM tuned on dev "
    "(decode=beam_lm); hyp and scoring/ in decode_[<method>_]<set>/",
    uses=("decode",),
    needs=(4,),
    on_skip=lambda ctx: show_decoded(_folders(ctx)),
    outputs=lambda ctx: [ctx.exp_dir / f"decode_{name}" / "hyp" for name, _ in decode_targets(ctx)],
    inputs=model_input,
)
def decode(ctx: StageContext) -> None:
    cfg = ctx.cfg.decode
    recognizer = stage_recognizer(ctx, cfg.model)
    if recognizer.decode_head is None:
        log.info(
            "stage 5 skipped: %s has Kaldi pdf-id classes; use stage 7's log-likelihoods",
            ctx.exp_dir / cfg.model,
        )
        return
    targets = [(name, prepared_set(ctx, name, path)) for name, path in decode_targets(ctx)]
    # The search this stage tunes is the experiment's CTC decoder: records of the others go.
    for kind in CTC_KINDS:
        if kind != cfg.method:
            forget_record(ctx.exp_dir, kind)
    posteriors: dict[str, Prepared] = {}  # each set's log-probabilities, for every search
    greedy = CtcDecoder(recognizer, "greedy")
    tune_and_decode(
        greedy,
        tune=lambda: tune_target(ctx),
        targets=targets,
        out_dir=lambda name: ctx.exp_dir / f"decode_{name}",
        prepared=posteriors,
        record_dir=ctx.exp_dir if cfg.method == "greedy" else None,
    )
    if cfg.method == "greedy":
        return
    decoder = CtcDecoder(
        recognizer,
        cfg.method,
        [(w, s) for w in cfg.lm_weights for s in cfg.word_scores],
        beam_size=cfg.beam_size,
        beam_threshold=cfg.beam_threshold,
    )
    if decoder.lexicon is not None:
        _log_oov(targets, lexicon_words(decoder.lexicon))
    tune_and_decode(
        decoder,
        tune=lambda: tune_target(ctx),
        targets=targets,
        out_dir=lambda name: ctx.exp_dir / f"decode_{cfg.method}_{name}",
        prepared=posteriors,
        record_dir=ctx.exp_dir,  # what asrkit transcribe decodes with by default
    )


def _log_oov(targets: list[tuple[str, Path]], known: set[str]) -> None:
    for name, data_dir in targets:
        if not (data_dir / "text").is_file():
            continue
        ref = [w for words in read_text(data_dir / "text").values() for w in words]
        oov = sorted({w for w in ref if w not in known})
        log.info(
            "%s: %d of %d reference words (%.2f%%) are not in the lexicon%s",
            name,
            sum(w not in known for w in ref),
            len(ref),
            100.0 * sum(w not in known for w in ref) / max(len(ref), 1),
            f" ({', '.join(oov[:10])}); the decoder cannot output them" if oov else "",
        )
