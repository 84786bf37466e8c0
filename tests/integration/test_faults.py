"""Faults in real multi-learner runs (torchrun, gloo): a learner killed with SIGKILL.

* SYNC under torchrun with a restart: the learners resume from the last state they all
  hold and end bitwise equal to an uninterrupted run (and two runs agree bitwise).
* ADPSGD / HYBRID across two "nodes" (one torchrun each, so no agent kills the survivors
  for us): the learners left stop with a clear error in bounded time instead of hanging.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO, free_port, make_data_dir

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("faults") / "data"
    for i, name in enumerate(("train", "train_dev", "test")):
        make_data_dir(root / name, utts=8 if name == "train" else 2, seed=10 * i)
    return root


def _stage4(data_root: Path, exp: Path, *settings: str, env: dict | None = None, background: bool = False):
    command = [
        sys.executable,
        "-m",
        "asrkit",
        "run",
        "--stage",
        "2",
        "--stop-stage",
        "4",
        f"data_root={data_root}",
        f"feats_root={data_root.parent / 'fbank'}",
        f"exp_dir={exp}",
        "features.nj=1",
        "features.num_mel_bins=23",
        "tokenizer=char",  # the fixtures' words are not in AN4's dictionary
        "model=tiny",
        "train.epochs=2",
        "train.max_batch=2",
        "train.progress=false",
        "strategy.timeout_s=60",
        *settings,
    ]
    full_env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    if background:
        return subprocess.Popen(
            command, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    return subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=280, check=False)


def _model(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, map_location="cpu", weights_only=True)["model"]


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_sync_killed_learner_restarts_and_ends_bitwise_equal(data_root: Path, tmp_path: Path) -> None:
    sync = ("strategy=sync", "strategy.learners=2", "train.save_every=2")
    runs = {}
    for name in ("whole", "again"):
        result = _stage4(data_root, tmp_path / name, *sync, f"strategy.master_port={free_port()}")
        assert result.returncode == 0, result.stderr[-3000:]
        runs[name] = _model(tmp_path / name / "checkpoints" / "epoch2.pt")
    assert _same(runs["whole"], runs["again"])  # determinism: two SYNC runs, bitwise
    # 4 global batches an epoch: learner 1 dies after step 7 (epoch 2, batch 3), past the
    # save at epoch 2, batch 2; torchrun restarts both learners, which resume from there.
    result = _stage4(
        data_root,
        tmp_path / "cut",
        *sync,
        "strategy.max_restarts=1",
        f"strategy.master_port={free_port()}",
        env={"ASRKIT_FAULT_KILL": "1:7"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = (tmp_path / "cut" / "log" / "run.log").read_text() + result.stderr
    assert "fault injection: killing this learner after step 7" in log
    assert "resuming from" in log and "epoch 2, batch 2 (step 6)" in log
    assert _same(runs["whole"], _model(tmp_path / "cut" / "checkpoints" / "epoch2.pt"))
    assert _same(_model(tmp_path / "whole" / "model.pt"), _model(tmp_path / "cut" / "model.pt"))


@pytest.mark.heavy
def test_delay_by_one_resumes_with_its_exchanges_in_flight(data_root: Path, tmp_path: Path) -> None:
    """Lock-step too: the stale exchange pending at the save is part of the state."""
    settings = ("strategy=delay_by_one", "strategy.learners=2", "train.save_every=2")
    whole = _stage4(data_root, tmp_path / "whole", *settings, f"strategy.master_port={free_port()}")
    assert whole.returncode == 0, whole.stderr[-3000:]
    cut = _stage4(
        data_root,
        tmp_path / "cut",
        *settings,
        "strategy.max_restarts=1",
        f"strategy.master_port={free_port()}",
        env={"ASRKIT_FAULT_KILL": "0:7"},
    )
    assert cut.returncode == 0, cut.stderr[-3000:]
    assert "resuming from" in (tmp_path / "cut" / "log" / "run.log").read_text() + cut.stderr
    assert _same(_model(tmp_path / "whole" / "model.pt"), _model(tmp_path / "cut" / "model.pt"))


def test_adpsgd_restarts_from_its_last_epoch_end(data_root: Path, tmp_path: Path) -> None:
    """Asynchronous, so not bitwise: the replicas resume from an epoch-end state they all
    hold. Killed as epoch 3 starts: learner 1 saved its epoch-2 state only after every
    learner had saved epoch 1's, so at least that one is common (the main learner may still
    have been validating epoch 2 when torchrun stopped it)."""
    cut = _stage4(
        data_root,
        tmp_path / "cut",
        "strategy=adpsgd",
        "strategy.learners=2",
        "strategy.max_restarts=1",
        f"strategy.master_port={free_port()}",
        "train.epochs=4",
        env={"ASRKIT_FAULT_KILL": "1:epoch3"},
    )
    assert cut.returncode == 0, cut.stderr[-3000:]
    log = (tmp_path / "cut" / "log" / "run.log").read_text() + cut.stderr
    # At the epoch's start, not after a step of it: ADPSGD shares an epoch's samples by
    # global progress, so learner 1 may take no step in epochs 3-4 (seen in CI).
    assert "fault injection: killing this learner as epoch 3 starts" in log, log[-4000:]
    assert re.search(r"resuming from .*: epoch [234], batch 0", log), log[-3000:]
    summary = json.loads((tmp_path / "cut" / "train_summary.json").read_text())
    assert [h["epoch"] for h in summary["history"]] == [1, 2, 3, 4]
    assert (tmp_path / "cut" / "model.pt").is_file()


def test_rerunning_a_killed_single_process_stage_resumes(data_root: Path, tmp_path: Path) -> None:
    """Without torchrun: the stage is simply run again (resume=auto)."""
    whole = _stage4(data_root, tmp_path / "whole", "train.save_every=2")
    assert whole.returncode == 0, whole.stderr[-3000:]
    cut = _stage4(data_root, tmp_path / "cut", "train.save_every=2", env={"ASRKIT_FAULT_KILL": "0:3"})
    assert cut.returncode == -9 and not (tmp_path / "cut" / "model.pt").exists()
    again = _stage4(data_root, tmp_path / "cut", "train.save_every=2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "stage 2 (features): already done with these settings" in again.stderr
    assert "resuming from" in again.stderr
    assert _same(_model(tmp_path / "whole" / "model.pt"), _model(tmp_path / "cut" / "model.pt"))
    third = _stage4(data_root, tmp_path / "cut", "train.save_every=2")
    assert "stage 4 (train): already done with these settings" in third.stderr


@pytest.mark.parametrize(
    ("strategy", "per_node", "victim"),
    [
        ("strategy=adpsgd", 1, 1),
        # groups {0,1} and {2,3}: one per node
        pytest.param("strategy=hybrid", 2, 3, marks=pytest.mark.heavy),
    ],
)
def test_a_dead_learner_stops_the_others_with_a_clear_error(
    data_root: Path, tmp_path: Path, strategy: str, per_node: int, victim: int
) -> None:
    port, exp = free_port(), tmp_path / "exp"
    # Stages 2-3 first, so the two "nodes" do not prepare the same files at once.
    prep = subprocess.run(
        [
            sys.executable,
            "-m",
            "asrkit",
            "run",
            "--stage",
            "2",
            "--stop-stage",
            "3",
            f"data_root={data_root}",
            f"feats_root={data_root.parent / 'fbank'}",
            f"exp_dir={exp}",
            "features.nj=1",
            "features.num_mel_bins=23",
            "tokenizer=char",  # the fixtures' words are not in AN4's dictionary
        ],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert prep.returncode == 0, prep.stderr[-2000:]
    common = (
        strategy,
        f"strategy.learners={per_node}",
        "strategy.nnodes=2",
        f"strategy.master_port={port}",
        *(["strategy.group_size=2"] if strategy == "strategy=hybrid" else []),
        "train.epochs=50",
    )
    began = time.monotonic()
    nodes = [
        _stage4(
            data_root,
            exp,
            *common,
            f"strategy.node_rank={node}",
            "strategy.timeout_s=30",
            env={"ASRKIT_FAULT_KILL": f"{victim}:3"},
            background=True,
        )
        for node in (0, 1)
    ]
    outputs = [node.communicate(timeout=240) for node in nodes]
    took = time.monotonic() - began
    assert [node.returncode for node in nodes] != [0, 0]
    survivor_err = outputs[0][1]
    assert nodes[0].returncode != 0, survivor_err[-3000:]
    errors = [ln for ln in survivor_err.splitlines() if ln.startswith("asrkit: error: learner 0")]
    assert errors, survivor_err[-3000:]
    assert "died" in errors[0] or "failed" in errors[0]
    assert "Traceback" not in survivor_err
    print(f"{strategy}: survivors stopped after {took:.1f} s: {errors[0]}")
    assert took < 150  # 50 epochs would take far longer: the survivors stopped early
