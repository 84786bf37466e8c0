"""Words spelled several ways (case, edge punctuation): found, warned about, merged."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from asrkit.data.datadir import read_kaldi_map, write_kaldi_map
from asrkit.data.text import normalize_text, spelling_variants
from tests.helpers import make_data_dir, run_main


def test_variants_are_grouped_by_case_and_edge_punctuation() -> None:
    texts = ["ERASE the TAPE", "erase THE tape,", "ERASE, don't X-RAY", "DON'T"]
    assert spelling_variants(texts) == {
        "don't": ["DON'T", "don't"],
        "erase": ["ERASE", "ERASE,", "erase"],
        "tape": ["TAPE", "tape,"],
        "the": ["THE", "the"],
    }
    assert spelling_variants(["ONE TWO", "THREE"]) == {}


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("none", "Erase, the 'TAPE' -- now"),
        ("upper", "ERASE, THE 'TAPE' -- NOW"),
        ("lower_nopunct", "erase the 'tape' now"),
        ("upper_nopunct", "ERASE THE 'TAPE' NOW"),
    ],
)
def test_normalize(how: str, expected: str) -> None:
    assert normalize_text("Erase, the 'TAPE' -- now", how) == expected


def test_corpus_tags_are_kept() -> None:
    assert normalize_text("[noise] Hello, <unk> world", "upper_nopunct") == "[noise] HELLO <unk> WORLD"


def _dirs(root: Path) -> list[str]:
    return [f"data_root={root / 'data'}", f"exp_dir={root / 'exp'}", f"feats_root={root / 'fbank'}"]


def test_stage_1_warns_about_variants_and_normalizes_when_asked(tmp_path: Path, capfd, caplog) -> None:
    for i, name in enumerate(("train", "train_dev", "test")):
        make_data_dir(tmp_path / "src" / name, utts=3, seed=i)
    text = tmp_path / "src" / "train" / "text"
    entries = read_kaldi_map(text)
    first = sorted(entries)[0]
    entries[first] = "hello, WORLD"
    write_kaldi_map(text, entries)
    imports = [f"+data.import_dirs.{n}={tmp_path / 'src' / n}" for n in ("train", "train_dev", "test")]
    args = ["run", "--stage", "1", "--stop-stage", "1", *_dirs(tmp_path), *imports]
    with caplog.at_level(logging.WARNING):
        assert run_main(args, capfd).returncode == 0
    assert "1 word(s) are spelled several ways" in caplog.text and "HELLO / hello," in caplog.text
    assert "data.text_normalize" in caplog.text
    result = run_main([*args, "data.text_normalize=upper_nopunct"], capfd)
    assert result.returncode == 0, result.stderr
    assert read_kaldi_map(tmp_path / "data" / "train" / "text")[first] == "HELLO WORLD"
    assert read_kaldi_map(text)[first] == "hello, WORLD"  # the imported dir is never written
