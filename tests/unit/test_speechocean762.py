"""The speechocean762 recipe's data preparation: each quirk of the release fixed, each one it
cannot fix reported with the file and the line."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import soundfile

from asrkit.data.audio import load_audio
from asrkit.data.datadir import read_kaldi_map, validate_data_dir
from asrkit.errors import DataError
from tests.helpers import REPO, tone

PREP = REPO / "recipes" / "speechocean762" / "local" / "data_prep.py"
NUMBERS = ["ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE"]
LEXICON = {
    "CALL": "K AO1 L",
    "FIVE": "F AY1 V",
    "FOUR": "F AO1 R",
    "IT": "IH1 T",
    "ONE": "W AH1 N",
    "THREE": "TH R IY1",
    "TWO": "T UW1",
    "WE": "W IY1",
    "ZERO": "Z IH1 R OW0",
}
#: speaker -> age: two children, a teenager, three adults.
AGES = {"0001": 8, "0005": 30, "0006": 11, "0012": 15, "0026": 22, "0031": 40}


def _prep() -> ModuleType:
    spec = importlib.util.spec_from_file_location("so762_prep", PREP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_release(
    root: Path, split: str = "train", *, speakers: dict[str, int] = AGES, per_speaker: int = 2
) -> Path:
    """A release-style split: TAB-separated wav.scp/text, ids not prefixed by the speaker,
    audio paths relative to the corpus root; the first speaker's files are ``.WAV`` listed
    as ``.WAV``, the others ``.flac`` listed as ``.WAV`` (the project's copy lists
    ``.flac``; the release lists ``.WAV``: both must be found)."""
    wav, text, utt2spk = [], [], []
    for k, spk in enumerate(speakers):
        folder = root / "WAVE" / f"SPEAKER{spk}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_speaker):
            utt = f"0{spk}{i:04d}"
            fmt, suffix = ("WAV", ".WAV") if k == 0 else ("FLAC", ".flac")
            soundfile.write(folder / f"{utt}{suffix}", tone(10 * k + i), 16000, format=fmt, subtype="PCM_16")
            wav.append(f"{utt}\tWAVE/SPEAKER{spk}/{utt}.WAV")
            text.append(f"{utt}\tWE CALL IT  bear {NUMBERS[k]}")
            utt2spk.append(f"{utt} {spk}")
    out = root / split
    out.mkdir(parents=True, exist_ok=True)
    (out / "wav.scp").write_text("\n".join(wav) + "\n")
    (out / "text").write_text("\n".join(text) + "\n")
    (out / "utt2spk").write_text("\n".join(utt2spk) + "\n")
    (out / "spk2age").write_text("".join(f"{s}\t{a}\n" for s, a in speakers.items()))
    (out / "spk2gender").write_text("".join(f"{s}\t{'mf'[i % 2]}\n" for i, s in enumerate(speakers)))
    # The corpus lexicon lacks BEAR, and its last line is cut short (no newline), as in
    # this project's copy.
    (root / "resource").mkdir(exist_ok=True)
    (root / "resource" / "lexicon.txt").write_text(
        "".join(f"{w}\t{p}\n" for w, p in LEXICON.items()) + "ZEBRA\tZ IY1 "
    )
    return root


def test_the_release_quirks_are_fixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = make_release(tmp_path / "so762")
    monkeypatch.chdir(tmp_path)  # relative audio paths must not depend on the directory
    _prep().prepare(Path("so762"), tmp_path / "data", num_dev=2)
    train, dev = (validate_data_dir(tmp_path / "data" / name) for name in ("train", "dev"))
    assert len(train.utt_ids) + len(dev.utt_ids) == 12
    assert not set(train.utt2spk.values()) & set(dev.utt2spk.values())  # speaker-disjoint
    for data in (train, dev):
        assert all(utt.startswith(f"{spk}-0{spk}") for utt, spk in data.utt2spk.items())
        assert list(data.wav_scp) == sorted(data.wav_scp)
    assert train.text is not None
    assert train.text["0001-000010000"] == "WE CALL IT BEAR ZERO"  # TAB gone, spaces normalised
    monkeypatch.chdir("/")
    for utt, entry in train.wav_scp.items():
        assert Path(entry).is_absolute() and Path(entry).is_file()
        samples, rate = load_audio(entry, utt=utt)  # .WAV and .flac both read
        assert rate == 16000 and samples.size > 0
    assert Path(train.wav_scp["0001-000010000"]).suffix == ".WAV"
    assert Path(train.wav_scp["0005-000050000"]).suffix == ".flac"
    groups = {
        **read_kaldi_map(tmp_path / "data" / "train" / "spk2group"),
        **read_kaldi_map(tmp_path / "data" / "dev" / "spk2group"),
    }
    assert groups == {
        "0001": "child",
        "0005": "adult",
        "0006": "child",
        "0012": "teen",
        "0026": "adult",
        "0031": "adult",
    }
    assert corpus.joinpath("train", "wav.scp").read_text().count("\t") == 12  # untouched
    # The lexicon: the corpus's complete lines, and BEAR (a training word it lacks) from
    # CMUdict; the cut-short ZEBRA line is dropped.
    lexicon = (tmp_path / "data" / "local" / "lexicon.txt").read_text().splitlines()
    assert lexicon[: len(LEXICON)] == [f"{w}\t{p}" for w, p in LEXICON.items()]
    assert "BEAR\tB EH1 R" in lexicon and not any(line.startswith("ZEBRA") for line in lexicon)


def test_a_plural_cmudict_lacks_is_its_singular_plus_s_or_z() -> None:
    cmu = {"wolf": [["W", "UH1", "L", "F"]], "viewing": [["V", "Y", "UW1", "IH0", "NG"]]}
    plural = _prep()._plural  # noqa: SLF001
    assert plural(cmu, "WOLFS") == [["W", "UH1", "L", "F", "S"]]
    assert plural(cmu, "VIEWINGS") == [["V", "Y", "UW1", "IH0", "NG", "Z"]]
    assert plural(cmu, "DOGS") == []


def test_dev_speakers_spread_over_the_age_groups() -> None:
    prep = _prep()
    ages = {f"{i:04d}": str(age) for i, age in enumerate([7] * 50 + [14] * 6 + [30] * 69)}
    chosen = prep.dev_speakers(sorted(ages), ages, 12)
    groups = [prep.age_group(int(ages[s])) for s in chosen]
    assert len(set(chosen)) == 12 and chosen == sorted(chosen)
    # 12 x (50, 6, 69) / 125 = 4.8, 0.58, 6.62: the two left over go to the largest remainders.
    assert (groups.count("child"), groups.count("teen"), groups.count("adult")) == (5, 0, 7)
    assert prep.dev_speakers(sorted(ages), ages, 12) == chosen  # deterministic


@pytest.mark.parametrize(
    ("file", "mangle", "message"),
    [
        (
            "wav.scp",
            lambda lines: lines[:3] + [lines[3].replace("SPEAKER0005", "SPEAKER0050")] + lines[4:],
            r"wav.scp:4: audio WAVE/SPEAKER0050/000050001.WAV not found",
        ),
        ("wav.scp", lambda lines: lines[:-1], r"text:12: utterance '000310001' has no audio in .*wav.scp"),
        (
            "text",
            lambda lines: lines[:5] + [lines[5].split("\t")[0]] + lines[6:],
            r"text:6: utterance/key '000060001' has no value",
        ),
        (
            "utt2spk",
            lambda lines: lines + [lines[0]],
            r"utt2spk:13: id '000010000' is listed again \(first on line 1\)",
        ),
        (
            "spk2age",
            lambda lines: [lines[0].replace("8", "eight")] + lines[1:],
            r"spk2age:1: age 'eight' of speaker '0001' is not a whole number",
        ),
    ],
)
def test_a_quirk_it_cannot_fix_names_the_file_and_line(
    tmp_path: Path, file: str, mangle, message: str
) -> None:  # noqa: ANN001
    corpus = make_release(tmp_path / "so762")
    path = corpus / "train" / file
    path.write_text("\n".join(mangle(path.read_text().splitlines())) + "\n")
    with pytest.raises(DataError, match=message):
        _prep().prepare(corpus, tmp_path / "data", num_dev=2)
    assert not (tmp_path / "data").exists()  # nothing half-written


def test_a_release_style_dir_given_by_path_is_prepared_for_decoding(tmp_path: Path) -> None:
    corpus = make_release(tmp_path / "so762", "test", speakers={"1027": 37})
    _prep().prepare_set(corpus / "test", tmp_path / "data" / "test")
    data = validate_data_dir(tmp_path / "data" / "test")
    assert data.utt_ids == ["1027-010270000", "1027-010270001"]
    assert all(np.isfinite(load_audio(e)[0]).all() for e in data.wav_scp.values())
