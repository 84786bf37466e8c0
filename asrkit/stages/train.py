"""Stage 4 (stage 6 of the hybrid pipeline): train the acoustic model; writes ``model.pt``
and ``train_summary.json`` (:func:`asrkit.learner.train_learner` does the training).

With ``strategy.learners x strategy.nnodes > 1`` the stage starts the learners
with torchrun (``python -m asrkit.stages.learner_process exp/<name>/config.yaml``) and
waits; a stage already running under torchrun (a user's own ``torchrun -m asrkit
run --stage 4 ...``) trains as the learner it was started as.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from asrkit.device import pick_device
from asrkit.distributed.launch import context_from_env, launch_learners, under_torchrun
from asrkit.learner import adopt_alignment_tokenizer, alignment_source, train_learner
from asrkit.stages.registry import StageContext, stage, training_resume_key

log = logging.getLogger(__name__)


@stage(
    6,
    "train",
    "train the BLSTM with frame cross-entropy on the GMM's tied states (gmm/ali_<set>), "
    "validating on the dev set every epoch",
    uses=(
        "model",
        "optim",
        "schedule",
        "specaug",
        "train",
        "strategy",
        "objective",
        "seed",
        "align",
        "pipeline",
    ),
    needs=(2, 3, 4),
    pipelines=("hybrid",),
    outputs=lambda ctx: [ctx.exp_dir / "model.pt"],
)
@stage(
    4,
    "train",
    "train the (B)LSTM acoustic model (CTC, or frame CE on alignments), "
    "validating on the dev set every epoch",
    uses=("model", "optim", "schedule", "specaug", "train", "strategy", "objective", "seed", "align"),
    needs=(2, 3),
    outputs=lambda ctx: [ctx.exp_dir / "model.pt"],
)
def train(ctx: StageContext) -> None:
    strategy = ctx.cfg.strategy  # checked with every other setting at composition
    if ctx.cfg.objective == "ce":
        # Before any learner starts: they all read the tokenizer this may copy.
        adopt_alignment_tokenizer(alignment_source(ctx.cfg, ctx.exp_dir, "train"), ctx.exp_dir)
    if ctx.cfg.align.inputs_from and not under_torchrun():
        log.info("the joined input of %s (align.inputs_from), as it is", ctx.cfg.align.inputs_from)
    elif ctx.cfg.align.fmllr and not under_torchrun():
        # Before any learner starts: they all read the joined fbank + fMLLR features.
        from asrkit.gmm.nnet_input import write_training_inputs

        data = ctx.cfg.data
        write_training_inputs(
            ctx.exp_dir,
            ctx.data_root,
            {
                data.train_set: Path(alignment_source(ctx.cfg, ctx.exp_dir, "train")),
                data.dev_set: Path(alignment_source(ctx.cfg, ctx.exp_dir, "dev")),
            },
            ivectors=ctx.cfg.align,
            seed=ctx.cfg.seed,
            fbank=ctx.cfg.align.fbank,
        )
    if strategy.world_size > 1 and not under_torchrun():
        began = time.time()
        summary = ctx.exp_dir / "train_summary.json"  # the main learner's last write
        launch_learners(
            strategy,
            ["asrkit.stages.learner_process", str(ctx.exp_dir / "config.yaml")],
            note=ctx.exp_dir / "log" / f"stopped.node{strategy.node_rank}",
            finished=lambda: summary.is_file() and summary.stat().st_mtime >= began,
        )
        if strategy.node_rank == 0:
            log.info("learners finished; model saved as %s", ctx.exp_dir / "model.pt")
        return
    dctx = context_from_env(pick_device(ctx.cfg.train.device), backend=strategy.backend)
    train_learner(
        ctx.cfg,
        data_root=ctx.data_root,
        exp_dir=ctx.exp_dir,
        dctx=dctx,
        resume_key=training_resume_key(ctx.cfg),
    )
