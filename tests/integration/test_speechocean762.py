"""The speechocean762 recipe's stage 1 through the command line.

The in-process tests of the same code are in :mod:`tests.unit.test_speechocean762`.
"""

from __future__ import annotations

from pathlib import Path

from asrkit.data.datadir import read_kaldi_map, validate_data_dir
from tests.helpers import run_cli
from tests.unit.test_speechocean762 import make_release


def test_stage_1_prepares_the_test_split_when_asked_and_says_when_it_is_missing(tmp_path: Path) -> None:
    corpus = make_release(tmp_path / "so762")
    common = (
        "run",
        "--stage",
        "1",
        "--stop-stage",
        "1",
        "+experiment=speechocean762",
        f"data.corpus_dir={corpus}",
        f"data_root={tmp_path / 'data'}",
        f"exp_dir={tmp_path / 'exp'}",
        "data.num_dev=2",
    )
    missing = run_cli(*common, "data.test_sets=[test]")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1].startswith("asrkit: error: ")
    assert "no such split" in missing.stderr and str(corpus / "test") in missing.stderr
    assert not (tmp_path / "data").exists()  # checked before anything is written
    make_release(corpus, "test", speakers={"1027": 37, "1029": 9})
    done = run_cli(*common, "data.test_sets=[test]")
    assert done.returncode == 0, done.stderr
    test = validate_data_dir(tmp_path / "data" / "test")
    assert sorted(set(test.utt2spk.values())) == ["1027", "1029"]
    assert read_kaldi_map(tmp_path / "data" / "test" / "spk2group") == {"1027": "adult", "1029": "child"}
