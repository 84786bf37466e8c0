"""Stage 2: Kaldi-compatible features for every data dir."""

from __future__ import annotations

import logging
from pathlib import Path

from asrkit.features.compute import compute_features_for_dir, listed_arks
from asrkit.stages.registry import StageContext, stage

log = logging.getLogger(__name__)


def _outputs(ctx: StageContext) -> list[Path]:
    """Each set's ``feats.scp`` and the archives it and ``cmvn.scp`` list: a stage whose
    archives were deleted runs again."""
    out: list[Path] = []
    for name in ctx.cfg.data.all_sets:
        data_dir = ctx.data_root / name
        out.append(data_dir / "feats.scp")
        out += [Path(p) for p in sorted(listed_arks(data_dir))]
    return out


@stage(
    2,
    "features",
    "extract fbank/MFCC features (ark,scp) and CMVN stats for each set",
    uses=("features", "feats_root"),
    needs=(1,),
    shared=True,
    pipelines=("ctc", "hybrid"),
    outputs=lambda ctx: _outputs(ctx),
)
def features(ctx: StageContext) -> None:
    for name in ctx.cfg.data.all_sets:
        frames = compute_features_for_dir(ctx.data_root / name, ctx.feats_root, ctx.cfg.features)
        log.info(
            "%s: %d utterances, %d frames, dim %d",
            ctx.data_root / name,
            len(frames),
            sum(frames.values()),
            ctx.cfg.features.dim,
        )
