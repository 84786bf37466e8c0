"""A learner process killed while writing its resume state.

The in-process tests of the same code are in :mod:`tests.unit.test_resume`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from asrkit.training.resume import ResumeStore
from tests.helpers import REPO

_KILL_DURING_SAVE = """
import os, signal, sys, torch
from asrkit.training.resume import ResumeStore
store = ResumeStore(sys.argv[1], rank=0)
store.save({"position": {"epoch": 0, "batch": 2}, "model": {"w": torch.ones(1000)}})
real_save = torch.save
def dying_save(obj, f, *args, **kwargs):
    f.write(b"PK half a checkpoint")  # the open temporary file
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
torch.save = dying_save
store.save({"position": {"epoch": 0, "batch": 4}, "model": {"w": torch.zeros(1000)}})
"""


def test_a_learner_killed_while_writing_leaves_the_previous_state_loadable(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _KILL_DURING_SAVE, str(tmp_path)],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=120,
        check=False,
    )
    assert result.returncode == -signal.SIGKILL
    states = ResumeStore(tmp_path, rank=0).states()
    assert list(states) == [(0, 2)] and torch.equal(states[(0, 2)]["model"]["w"], torch.ones(1000))
