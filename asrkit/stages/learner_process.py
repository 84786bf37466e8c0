"""A learner process: ``python -m asrkit.stages.learner_process EXP_DIR/config.yaml``.

torchrun starts one of these per learner. The config is the resolved one the
stage runner saved, so every learner trains with exactly the settings of the
run that launched it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from pathlib import Path

import torch.distributed as dist

from asrkit.config import load_saved
from asrkit.device import pick_device
from asrkit.distributed.launch import STOP_NOTE_ENV, context_from_env, launched_rank
from asrkit.errors import STOPPED_EXIT, TrainingStopped, UserError
from asrkit.learner import train_learner
from asrkit.stages.registry import training_resume_key
from asrkit.training.stop import ignore_signals_at_exit


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m asrkit.stages.learner_process EXP_DIR/config.yaml", file=sys.stderr)
        return 2
    config = Path(argv[0])
    _die_with_agent()
    try:
        cfg = load_saved(config)
        dctx = context_from_env(pick_device(cfg.train.device), backend=cfg.strategy.backend)
        logging.basicConfig(
            level=logging.INFO,
            format=f"%(asctime)s %(levelname)s [learner {dctx.rank}] %(name)s: %(message)s",
            datefmt="%Y-%m-%d %H:%M:%S",
        )
        exp_dir, key = Path(cfg.exp_dir), training_resume_key(cfg)
        train_learner(cfg, data_root=Path(cfg.data_root), exp_dir=exp_dir, dctx=dctx, resume_key=key)
    except TrainingStopped as stopped:
        ignore_signals_at_exit()
        if not stopped.quiet:
            note = os.environ.get(STOP_NOTE_ENV)
            if note:  # asrkit's launcher says it, once, after every learner has stopped
                Path(note).write_text(str(stopped))
            else:
                print(f"asrkit: {stopped}", file=sys.stderr)
        return STOPPED_EXIT
    except UserError as err:
        print(f"asrkit: error: {err}", file=sys.stderr)
        return 2
    except (dist.DistError, RuntimeError) as err:
        if not is_communication_error(err):
            raise  # a bug, not a peer's failure: keep the traceback
        # Usually the consequence of another learner dying: say so in one line.
        first = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        print(
            f"asrkit: error: learner {launched_rank()}: communication failed "
            f"({first}); look for the first learner that failed in the log",
            file=sys.stderr,
        )
        return 1
    return 0


def _die_with_agent() -> None:
    """torchrun starts each learner in a session of its own, so a signal to the agent's
    process group misses it: have the kernel kill this learner when its agent dies (the
    agent stops it gracefully first; this is for an agent killed outright)."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux
    if os.getppid() != parent:  # the agent died before prctl took effect
        os._exit(1)


#: What torch.distributed's RuntimeErrors say when a peer died or a collective timed out.
_COMMUNICATION = (
    "gloo",
    "nccl",
    "c10d",
    "processgroup",
    "connection closed",
    "connection reset",
    "connection refused",
    "broken pipe",
    "timed out",
    "timeout",
    "socket",
)


def is_communication_error(err: BaseException) -> bool:
    """A failure to talk to the other learners (as opposed to a bug in this one)."""
    if isinstance(err, dist.DistError):
        return True
    text = f"{type(err).__name__} {err}".lower()
    return any(word in text for word in _COMMUNICATION)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
