"""One learner of :mod:`asrkit.bench.strategies` (started by torchrun).

``python -m asrkit.bench.strategy_worker DATA_DIR TOKENIZER_DIR OUT STRATEGY STRAGGLER N EPOCHS
PATTERN HELD_OUT``: N utterances of DATA_DIR (0 = all), ADPSGD ``PATTERN``; with
``HELD_OUT`` = ``held-out`` the last quarter is the dev set instead of training data.
Writes ``learners.json`` and ``history.json`` (the main learner's per-epoch dev metrics).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from asrkit.distributed.base import write_learner_metrics
from asrkit.distributed.config import WEIGHT_AVERAGING, StragglerConfig, strategy_config
from asrkit.distributed.launch import (
    DistContext,
    context_from_env,
    init_process_group,
    shutdown_process_group,
)
from asrkit.distributed.strategies import join_torchrun
from asrkit.features.cmvn import read_cmvn
from asrkit.loader.batch import CmvnNormalizer
from asrkit.loader.opening import load_utterances
from asrkit.models import ModelConfig, build_model
from asrkit.targets import Tokenizer
from asrkit.training import OptimConfig, ScheduleConfig, SpecAugConfig, TrainConfig, Trainer


def main(argv: list[str]) -> int:
    data_dir, tok_dir, out = Path(argv[0]), Path(argv[1]), Path(argv[2])
    strategy_name, straggler, count, epochs = argv[3], argv[4], int(argv[5]), int(argv[6])
    pattern, held_out = argv[7], argv[8] == "held-out"
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ctx = context_from_env(torch.device("cpu"))
    own = {"pattern": pattern} if strategy_name in WEIGHT_AVERAGING else {}
    strategy = strategy_config(
        strategy_name,
        learners=ctx.world_size,
        timeout_s=300,
        straggler=StragglerConfig(mode=straggler, factor=2.0),
        **own,
    )
    init_process_group(ctx, timeout_s=strategy.timeout_s)
    tokenizer = Tokenizer(tok_dir)
    normalize = CmvnNormalizer("global", global_stats=read_cmvn(data_dir / "cmvn_global.ark"))
    utts = load_utterances(data_dir, normalize, tokenizer=tokenizer)
    utts = utts[:count] if count else utts
    dev = utts[:2]
    if held_out:
        cut = len(utts) * 3 // 4
        utts, dev = utts[:cut], utts[cut:]
    model = build_model(
        ModelConfig(size="demo"), input_dim=utts[0].feats.shape[1], num_tokens=tokenizer.num_tokens
    )
    chosen, comm = join_torchrun(strategy, ctx, seed=0)
    trainer = Trainer(
        model,
        utts,
        dev,
        tokenizer=tokenizer,
        exp_dir=out,
        cfg=TrainConfig(epochs=epochs, max_frames=12000, max_batch=16, progress=False, device="cpu"),
        optim=OptimConfig(lr=1e-3),
        schedule=ScheduleConfig(warmup_steps=0),
        specaug=SpecAugConfig(enabled=False),
        meta={"model": model.args},
        comm=comm,
        strategy=chosen,
        seed=0,
    )
    return train_and_report(trainer, ctx, out)


def train_and_report(trainer: Trainer, ctx: DistContext, out: Path) -> int:
    """Train; the main learner writes ``learners.json`` and ``history.json`` in ``out``."""
    state = trainer.fit()
    if ctx.is_main:
        write_learner_metrics(out, trainer.learners_summary)
        (out / "history.json").write_text(json.dumps(state.history))
    shutdown_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
