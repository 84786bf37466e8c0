"""Stage 5: greedy CTC decoding of the dev and test sets, scored into ``scoring/``."""

from __future__ import annotations

import logging
from pathlib import Path

from asrkit.decoding.recognizer import Recognizer, check_exp_dir
from asrkit.stages.registry import StageContext, stage
from asrkit.training.trainer import pick_device

log = logging.getLogger(__name__)


def resolve_sets(ctx: StageContext, entries: list[str]) -> list[tuple[str, Path]]:
    """``(name, data dir)`` pairs for entries that are set names or data dir paths."""
    out = []
    for entry in entries:
        path = Path(entry)
        if "/" in entry or path.is_absolute():
            out.append((path.resolve().name, path))
        else:
            out.append((entry, ctx.data_root / entry))
    return out


def decode_targets(ctx: StageContext) -> list[tuple[str, Path]]:
    """The sets to decode: ``decode.sets``, or the recipe's dev and test sets."""
    return resolve_sets(ctx, ctx.cfg.decode.sets or [ctx.cfg.data.dev_set, *ctx.cfg.data.test_sets])


@stage(5, "decode", "greedy CTC decoding of dev and test sets; hyp and scoring/ in decode_<set>/")
def decode(ctx: StageContext) -> None:
    check_exp_dir(ctx.exp_dir, ctx.cfg.decode.model)
    recognizer = Recognizer(ctx.exp_dir, model=ctx.cfg.decode.model,
                            device=pick_device(ctx.cfg.train.device),
                            max_frames=ctx.cfg.decode.max_frames)
    for name, data_dir in decode_targets(ctx):
        out_dir = ctx.exp_dir / f"decode_{name}"
        line = recognizer.decode_data_dir(data_dir, out_dir)
        if line is None:
            log.info("%s: hypotheses in %s (no text to score against)", name, out_dir / "hyp")
        else:
            log.info("%s: %s (%s)", name, line, out_dir / "scoring" / "wer")
            print(f"{name}: {line}", flush=True)
