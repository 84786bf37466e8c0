"""One learner of ``asrkit bench data``: the training stage's own code, stopped after a few steps.

``python -m asrkit.bench.data_worker EXP_DIR [overrides...]`` composes the recipe config
with the overrides (``data_root=... data.train_set=... train.max_steps=50``) and trains as
:func:`asrkit.learner.train_learner` does, so what the benchmark measures — peak
memory, time to the first step, data wait — is the real stage's. ``EXP_DIR/tokenizer``
must exist; ``EXP_DIR/train_summary.json`` holds the figures afterwards.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from asrkit.config import compose, to_object
from asrkit.device import pick_device
from asrkit.distributed.launch import context_from_env
from asrkit.learner import train_learner
from asrkit.stages.registry import training_resume_key


def main(argv: list[str]) -> int:
    exp_dir, overrides = Path(argv[0]), argv[1:]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    cfg = to_object(compose([f"exp_dir={exp_dir}", *overrides]))
    dctx = context_from_env(pick_device(cfg.train.device), backend=cfg.strategy.backend)
    train_learner(
        cfg, data_root=Path(cfg.data_root), exp_dir=exp_dir, dctx=dctx, resume_key=training_resume_key(cfg)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
