"""A built (non-editable) install runs a recipe with the configs it ships (conf/ lives at
the top of the checkout and is packaged as asrkit/conf)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, make_data_dir


@pytest.mark.slow
def test_a_built_install_runs_recipe_stages_outside_the_checkout(tmp_path: Path) -> None:
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(REPO)], check=True, timeout=600)
    (wheel,) = wheels.glob("asrkit-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=600
    )
    work = tmp_path / "work"
    for i, name in enumerate(("train", "train_dev", "test")):
        make_data_dir(work / "data" / name, utts=6, seed=10 * i)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(target)}

    def asrkit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "asrkit", *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    where = subprocess.run(
        [sys.executable, "-c", "import asrkit.config as c; print(c.DEFAULT_CONFIG_DIR)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where) == target / "asrkit" / "conf" and (Path(where) / "config.yaml").is_file()
    run = asrkit(
        "run",
        "--stage",
        "2",
        "--stop-stage",
        "4",
        "data_root=data",
        "feats_root=fbank",
        "exp_dir=exp",
        "features.nj=1",
        "features.num_mel_bins=23",
        "model=tiny",
        "tokenizer=char",
        "train.epochs=1",
        "train.progress=false",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (work / "exp" / "model.pt").is_file()
    assert "stage 4 (train): done" in run.stderr
