"""Stages 6 and 7: frame targets from the CTC model, and log-likelihoods for Kaldi.

Stage 6 (``align``) force-aligns every utterance of the training and dev sets to its
transcript with this experiment's CTC model and writes ``ali_<set>/`` as a Kaldi
alignment dir (see :mod:`asrkit.targets.forced_align`). A CE model trained on them
(``objective=ce align.train=exp/<ctc>/ali_train align.dev=exp/<ctc>/ali_train_dev``)
predicts the CTC path frame by frame and decodes to words like the CTC model.

Stage 7 (``loglikes``) writes, per decoding set, ``loglikes_<set>/loglikes.{ark,scp}``:
one row per output frame, one column per class, ``log posterior - log prior`` with the
priors counted from the training alignments (``ali_train_pdf.counts``) — the input of
Kaldi's ``latgen-faster-mapped``. For a CTC model the classes are the CTC labels
(blank + tokens) and the priors come from its forced alignments, as in EESEN.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from asrkit.data.datadir import read_data_dir, write_kaldi_map
from asrkit.data.kaldi_ark import write_ark
from asrkit.errors import ConfigError, DataError
from asrkit.learner import alignment_source
from asrkit.stages.common import decode_targets, model_input, resolve_sets, stage_recognizer
from asrkit.stages.registry import StageContext, stage
from asrkit.targets.alignments import read_alignments
from asrkit.targets.forced_align import (
    class_counts,
    ctc_forced_align,
    log_priors,
    write_alignment_dir,
    write_counts,
)

log = logging.getLogger(__name__)


def _align_sets(ctx: StageContext) -> list[tuple[str, Path]]:
    return resolve_sets(ctx, ctx.cfg.align.sets or [ctx.cfg.data.train_set, ctx.cfg.data.dev_set])


@stage(
    6,
    "align",
    "force-align the training and dev sets with the CTC model into Kaldi alignment dirs ali_<set>/",
    uses=("align",),
    needs=(4,),
    outputs=lambda ctx: [ctx.exp_dir / f"ali_{name}" for name, _ in _align_sets(ctx)],
    inputs=lambda ctx: model_input(ctx, ctx.cfg.align.model),
)
def align(ctx: StageContext) -> None:
    cfg = ctx.cfg.align
    recognizer = stage_recognizer(ctx, cfg.model)
    if recognizer.decode_head != "ctc":
        log.info(
            "stage 6 skipped: %s is a CE model; alignments come from a CTC model", ctx.exp_dir / cfg.model
        )
        return
    model = recognizer.model
    num_classes = model.num_tokens + 1
    for name, data_dir in _align_sets(ctx):
        data = read_data_dir(data_dir, require_text=True)
        assert data.text is not None  # required
        utts = recognizer.open_set(data_dir)
        alignments: dict[str, np.ndarray] = {}
        failed: list[str] = []
        for utt, log_probs in recognizer.outputs(utts, "ctc"):
            tokens = recognizer.tokenizer.encode(data.text[utt])
            path = ctc_forced_align(log_probs, tokens)
            if path is None:
                failed.append(utt)
            else:
                alignments[utt] = path
        if len(failed) > cfg.max_missing * len(utts):
            raise DataError(
                f"{data_dir}: {len(failed)} of {len(utts)} utterances have fewer "
                f"frames than their transcript needs (first: {', '.join(failed[:5])}); "
                "check their transcripts, or allow them with align.max_missing"
            )
        out_dir = write_alignment_dir(
            ctx.exp_dir / f"ali_{name}",
            alignments,
            subsampling_factor=model.subsample,
            num_classes=num_classes,
            tokenizer_dir=ctx.exp_dir / recognizer.meta["tokenizer"],
        )
        frames = sum(a.size for a in alignments.values())
        log.info(
            "%s: %d utterances aligned (%d frames, %d classes)%s -> %s",
            name,
            len(alignments),
            frames,
            num_classes,
            f", {len(failed)} too short left out ({', '.join(failed[:5])})" if failed else "",
            out_dir,
        )


@stage(
    7,
    "loglikes",
    "per-frame log posterior - log prior of the dev and test sets as Kaldi "
    "matrices (for latgen-faster-mapped)",
    uses=("decode", "align"),
    needs=(4,),
    outputs=lambda ctx: [
        ctx.exp_dir / f"loglikes_{name}" / "loglikes.scp" for name, _ in decode_targets(ctx)
    ],
    inputs=model_input,
)
def loglikes(ctx: StageContext) -> None:
    recognizer = stage_recognizer(ctx, ctx.cfg.decode.model)
    head = "frame" if recognizer.meta.get("objective", "ctc") == "ce" else "ctc"
    source = alignment_source(ctx.cfg, ctx.exp_dir, "train")
    if not ctx.cfg.align.train and not Path(source).is_dir():
        raise ConfigError(
            f"{source}: no training alignments to count class priors from; run "
            "the forced-alignment stage (stage 6) or set align.train"
        )
    model = recognizer.model
    num_classes = model.num_classes if head == "frame" else model.num_tokens + 1
    counts = class_counts(read_alignments(source), num_classes)
    write_counts(ctx.exp_dir / "ali_train_pdf.counts", counts)
    priors = torch.from_numpy(log_priors(counts))
    for name, data_dir in decode_targets(ctx):
        out_dir = ctx.exp_dir / f"loglikes_{name}"
        out_dir.mkdir(parents=True, exist_ok=True)
        mats = {}
        for utt, scores in recognizer.outputs(recognizer.open_set(data_dir), head):
            posteriors = scores.log_softmax(dim=-1) if head == "frame" else scores
            mats[utt] = (posteriors - priors).numpy()
        scp = write_ark(out_dir / "loglikes.ark", ((u, mats[u]) for u in sorted(mats)))
        write_kaldi_map(out_dir / "loglikes.scp", scp)
        log.info(
            "%s: log-likelihoods of %d utterances (%d frames x %d classes) in %s",
            name,
            len(mats),
            sum(m.shape[0] for m in mats.values()),
            num_classes,
            out_dir / "loglikes.ark",
        )
