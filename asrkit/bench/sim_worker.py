"""One torchrun learner of :mod:`asrkit.bench.sim_agreement`: the learner a simulated run
has, built from the same composed settings and the same in-memory data, on real gloo.

``python -m asrkit.bench.sim_worker DATA_DIR TOKENIZER_DIR OUT UTTERANCES SPLIT OVERRIDE...``:
the first UTTERANCES utterances of DATA_DIR, split as :func:`split_utterances` says
(SPLIT ``held-out`` or ``-``), trained with the settings ``OVERRIDE...`` compose to; or,
SPLIT ``experiment`` (DATA_DIR and TOKENIZER_DIR ``-``), the first UTTERANCES training
utterances and the dev set of the experiment the overrides name, with its objective
(:func:`experiment_data`; run in its recipe's directory). The main learner writes
``learners.json`` and ``history.json`` (its per-epoch dev metrics).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from asrkit.bench.sim import bench_parts, experiment_data, read_bench_data, split_utterances
from asrkit.bench.strategy_worker import train_and_report
from asrkit.config import compose, to_object
from asrkit.distributed.launch import context_from_env, init_process_group
from asrkit.distributed.strategies import join_torchrun
from asrkit.learner import build_trainer
from asrkit.targets import Tokenizer


def main(argv: list[str]) -> int:
    data_dir, tok_dir, out = Path(argv[0]), Path(argv[1]), Path(argv[2])
    count, held_out, overrides = int(argv[3]), argv[4] == "held-out", argv[5:]
    cfg = to_object(compose([*overrides, f"exp_dir={out}"]))
    ctx = context_from_env(torch.device("cpu"))
    torch.set_num_threads(cfg.strategy.threads_per_learner)
    init_process_group(ctx, timeout_s=cfg.strategy.timeout_s)
    if argv[4] == "experiment":
        like, train, dev = experiment_data(overrides, count)
        parts = bench_parts(cfg, train, dev, like.tokenizer, like=like)
    else:
        tokenizer = Tokenizer(tok_dir)
        train, dev = split_utterances(read_bench_data(data_dir, tokenizer), count, held_out=held_out)
        parts = bench_parts(cfg, train, dev, tokenizer)
    torch.manual_seed(cfg.seed + ctx.rank)  # as the recipe's learners and the simulator's
    model = parts.new_model()
    strategy, comm = join_torchrun(cfg.strategy, ctx, seed=cfg.seed)
    trainer = build_trainer(cfg, parts, model, exp_dir=out, comm=comm, strategy=strategy, resume_states=False)
    return train_and_report(trainer, ctx, out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
