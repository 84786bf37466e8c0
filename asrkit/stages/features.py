"""Stage 2: Kaldi-compatible features for every data dir."""

from __future__ import annotations

import logging

from asrkit.features.compute import compute_features_for_dir
from asrkit.stages.registry import StageContext, stage

log = logging.getLogger(__name__)


@stage(
    2,
    "features",
    "extract fbank/MFCC features (ark,scp) and CMVN stats for each set",
    uses=("features", "feats_root"),
    needs=(1,),
    shared=True,
    pipelines=("ctc", "hybrid"),
    outputs=lambda ctx: [ctx.data_root / s / "feats.scp" for s in ctx.cfg.data.all_sets],
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
