"""Kaldi data dirs: round trip and validation errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from asrkit.data import read_data_dir, read_kaldi_map, validate_data_dir, write_kaldi_map
from asrkit.errors import DataError
from tests.helpers import run_cli


def test_round_trip_is_sorted_and_consistent(data_dir: Path) -> None:
    data = read_data_dir(data_dir)
    assert data.utt_ids == sorted(data.utt_ids)
    assert data.spk2utt == {"spk1": ["spk1-utt0", "spk1-utt1"], "spk2": ["spk2-utt2", "spk2-utt3"]}
    assert (data_dir / "spk2utt").read_text() == "spk1 spk1-utt0 spk1-utt1\nspk2 spk2-utt2 spk2-utt3\n"
    assert data.text["spk1-utt0"] == "WORD0 HELLO"


def test_subset_keeps_all_files_aligned(data_dir: Path) -> None:
    data = read_data_dir(data_dir).subset(["spk2-utt3", "spk1-utt0"])
    assert data.utt_ids == ["spk1-utt0", "spk2-utt3"]
    assert list(data.text) == list(data.wav_scp) == data.utt_ids


def _edit(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new, 1))


@pytest.mark.parametrize(
    ("file", "old", "new", "expect"),
    [
        ("text", "spk1-utt1 WORD1 HELLO", "spk1-utt0 WORD1 HELLO", "duplicate id 'spk1-utt0'"),
        ("text", "WORD2 HELLO", "", "spk2-utt2' has an empty transcript"),
        (
            "utt2spk",
            "spk1-utt0 spk1\nspk1-utt1 spk1",
            "spk1-utt1 spk1\nspk1-utt0 spk1",
            "not sorted: 'spk1-utt0' comes after 'spk1-utt1'",
        ),
        ("text", "spk2-utt3", "spk2-utt9", "in text but not in utt2spk, first 'spk2-utt9'"),
        ("spk2utt", "spk1-utt0 spk1-utt1", "spk1-utt0", "speaker 'spk1' lists"),
    ],
)
def test_validation_names_file_line_and_utterance(
    data_dir: Path, file: str, old: str, new: str, expect: str
) -> None:
    _edit(data_dir / file, old, new)
    with pytest.raises(DataError) as info:
        validate_data_dir(data_dir)
    message = str(info.value)
    assert expect in message
    assert str(data_dir / file) in message
    assert "\n" not in message


def test_utterance_ids_must_carry_their_speaker(tmp_path: Path) -> None:
    write_kaldi_map(tmp_path / "utt2spk", {"a1": "zed", "b1": "amy"})
    write_kaldi_map(tmp_path / "spk2utt", {"amy": "b1", "zed": "a1"})
    write_kaldi_map(tmp_path / "wav.scp", {"a1": "x.wav", "b1": "y.wav"})
    with pytest.raises(DataError, match="prefix utterance ids with their speaker id"):
        validate_data_dir(tmp_path, require_text=False)


def test_missing_file_and_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="data directory not found"):
        read_data_dir(tmp_path / "nope")
    with pytest.raises(DataError, match="utt2spk: file not found"):
        read_data_dir(tmp_path)


def test_read_kaldi_map_allows_empty_values_only_when_asked(tmp_path: Path) -> None:
    (tmp_path / "hyp").write_text("u1 A B\nu2\n")
    assert read_kaldi_map(tmp_path / "hyp", allow_empty_value=True) == {"u1": "A B", "u2": ""}
    with pytest.raises(DataError, match="'u2' has no value"):
        read_kaldi_map(tmp_path / "hyp")


def test_validate_data_cli_ok(data_dir: Path) -> None:
    result = run_cli("validate-data", str(data_dir))
    assert result.returncode == 0 and "OK (4 utterances, 2 speakers" in result.stdout
    assert "audio at 16000 Hz (4)" in result.stdout
    # A dir without spk2utt (lhotse's `kaldi export` writes none): made from utt2spk.
    expected = (data_dir / "spk2utt").read_text()
    (data_dir / "spk2utt").unlink()
    result = run_cli("validate-data", str(data_dir))
    assert result.returncode == 0 and "(spk2utt was missing: written from utt2spk)" in result.stdout
    assert (data_dir / "spk2utt").read_text() == expected


def test_validate_data_reads_audio_headers_unless_quick(data_dir: Path, capfd) -> None:
    from asrkit.cli.main import main

    wav = Path(read_kaldi_map(data_dir / "wav.scp")["spk2-utt3"])
    soundfile.write(wav, np.zeros((800, 2), dtype=np.int16), 16000)  # two channels
    assert main(["validate-data", str(data_dir)]) == 2
    err = capfd.readouterr().err
    assert "1 of 4 audio entries are bad: spk2-utt3" in err and "2 channels" in err
    assert main(["validate-data", "--quick", str(data_dir)]) == 0
    # A command is not run: only reading it would tell.
    (data_dir / "wav.scp").write_text(
        "".join(f"{u} cat {p} |\n" for u, p in sorted(read_kaldi_map(data_dir / "wav.scp").items()))
    )
    assert main(["validate-data", str(data_dir)]) == 0


def test_a_tab_separates_the_key_as_a_space_does(tmp_path: Path) -> None:
    # Kaldi splits a line at its first space or TAB; data dirs prepared elsewhere use both.
    path = tmp_path / "text"
    path.write_text("u1\tWE CALL IT\tBEAR\nu2 HELLO  WORLD\nu3\t \tTWO\n")
    assert read_kaldi_map(path) == {"u1": "WE CALL IT\tBEAR", "u2": "HELLO  WORLD", "u3": "TWO"}
