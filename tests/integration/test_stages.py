"""Recipe stages 0-2 through the command line and ``run.sh`` on AN4.

The in-process tests of the same code are in :mod:`tests.unit.test_stages`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from asrkit.cli.main import main
from asrkit.data import read_data_dir
from asrkit.data.kaldi_ark import kaldi_io
from asrkit.stages import STAGES
from tests.helpers import SHARED_AN4, make_an4_corpus, run_cli
from tests.unit.test_stages import _dirs


def test_both_layouts_give_identical_features(tmp_path: Path) -> None:
    mats = {}
    for layout in ("raw", "sphere"):
        corpus = make_an4_corpus(tmp_path / layout / "an4", layout)
        root = tmp_path / layout
        assert (
            main(
                [
                    "run",
                    "--stage",
                    "1",
                    "--stop_stage",
                    "2",
                    f"data.corpus_dir={corpus}",
                    "data.num_dev=2",
                    "features.nj=1",
                    *_dirs(root),
                ]
            )
            == 0
        )
        mats[layout] = dict(kaldi_io.read_mat_scp(str(root / "data" / "test" / "feats.scp")))
    assert mats["raw"].keys() == mats["sphere"].keys()
    for utt in mats["raw"]:
        assert (mats["raw"][utt] == mats["sphere"][utt]).all()


def test_help_lists_numbered_stages_and_command_is_saved(tmp_path: Path) -> None:
    result = run_cli("run", "--help")
    assert result.returncode == 0
    for number, current in STAGES.items():
        assert f"{number:>2}  {current.name}" in result.stdout
    script = Path(__file__).resolve().parents[2] / "recipes" / "an4" / "run.sh"
    assert "--stop-stage" in result.stdout and script.is_file()
    corpus = make_an4_corpus(tmp_path / "an4", "raw")
    result = run_cli(
        "run",
        "--stage",
        "1",
        "--stop-stage",
        "1",
        f"data.corpus_dir={corpus}",
        "data.num_dev=2",
        *_dirs(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    command = (tmp_path / "exp" / "command").read_text()
    assert "--stage 1 --stop-stage 1" in command and f"data.corpus_dir={corpus}" in command


@pytest.mark.skipif(not SHARED_AN4.is_dir(), reason=f"AN4 corpus not at {SHARED_AN4}")
def test_real_an4_through_run_sh(tmp_path: Path) -> None:
    """The acceptance run: the recipe script on the real corpus, stages 0-2."""
    import subprocess

    script = Path(__file__).resolve().parents[2] / "recipes" / "an4" / "run.sh"
    result = subprocess.run(
        [str(script), "--stop-stage", "2", *_dirs(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    counts = {s: len(read_data_dir(tmp_path / "data" / s).utt_ids) for s in ("train", "train_dev", "test")}
    assert counts == {"train": 848, "train_dev": 100, "test": 130}
    total = 0
    for name in counts:
        for _utt, mat in kaldi_io.read_mat_scp(str(tmp_path / "data" / name / "feats.scp")):
            assert mat.shape[1] == 80
            total += 1
    assert total == 1078
    train = set(read_data_dir(tmp_path / "data" / "train").spk2utt)
    dev = set(read_data_dir(tmp_path / "data" / "train_dev").spk2utt)
    assert not train & dev  # the fixed hold-out happens to end on a speaker boundary


def test_finished_stages_are_skipped_until_their_settings_change(tmp_path: Path) -> None:
    corpus = make_an4_corpus(tmp_path / "an4", "raw")
    args = [
        "run",
        "--stage",
        "1",
        "--stop-stage",
        "2",
        f"data.corpus_dir={corpus}",
        "data.num_dev=2",
        "features.nj=1",
        *_dirs(tmp_path),
    ]
    log_file = tmp_path / "exp" / "log" / "run.log"
    feats = tmp_path / "data" / "test" / "feats.scp"

    def run(*extra: str) -> str:
        before = log_file.read_text() if log_file.exists() else ""
        assert main([*args, *extra]) == 0
        return log_file.read_text()[len(before) :]

    first = run()
    assert "stage 2 (features): done in" in first
    record = yaml.safe_load((tmp_path / "data" / ".stages" / "2-features.json").read_text())
    assert record["settings"]["features"]["num_mel_bins"] == 80 and len(record["settings_hash"]) == 16
    stamp = feats.stat().st_mtime_ns
    again = run("features.nj=2")  # parallelism does not change the features
    assert "stage 1 (data): already done" in again and "stage 2 (features): already done" in again
    assert feats.stat().st_mtime_ns == stamp
    feats.unlink()  # an output deleted by hand: the stage runs again
    gone = run("features.nj=2")
    assert f"stage 2 (features): finished before, but {feats} is gone" in gone and feats.is_file()
    changed = run("features.num_mel_bins=40")
    assert "stage 1 (data): already done" in changed and "stage 2 (features): done in" in changed
    forced = run("features.num_mel_bins=40", "--force")
    assert "stage 1 (data): done in" in forced and "stage 2 (features): done in" in forced
    # A stage that fails leaves no record, so it runs again next time.
    (tmp_path / "data" / "test" / "wav.scp").write_text("broken\n")
    assert main([*args, "--force", "--stage", "2"]) == 2
    assert not (tmp_path / "data" / ".stages" / "2-features.json").exists()


@pytest.mark.skipif(shutil.which("sox") is None, reason="sox is not installed (make sysdeps)")
def test_stage_1_run_again_drops_the_previous_features(tmp_path: Path) -> None:
    """A speed-perturbed run's features, then stage 1 without perturbation: the rewritten
    lists no longer match the old feats.scp, which stage 1 removes (it failed validation
    before), and stage 2 makes new features for the originals only."""
    corpus = make_an4_corpus(tmp_path / "an4", "raw")
    args = ["run", "--stage", "1", "--stop-stage", "2", f"data.corpus_dir={corpus}", "data.num_dev=2"]
    args += ["features.nj=1", "features.num_mel_bins=23", *_dirs(tmp_path)]
    assert main([*args, "data.speed_perturb=[0.9,1.0,1.1]"]) == 0
    train = tmp_path / "data" / "train"
    assert len(read_data_dir(train).utt_ids) == 15 and (train / "speed_perturb").is_file()
    assert main(args) == 0
    data = read_data_dir(train)
    assert len(data.utt_ids) == 5 and not (train / "speed_perturb").exists()
    feats = dict(kaldi_io.read_mat_scp(str(train / "feats.scp")))
    assert sorted(feats) == data.utt_ids
