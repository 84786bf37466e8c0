"""``asrkit make-data-dir``: a newcomer's folder of recordings + transcripts -> Kaldi data dirs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from asrkit.data.datadir import read_data_dir
from asrkit.data.folder import index_folder, parse_split, split_sets
from asrkit.errors import DataError
from tests.helpers import run_main, tone


def _recordings(root: Path, layout: dict[str, list[str]], *, rate: int = 16000) -> None:
    for folder, stems in layout.items():
        for i, stem in enumerate(stems):
            path = root / folder / f"{stem}.wav"
            path.parent.mkdir(parents=True, exist_ok=True)
            soundfile.write(path, tone(i, rate=rate), rate, subtype="PCM_16")


def test_speaker_folders_and_a_transcript_list(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    audio = tmp_path / "my recordings"
    _recordings(audio, {"alice": ["take1", "take2"], "bob": ["b-001", "take1"]})
    listing = tmp_path / "transcripts.txt"
    # stems, a relative path, a tab, extra spaces: what hand-written lists look like
    listing.write_text("take2  turn the  LIGHTS on\nalice/take1\tgood morning\nb-001 yes\nbob/take1.wav no\n")
    result = run_main(
        ["make-data-dir", str(audio), str(tmp_path / "data" / "all"), "--transcripts", str(listing)], capfd
    )
    assert result.returncode == 0, result.stderr
    data = read_data_dir(tmp_path / "data" / "all")
    assert data.utt2spk == {
        "alice-take1": "alice",
        "alice-take2": "alice",
        "bob-b-001": "bob",
        "bob-take1": "bob",
    }
    assert data.text == {
        "alice-take1": "good morning",
        "alice-take2": "turn the LIGHTS on",
        "bob-b-001": "yes",
        "bob-take1": "no",
    }
    assert data.wav_scp["alice-take1"] == str((audio / "alice" / "take1.wav").resolve())
    assert (
        tmp_path / "data" / "all" / "spk2utt"
    ).read_text() == "alice alice-take1 alice-take2\nbob bob-b-001 bob-take1\n"
    assert "4 utterances, 2 speakers" in result.stdout and "16000 Hz (4)" in result.stdout


def test_transcripts_beside_the_audio_and_librispeech_lists(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    audio = tmp_path / "audio"
    _recordings(audio, {"19/198": ["19-198-0001", "19-198-0002"], "": ["memo"]})
    (audio / "19" / "198" / "19-198.trans.txt").write_text(
        "19-198-0001 NORTHANGER ABBEY\n19-198-0002 BY JANE AUSTEN\n"
    )
    (audio / "memo.lab").write_text("call\nhome\n")
    result = run_main(["make-data-dir", str(audio), str(tmp_path / "d"), "--speaker", "prefix"], capfd)
    assert result.returncode == 0, result.stderr
    data = read_data_dir(tmp_path / "d")
    assert data.text == {
        "19-198-0001": "NORTHANGER ABBEY",
        "19-198-0002": "BY JANE AUSTEN",
        "memo": "call home",
    }
    assert data.utt2spk == {"19-198-0001": "19", "19-198-0002": "19", "memo": "memo"}


@pytest.mark.parametrize(
    ("listing", "extra", "message"),
    [
        (
            "a words\n",
            [],
            "1 of 2 audio files have no transcript (first: s1/b.wav); "
            "add them to the transcript list, or pass --skip-missing",
        ),
        (
            "a words\nb words\nc words\n",
            [],
            "1 transcript list entries name no audio file in the folder (first: c)",
        ),
        ("a words\nb\n", [], "transcripts.txt:2: 'b' has no words"),
        (
            "a words\nb words\n",
            ["--split", "train=0.5,dev=0.4"],
            "--split train=0.5,dev=0.4: the fractions add up to 0.9, not 1",
        ),
        ("a words\nb words\n", ["--split", "train"], "'train' is not NAME=FRACTION"),
    ],
)
def test_mistakes_are_one_line_and_write_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], listing: str, extra: list[str], message: str
) -> None:
    _recordings(tmp_path / "audio", {"s1": ["a", "b"]})
    (tmp_path / "transcripts.txt").write_text(listing)
    out = tmp_path / "data"
    result = run_main(
        [
            "make-data-dir",
            str(tmp_path / "audio"),
            str(out),
            "--transcripts",
            str(tmp_path / "transcripts.txt"),
            *extra,
        ],
        capfd,
    )
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not out.exists() and not list(tmp_path.glob(".data*"))


def test_skip_missing_leaves_them_out(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    _recordings(tmp_path / "audio", {"s1": ["a", "b"]})
    (tmp_path / "t.txt").write_text("b hello\n")
    result = run_main(
        [
            "make-data-dir",
            str(tmp_path / "audio"),
            str(tmp_path / "d"),
            "--transcripts",
            str(tmp_path / "t.txt"),
            "--skip-missing",
        ],
        capfd,
    )
    assert result.returncode == 0, result.stderr
    assert read_data_dir(tmp_path / "d").text == {"s1-b": "hello"}
    assert "left out 1 audio files without a transcript (first: s1/a.wav)" in caplog.text


def test_two_files_with_one_id_and_stereo_audio_are_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    _recordings(tmp_path / "same", {"s1": ["a"], "x/s1": ["a"]})
    with pytest.raises(DataError, match="both become utterance 's1-a'; rename one of them"):
        index_folder(tmp_path / "same")
    stereo = tmp_path / "stereo" / "s2" / "c.wav"
    stereo.parent.mkdir(parents=True)
    soundfile.write(stereo, np.zeros((1600, 2), dtype=np.int16), 16000)
    stereo.with_suffix(".txt").write_text("hi\n")
    result = run_main(["make-data-dir", str(tmp_path / "stereo"), str(tmp_path / "d")], capfd)
    assert (
        result.returncode == 2
        and "1 recordings are not mono (first: s2/c.wav (2 channels)); convert them" in result.stderr
    )


def test_another_sample_rate_gets_the_setting_to_use(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    _recordings(tmp_path / "audio", {"s1": ["a"]}, rate=8000)
    (tmp_path / "audio" / "s1" / "a.txt").write_text("hello\n")
    result = run_main(["make-data-dir", str(tmp_path / "audio"), str(tmp_path / "d")], capfd)
    assert result.returncode == 0, result.stderr
    assert (
        "8000 Hz (1)" in result.stdout
        and "features.resample=true, or features.sample_rate=8000" in result.stdout
    )


def test_split_by_speaker_is_stable_and_keeps_speakers_apart(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    layout = {f"spk{s:02d}": [f"u{i}" for i in range(3)] for s in range(10)}
    _recordings(tmp_path / "audio", layout)
    found = index_folder(tmp_path / "audio")
    parts = parse_split("train=0.8,dev=0.1,test=0.1")
    sets = split_sets(found, parts, seed=0)
    assert split_sets(found, parts, seed=0) == sets
    speakers = {name: {item.speaker for item in items} for name, items in sets.items()}
    assert [len(s) for s in speakers.values()] == [8, 1, 1]
    assert not (speakers["train"] & speakers["dev"]) and not (speakers["dev"] & speakers["test"])
    for stem in ("u0", "u1", "u2"):
        for s in range(10):
            (tmp_path / "audio" / f"spk{s:02d}" / f"{stem}.txt").write_text(f"word {stem}\n")
    result = run_main(
        [
            "make-data-dir",
            str(tmp_path / "audio"),
            str(tmp_path / "data"),
            "--split",
            "train=0.8,dev=0.1,test=0.1",
        ],
        capfd,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["dev", "test", "train"]
    assert f"recipes/kaldi_dirs/run.sh data.import_dirs.train={tmp_path / 'data' / 'train'}" in result.stdout


def test_too_few_speakers_split_by_utterance(tmp_path: Path) -> None:
    _recordings(tmp_path / "audio", {"solo": [f"u{i}" for i in range(10)]})
    sets = split_sets(index_folder(tmp_path / "audio"), parse_split("train=0.8,dev=0.2"), seed=3)
    assert [len(v) for v in sets.values()] == [8, 2]
