"""Bring your own corpus: Kaldi data dirs prepared elsewhere, imported without being written."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.helpers import make_data_dir, run_cli


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _egs(tmp_path: Path) -> Path:
    """An egs dir as Kaldi leaves it: data/{train_nodup,train_dev,eval}, with a Kaldi
    feats.scp of its own in train_nodup (which the import must not use)."""
    egs = tmp_path / "egs" / "s5"
    for i, name in enumerate(("train_nodup", "train_dev", "eval")):
        make_data_dir(egs / "data" / name, utts=6, seed=10 * i)
    (egs / "data" / "train_nodup" / "feats.scp").write_text("spk1-utt0 /nowhere/raw_mfcc.1.ark:10\n")
    return egs


def _imports(egs: Path) -> list[str]:
    """The overrides that import the egs dir's three sets."""
    return [
        "data=kaldi",
        f"data.import_dirs.train={egs}/data/train_nodup",
        f"data.import_dirs.dev={egs}/data/train_dev",
        f"+data.import_dirs.eval={egs}/data/eval",
        "data.test_sets=[eval]",
    ]


def test_imported_kaldi_dirs_train_and_decode_without_being_written(tmp_path: Path) -> None:
    egs = _egs(tmp_path)
    before = _snapshot(egs)
    recipe = tmp_path / "recipe"
    result = run_cli(
        "run",
        "--stage",
        "0",
        "--stop-stage",
        "5",
        *_imports(egs),
        f"data_root={recipe}/data",
        f"feats_root={recipe}/fbank",
        f"exp_dir={recipe}/exp",
        "features.nj=1",
        "model=tiny",
        "train.epochs=1",
        "train.progress=false",
        "features.num_mel_bins=23",
        "decode=greedy",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert _snapshot(egs) == before
    assert (recipe / "data" / "eval" / "text").read_bytes() == (egs / "data" / "eval" / "text").read_bytes()
    assert str(recipe / "fbank") in (recipe / "data" / "train" / "feats.scp").read_text()
    assert (recipe / "exp" / "decode_eval" / "scoring" / "wer").is_file()


def test_a_set_without_an_import_dir_is_one_clear_error(tmp_path: Path) -> None:
    egs = _egs(tmp_path)
    result = run_cli(
        "run",
        "--stage",
        "1",
        "--stop-stage",
        "1",
        "data=kaldi",
        f"data.import_dirs.train={egs}/data/train_nodup",
        f"data_root={tmp_path}/data",
        f"exp_dir={tmp_path}/exp",
    )
    assert result.returncode == 2
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("asrkit: error:")]
    assert len(errors) == 1 and "data.import_dirs.dev" in errors[0], result.stderr[-2000:]
    assert not (tmp_path / "data" / "train").exists()


def test_a_fixed_import_dir_makes_the_data_stage_run_again(tmp_path: Path) -> None:
    """Seen in the field: a segments error in an imported dir, then the original fixed,
    and stage 1 stayed "done" (its record hashed the import paths, not the files) and the
    error repeated. Its record now covers the imported files' content."""
    egs = _egs(tmp_path)
    recipe = tmp_path / "recipe"
    args = [
        "run",
        "--stage",
        "1",
        "--stop-stage",
        "1",
        *_imports(egs),
        f"data_root={recipe}/data",
    ]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_cli(*args)
    assert again.returncode == 0 and "stage 1 (data): already done" in again.stderr
    text = egs / "data" / "eval" / "text"
    text.write_text(text.read_text().replace("HELLO", "GOODBYE"))
    fixed = run_cli(*args)
    assert fixed.returncode == 0 and "stage 1 (data): start" in fixed.stderr, fixed.stderr[-3000:]
    assert (recipe / "data" / "eval" / "text").read_text() == text.read_text()


def test_two_runs_on_one_fresh_data_root_build_it_one_at_a_time(tmp_path: Path) -> None:
    """Seen in the field: two experiments started on the same fresh data root collided in
    stage 1's staging dir (2 of 9 died, once with a traceback). The shared data dirs are
    now built under a lock: the second run waits, then finds the stages done."""
    import os
    import subprocess
    import sys

    from tests.helpers import REPO

    egs = _egs(tmp_path)
    common = [
        *_imports(egs),
        f"data_root={tmp_path}/shared/data",
        f"feats_root={tmp_path}/shared/fbank",
        "features.nj=1",
        "features.num_mel_bins=23",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "asrkit",
                "run",
                "--stage",
                "1",
                "--stop-stage",
                "2",
                f"exp_dir={tmp_path}/{n}",
                *common,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in ("a", "b")
    ]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for e in errs]
    assert sum("being built by another run" in e for e in errs) >= 1 or any("already done" in e for e in errs)
    assert sum("stage 2 (features): start" in e for e in errs) == 1, [e[-2000:] for e in errs]
    assert not (tmp_path / "shared" / "data" / ".lock.data").exists()


def test_features_rebuilt_with_other_settings_on_a_shared_data_root_say_so(tmp_path: Path) -> None:
    """Seen in the field: two experiments with other feature settings on one data root
    both exited 0 and the first one's features were replaced without a word."""
    for i, name in enumerate(("train", "train_dev", "test")):
        make_data_dir(tmp_path / "data" / name, utts=3, seed=10 * i)
    common = [f"data_root={tmp_path / 'data'}", f"feats_root={tmp_path / 'fbank'}", "features.nj=1"]
    first = run_cli(
        "run",
        "--stage",
        "2",
        "--stop-stage",
        "2",
        f"exp_dir={tmp_path / 'a'}",
        *common,
        "features.num_mel_bins=23",
    )
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_cli(
        "run",
        "--stage",
        "2",
        "--stop-stage",
        "2",
        f"exp_dir={tmp_path / 'b'}",
        *common,
        "features.num_mel_bins=40",
    )
    assert second.returncode == 0, second.stderr[-3000:]
    warning = [ln for ln in second.stderr.splitlines() if "was built with other settings" in ln]
    assert len(warning) == 1 and "features.num_mel_bins: 23 there, 40 here" in warning[0], second.stderr[
        -3000:
    ]
    assert "share data_root" in warning[0]
