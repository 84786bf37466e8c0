"""Bad input through the CLI: one line naming file and utterance, exit 2, nothing partial."""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile

from tests.conftest import make_data_dir, run_cli, tone

SETS = ("train", "train_dev", "test")


def _data_root(tmp_path: Path) -> Path:
    for i, name in enumerate(SETS):
        make_data_dir(tmp_path / "data" / name, utts=4, seed=10 * i)
    return tmp_path / "data"


def _features(tmp_path: Path, *extra: str):
    return run_cli("run", "--stage", "2", "--stop-stage", "2", f"data_root={tmp_path / 'data'}",
                   f"feats_root={tmp_path / 'fbank'}", f"exp_dir={tmp_path / 'exp'}",
                   "features.nj=2", *extra)


def _assert_one_line_error(result, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("asrkit: error:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _assert_no_features(tmp_path: Path) -> None:
    assert not list((tmp_path / "data").glob("*/feats.scp"))
    assert not list((tmp_path / "fbank").glob("*.ark*")) if (tmp_path / "fbank").exists() else True


def _corrupt_audio(tmp_path: Path, how: str) -> str:
    wav = tmp_path / "data" / "test" / "audio" / "spk2-utt3.wav"
    if how == "missing":
        wav.unlink()
    elif how == "truncated":
        wav.write_bytes(wav.read_bytes()[:40])
    elif how == "rate":
        soundfile.write(wav, tone(1, rate=8000), 8000, subtype="PCM_16")
    return str(wav)


@pytest.mark.parametrize(("how", "needle"), [("missing", "not found"),
                                             ("truncated", "cannot read audio"),
                                             ("rate", "is 8000 Hz")])
def test_bad_audio(tmp_path: Path, how: str, needle: str) -> None:
    _data_root(tmp_path)
    wav = _corrupt_audio(tmp_path, how)
    result = _features(tmp_path)
    _assert_one_line_error(result, "spk2-utt3", wav, needle)
    # Earlier sets may have finished; the broken set has no feature output at all.
    assert not (tmp_path / "data" / "test" / "feats.scp").exists()
    assert not list((tmp_path / "fbank").glob("*_test.*"))


@pytest.mark.parametrize(
    ("file", "old", "new", "needles"),
    [
        ("text", "WORD1 HELLO", "", ["spk1-utt1", "empty transcript"]),
        ("text", "spk1-utt1 WORD1", "spk1-utt0 WORD1", ["duplicate id 'spk1-utt0'"]),
        ("text", "spk2-utt3 ", "spk2-utt7 ", ["'spk2-utt7'", "not in utt2spk"]),
        ("wav.scp", "spk1-utt0", "spk3-utt0", ["not sorted", "'spk1-utt1'"]),
    ],
)
def test_bad_data_dir(tmp_path: Path, file: str, old: str, new: str, needles: list[str]) -> None:
    _data_root(tmp_path)
    path = tmp_path / "data" / "train" / file
    path.write_text(path.read_text().replace(old, new, 1))
    _assert_one_line_error(run_cli("validate-data", str(tmp_path / "data" / "train")),
                           str(path), *needles)
    result = _features(tmp_path)
    _assert_one_line_error(result, str(path), *needles)
    _assert_no_features(tmp_path)


def test_unknown_config_key(tmp_path: Path) -> None:
    _data_root(tmp_path)
    result = _features(tmp_path, "features.num_mel_binz=40")
    _assert_one_line_error(result, "features.num_mel_binz")
    assert not (tmp_path / "exp").exists()
    _assert_no_features(tmp_path)


def test_bad_config_value(tmp_path: Path) -> None:
    _assert_one_line_error(run_cli("run", "features.num_mel_bins=lots"), "features.num_mel_bins")
    _assert_one_line_error(run_cli("run", "features.cmvn=utterance"), "features.cmvn")


def test_validate_data_ok(tmp_path: Path) -> None:
    _data_root(tmp_path)
    result = run_cli("validate-data", str(tmp_path / "data" / "train"))
    assert result.returncode == 0 and "OK (4 utterances, 2 speakers" in result.stdout
