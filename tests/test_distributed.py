"""Multi-process strategy tests: 2-4 gloo learners under torchrun, one thread each."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asrkit.distributed.config import StrategyConfig
from asrkit.targets import TokenizerConfig, train_tokenizer
from tests.conftest import REPO
from tests.distributed_learner import make_trainer

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(240)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_learners(out: Path, learners: int, strategy: str, *settings: str) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "tok" / "sp.model").exists():
        train_tokenizer({"a-1": "A B C D E"}, out / "tok", TokenizerConfig(kind="char"))
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={learners}",
               f"--master-port={_free_port()}", "--max-restarts=0", "-m", "tests.distributed_learner",
               str(out), strategy, *settings]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=200,
                            check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(learners)]


@pytest.mark.parametrize("learners", [2, 4])
def test_sync_replicas_identical_and_equal_to_one_process(tmp_path: Path, learners: int) -> None:
    states = _run_learners(tmp_path, learners, "sync")
    for other in states[1:]:
        for key in states[0]:
            assert torch.equal(states[0][key], other[key]), key
    torch.set_num_threads(1)
    single = make_trainer(tmp_path, StrategyConfig(), lr=0.05, epochs=2)
    single.fit()
    initial = torch.load(tmp_path / "initial.pt", weights_only=True)
    moved = 0.0
    for key, value in single.model.state_dict().items():
        assert torch.allclose(value, states[0][key], atol=1e-5, rtol=1e-4), key
        moved = max(moved, float((value - initial[key]).abs().max()))
    assert moved > 1e-3  # training really changed the weights
