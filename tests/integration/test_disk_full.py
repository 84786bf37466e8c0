"""A full disk: stages keep their previous outputs whole, and every write that runs out of
space ends in one line (exit 2) naming the path and the space left.

The disk is a small tmpfs the test mounts (root only; skipped otherwise) and fills with a
file, so the writes meet a real ENOSPC from the kernel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from asrkit.data.datadir import read_kaldi_map
from asrkit.data.kaldi_table import read_matrices
from tests.helpers import assert_one_line_error, make_data_dir, run_cli

SMALL = ("features.nj=1", "features.num_mel_bins=23", "tokenizer=char", "model=tiny", "train.epochs=1")
SMALL += ("train.progress=false", "decode=greedy")


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, check=False
        ).returncode
    ):
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, *, leave: int = 0) -> Path:
    """Fill ``disk`` up to ``leave`` bytes free (tmpfs counts whole 4 KiB pages)."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free - leave
    with open(filler, "ab") as out:
        try:
            out.write(b"\0" * max(0, free))
        except OSError:
            pass  # full: as intended
    return filler


def _run(root: Path, first: int, last: int, *extra: str, feats: Path | None = None, exp: Path | None = None):
    return run_cli(
        "run",
        "--stage",
        str(first),
        "--stop-stage",
        str(last),
        f"data_root={root / 'data'}",
        f"feats_root={feats or root / 'fbank'}",
        f"exp_dir={exp or root / 'exp'}",
        *SMALL,
        *extra,
    )


def _data(root: Path) -> None:
    for i, name in enumerate(("train", "train_dev", "test")):
        make_data_dir(root / "data" / name, utts=6, seed=10 * i)


def test_features_on_a_full_disk_keep_the_old_archives_listed(tmp_path: Path, disk: Path) -> None:
    _data(tmp_path)
    result = _run(tmp_path, 2, 2, feats=disk)
    assert result.returncode == 0, result.stderr[-3000:]
    scp = tmp_path / "data" / "train" / "feats.scp"
    listed = scp.read_text()
    before = {p: p.read_bytes() for p in disk.iterdir()}
    features = dict(read_matrices(f"scp:{scp}"))

    filler = _fill(disk)
    result = _run(tmp_path, 2, 2, "--force", feats=disk)
    line = assert_one_line_error(result, str(disk), "no space left on the device", "MB free there")
    assert "previous features are intact" in line
    assert scp.read_text() == listed
    assert {p: p.read_bytes() for p in disk.iterdir() if p != filler} == before
    again = dict(read_matrices(f"scp:{scp}"))
    assert again.keys() == features.keys() and all((again[u] == features[u]).all() for u in features)

    # With space again, new archives replace the old ones, which are then removed.
    filler.unlink()
    result = _run(tmp_path, 2, 2, "--force", feats=disk)
    assert result.returncode == 0, result.stderr[-3000:]
    now = {p.name for p in disk.iterdir()}
    assert now.isdisjoint(p.name for p in before), (now, before.keys())
    assert all(Path(e.rsplit(":", 1)[0]).is_file() for e in read_kaldi_map(scp).values())


def test_a_feature_stage_whose_archives_are_gone_runs_again(tmp_path: Path) -> None:
    _data(tmp_path)
    assert _run(tmp_path, 2, 2).returncode == 0
    (tmp_path / "fbank" / "raw_fbank_test.1.ark").unlink()
    result = _run(tmp_path, 2, 2)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "finished before, but" in result.stderr and "raw_fbank_test.1.ark is gone" in result.stderr
    for name in ("train", "train_dev", "test"):
        scp = tmp_path / "data" / name / "feats.scp"
        assert all(Path(e.rsplit(":", 1)[0]).is_file() for e in read_kaldi_map(scp).values())


@pytest.mark.parametrize(("stage", "leave"), [(4, 48 * 1024), (5, 8 * 1024)])
def test_training_and_decoding_on_a_full_disk_end_in_one_line(
    tmp_path: Path, disk: Path, stage: int, leave: int
) -> None:
    _data(tmp_path)
    exp = disk / "exp"
    result = _run(tmp_path, 2, stage - 1, exp=exp)
    assert result.returncode == 0, result.stderr[-3000:]
    _fill(disk, leave=leave)
    result = _run(tmp_path, stage, stage, exp=exp)
    assert_one_line_error(result, str(exp), "no space left on the device")
    assert "Logging error" not in result.stderr


def test_the_gmm_features_on_a_full_disk_stay_listed(tmp_path: Path, disk: Path) -> None:
    """Seen in the field: `--force` of the hybrid GMM stage on a full disk said "previous
    features are intact" after it had deleted the GMM dir's feats.scp and MFCC archive."""
    from asrkit.errors import DiskFull
    from asrkit.features.extractors import FeatureConfig
    from asrkit.gmm.feats import make_gmm_data_dir

    _data(tmp_path)
    cfg = FeatureConfig(kind="mfcc", num_mel_bins=23, num_ceps=13, nj=1)
    target = tmp_path / "gmm" / "data" / "train"
    make_gmm_data_dir(tmp_path / "data" / "train", target, disk, cfg)
    scp = target / "feats.scp"
    features = dict(read_matrices(f"scp:{scp}"))
    filler = _fill(disk)
    with pytest.raises(DiskFull, match="previous features are intact") as err:
        make_gmm_data_dir(tmp_path / "data" / "train", target, disk, cfg)
    assert "exp_dir" in str(err.value) and "feats_root" not in str(
        err.value
    )  # the GMM's MFCCs live under exp
    again = dict(read_matrices(f"scp:{scp}"))
    assert again.keys() == features.keys() and all((again[u] == features[u]).all() for u in features)
    filler.unlink()


def test_a_gmm_dir_that_cannot_be_written_leaves_no_tmp_dir(tmp_path: Path) -> None:
    """Seen in the field: a ``tri1.tmp/`` left behind on a full disk."""
    import errno

    from asrkit.gmm.train import AlignResult, write_alignment_dir

    class NoSpace:
        def save(self, out_dir: Path) -> None:
            (out_dir / "final.mdl").write_bytes(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device", str(out_dir / "tree"))

    with pytest.raises(OSError):
        write_alignment_dir(tmp_path / "tri1", NoSpace(), AlignResult({}, [], 0, 0.0, 0))  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_under_the_data_dir_is_named_as_such(tmp_path: Path, disk: Path) -> None:
    """Seen in the field: disk-full messages named the features dir and advised
    feats_root when the data dir's disk was the full one."""
    data = disk / "data"
    for i, name in enumerate(("train", "train_dev", "test")):
        make_data_dir(data / name, utts=2, seed=10 * i)
    _fill(disk, leave=4096)
    result = run_cli(
        "run",
        "--stage",
        "2",
        "--stop-stage",
        "2",
        f"data_root={data}",
        f"feats_root={tmp_path / 'fbank'}",
        f"exp_dir={tmp_path / 'exp'}",
        *SMALL,
    )
    line = assert_one_line_error(result, str(data), "no space left on the device", "set data_root")
    assert "feats_root" not in line
