"""A finished experiment is never overwritten by a rerun with other training settings.

Seen in the field: rerunning with ``train.epochs`` 2 -> 4 retrained from epoch 1 in the
same dir and replaced ``model.pt``; with ``optim.lr`` changed and a stop half-way the dir
held a mix of two runs and a worse model replaced a better one; a refused ``resume=true``
had already rewritten ``config.yaml``. Now: one line naming the differences and how to keep
both or replace, nothing rewritten; ``--force`` keeps the finished model in ``previous/``
until the new run finishes; more epochs under a schedule that allows it go on with
``resume=true``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.helpers import make_data_dir, run_cli

pytestmark = pytest.mark.timeout(900)

TRAIN = ("model=tiny", "train.max_batch=2", "train.progress=false", "decode=greedy", "tokenizer=char")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _setup(root: Path, *extra: str) -> list[str]:
    for i, name in enumerate(("train", "train_dev", "test")):
        make_data_dir(root / "data" / name, utts=6, seed=10 * i)
    common = [
        f"data_root={root / 'data'}",
        f"feats_root={root / 'fbank'}",
        f"exp_dir={root / 'exp'}",
        "features.nj=1",
        "features.num_mel_bins=23",
        *TRAIN,
        *extra,
    ]
    first = run_cli("run", "--stage", "2", "--stop-stage", "4", *common, "train.epochs=2")
    assert first.returncode == 0, first.stderr[-3000:]
    return common


def _error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("asrkit: error:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def test_a_rerun_with_other_training_settings_is_refused_and_force_keeps_the_old_model(
    tmp_path: Path,
) -> None:
    common = _setup(tmp_path)
    exp = tmp_path / "exp"
    model, config = _digest(exp / "model.pt"), _digest(exp / "config.yaml")

    longer = run_cli("run", "--stage", "4", "--stop-stage", "4", *common, "train.epochs=4")
    assert longer.returncode == 2
    line = _error_line(longer.stderr)
    assert "train.epochs: 2 there, 4 here" in line and "name=" in line and "--force" in line, line
    assert "cannot be extended" in line and "cosine" in line, line

    lr = run_cli("run", "--stage", "4", "--stop-stage", "4", *common, "train.epochs=2", "optim.lr=0.01")
    assert lr.returncode == 2 and "optim.lr" in _error_line(lr.stderr)
    resume = run_cli(
        "run", "--stage", "4", "--stop-stage", "4", *common, "train.epochs=2", "resume=true", "seed=5"
    )
    assert resume.returncode == 2 and "resume=true" in _error_line(resume.stderr)
    assert _digest(exp / "model.pt") == model and _digest(exp / "config.yaml") == config  # nothing rewritten
    assert (exp / ".stages" / "4-train.json").is_file()

    # --force, failing before it finishes (its data are gone): the finished model waits in previous/.
    broken = [*common, "train.epochs=2", "optim.lr=0.01", f"data_root={tmp_path / 'gone'}"]
    forced = run_cli("run", "--stage", "4", "--stop-stage", "4", "--force", *broken)
    assert forced.returncode != 0
    assert _digest(exp / "previous" / "model.pt") == model, forced.stderr[-2000:]
    done = run_cli(
        "run", "--stage", "4", "--stop-stage", "4", "--force", *common, "train.epochs=2", "optim.lr=0.01"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (exp / "previous").exists() and _digest(exp / "model.pt") != model


def test_more_epochs_go_on_from_a_finished_run_where_the_schedule_allows(tmp_path: Path) -> None:
    common = _setup(tmp_path, "schedule.anneal=none")
    exp = tmp_path / "exp"
    refused = run_cli("run", "--stage", "4", "--stop-stage", "4", *common, "train.epochs=3")
    assert refused.returncode == 2 and "add resume=true" in _error_line(refused.stderr)
    extended = run_cli("run", "--stage", "4", "--stop-stage", "4", *common, "train.epochs=3", "resume=true")
    assert extended.returncode == 0, extended.stderr[-3000:]
    assert "resuming from" in extended.stderr and "epoch 3:" in extended.stderr, extended.stderr[-3000:]
    assert "epoch 1:" not in extended.stderr.split("resuming from")[1]
    assert (exp / "model.pt").is_file()
