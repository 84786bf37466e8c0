"""Segmented Kaldi data dirs (``segments``: utterances cut from the recordings of ``wav.scp``).

The fixture concatenates real AN4 utterances (seeded synthetic audio when the corpus is not
at ``../shared/data/an4``) into three recordings with silence between them — two wav files
and one read through a pipe — and lays the same utterances out one file each, so that
everything computed from the segmented dir can be compared with the plain dir.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile

from asrkit.cli.main import main
from asrkit.data import DataDir, Segment, iter_utterance_audio, read_data_dir, validate_data_dir
from asrkit.data import audio as audio_module
from asrkit.data.audio import MAX_OVERSHOOT, load_audio_file
from asrkit.data.datadir import format_time, read_kaldi_map, write_data_dir, write_kaldi_map
from asrkit.data.kaldi_ark import kaldi_io
from asrkit.data.listed import list_corpus
from asrkit.data.perturb import speed_perturb
from asrkit.errors import DataError
from asrkit.features import FeatureConfig, compute_features_for_dir
from asrkit.stages.data import import_data_dirs
from tests.helpers import SHARED_AN4, run_cli, tone

RATE = 16000
#: recording -> (speaker, how wav.scp reads it, its AN4 utterances in recording order).
RECORDINGS = {
    "fash-a": ("fash", "file", ["an251-fash-b", "cen2-fash-b", "an254-fash-b"]),
    "fash-b": ("fash", "pipe", ["an253-fash-b", "an255-fash-b"]),
    "fbbh-a": ("fbbh", "file", ["an90-fbbh-b", "an87-fbbh-b"]),
}
LEAD, GAP, TAIL = 4000, 8000, 4800  # samples of silence: 0.25 s before, 0.5 s between, 0.3 s after
#: The last segment of fash-b is written 0.3 s past the recording's end (cut at the end,
#: as Kaldi's extract-segments does); the last of fbbh-a ends at -1 ("to the end").
OVERSHOOT = 0.3
FEATS = FeatureConfig(num_mel_bins=23, nj=1)


def _utterance_audio(corpus_id: str, seed: int) -> np.ndarray:
    """An AN4 utterance as int16 (big-endian raw PCM in the corpus), or a seeded tone."""
    spk = corpus_id.split("-")[1]
    raw = SHARED_AN4 / "wav" / "an4_clstk" / spk / f"{corpus_id}.raw"
    if raw.is_file():
        samples, rate = load_audio_file(raw)
        assert rate == RATE
        return samples.astype(np.int16)
    return tone(seed, seconds=0.6 + 0.1 * seed)


def _utt(corpus_id: str) -> str:
    """The utterance id: speaker-prefixed (``fash-an251-fash-b``)."""
    return f"{corpus_id.split('-')[1]}-{corpus_id}"


def _build(root: Path) -> tuple[Path, Path, dict[str, np.ndarray]]:
    """``(segmented dir, one-file-each dir, utterance -> int16 samples)``."""
    segmented, plain, audio_dir = root / "segmented", root / "plain", root / "audio"
    audio_dir.mkdir(parents=True)
    wav_scp, segments, r2fc, utt2spk, text, samples = {}, {}, {}, {}, {}, {}
    seed = 0
    for reco, (spk, how, corpus_ids) in RECORDINGS.items():
        pieces, offset = [np.zeros(LEAD, np.int16)], LEAD
        for k, corpus_id in enumerate(corpus_ids):
            utt = _utt(corpus_id)
            samples[utt] = _utterance_audio(corpus_id, seed)
            seed += 1
            start, end = offset / RATE, (offset + len(samples[utt])) / RATE
            last = k == len(corpus_ids) - 1
            if last and reco == "fash-b":
                end += OVERSHOOT
            if last and reco == "fbbh-a":
                end = -1
            segments[utt] = f"{reco} {format_time(start)} {format_time(end)}"
            utt2spk[utt], text[utt] = spk, f"WORD{seed} HELLO"
            pieces.append(samples[utt])
            offset += len(samples[utt])
            if not last:
                pieces.append(np.zeros(GAP, np.int16))
                offset += GAP
        if reco == "fash-a":
            pieces.append(np.zeros(TAIL, np.int16))
        wav = audio_dir / f"{reco}.wav"
        soundfile.write(wav, np.concatenate(pieces), RATE, subtype="PCM_16")
        wav_scp[reco] = str(wav) if how == "file" else f"cat {wav} |"
        r2fc[reco] = f"{reco} A"
    # A recording no segment uses (Kaldi allows it): never read, so its file need not exist.
    wav_scp["unused-rec"] = str(audio_dir / "never-read.wav")
    r2fc["unused-rec"] = "unused-rec A"
    segmented.mkdir()
    for name, mapping in (
        ("wav.scp", wav_scp),
        ("segments", segments),
        ("reco2file_and_channel", r2fc),
        ("utt2spk", utt2spk),
        ("text", text),
    ):
        write_kaldi_map(segmented / name, mapping)
    spk2utt: dict[str, list[str]] = {}
    for utt, spk in sorted(utt2spk.items()):
        spk2utt.setdefault(spk, []).append(utt)
    write_kaldi_map(segmented / "spk2utt", {spk: " ".join(utts) for spk, utts in spk2utt.items()})
    plain_wav = {}
    for utt, audio in samples.items():
        plain_wav[utt] = str(audio_dir / f"{utt}.wav")
        soundfile.write(plain_wav[utt], audio, RATE, subtype="PCM_16")
    write_data_dir(plain, DataDir(wav_scp=plain_wav, utt2spk=dict(sorted(utt2spk.items())), text=text))
    return segmented, plain, samples


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, dict[str, np.ndarray]]:
    return _build(tmp_path)


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# --- read, validate, write ----------------------------------------------------------------


def test_segmented_dir_validates_and_round_trips(dirs, tmp_path: Path, capfd) -> None:
    segmented, _, samples = dirs
    data = validate_data_dir(segmented)
    assert data.segmented and data.utt_ids == sorted(samples)
    assert set(data.wav_scp) == {*RECORDINGS, "unused-rec"}
    assert data.segments is not None
    assert data.segments["fbbh-an87-fbbh-b"] == Segment("fbbh-a", data.segments["fbbh-an87-fbbh-b"].start, -1)
    assert data.reco2file_and_channel is not None and data.reco2file_and_channel["fash-b"] == "fash-b A"
    # Recordings in the order of their first utterance, utterances in id order, unused left out.
    recordings = data.recordings()
    assert [r.id for r in recordings] == ["fash-a", "fash-b", "fbbh-a"]
    assert [u for u, _ in recordings[0].utterances] == [
        "fash-an251-fash-b",
        "fash-an254-fash-b",
        "fash-cen2-fash-b",
    ]
    # What asrkit writes reads back the same, byte for byte.
    write_data_dir(tmp_path / "copy", data)
    for name in ("wav.scp", "segments", "reco2file_and_channel", "utt2spk", "spk2utt", "text"):
        assert (tmp_path / "copy" / name).read_text() == (segmented / name).read_text(), name
    assert main(["validate-data", str(segmented)]) == 0
    out = capfd.readouterr().out
    assert "OK (7 utterances, 2 speakers, 3 recordings; wav.scp" in out and "segments" in out


def test_subset_keeps_the_segments_and_recordings_it_uses(dirs, tmp_path: Path) -> None:
    segmented, _, _ = dirs
    data = read_data_dir(segmented).subset(["fbbh-an90-fbbh-b", "fash-an253-fash-b", "fash-an255-fash-b"])
    assert data.segments is not None and data.reco2file_and_channel is not None
    assert (
        list(data.segments) == data.utt_ids == ["fash-an253-fash-b", "fash-an255-fash-b", "fbbh-an90-fbbh-b"]
    )
    assert sorted(data.wav_scp) == sorted(data.reco2file_and_channel) == ["fash-b", "fbbh-a"]
    write_data_dir(tmp_path / "sub", data)
    again = validate_data_dir(tmp_path / "sub")
    assert again.segments == data.segments and again.wav_scp == data.wav_scp
    assert (tmp_path / "sub" / "reco2file_and_channel").read_text() == "fash-b fash-b A\nfbbh-a fbbh-a A\n"


def test_write_refuses_a_segment_of_an_unknown_recording(dirs, tmp_path: Path) -> None:
    data = read_data_dir(dirs[0])
    assert data.segments is not None
    data.wav_scp.pop("fash-b")
    with pytest.raises(DataError, match=r"utterance 'fash-an253-fash-b' is cut from recording 'fash-b'"):
        write_data_dir(tmp_path / "bad", data)
    assert not (tmp_path / "bad").exists()


# --- audio and features -----------------------------------------------------------------


def test_each_recording_is_read_once_and_cut_exactly(dirs, monkeypatch: pytest.MonkeyPatch) -> None:
    segmented, _, samples = dirs
    reads: list[str] = []
    real = audio_module.load_audio

    def counting(entry: str, **kwargs: object) -> tuple[np.ndarray, int]:
        reads.append(entry)
        return real(entry, **kwargs)

    monkeypatch.setattr(audio_module, "load_audio", counting)
    got = {utt: (cut, rate, source) for utt, cut, rate, source in iter_utterance_audio(segmented)}
    assert sorted(reads) == sorted(read_data_dir(segmented).wav_scp[r] for r in RECORDINGS)
    assert sorted(got) == sorted(samples)
    for utt, (cut, rate, _) in got.items():
        assert rate == RATE
        np.testing.assert_array_equal(cut, samples[utt].astype(np.float32), err_msg=utt)
    # The end written 0.3 s past the recording's end is cut at the end; -1 is the end.
    assert got["fash-an255-fash-b"][2].startswith("cat ") and "]" in got["fash-an255-fash-b"][2]
    assert got["fbbh-an87-fbbh-b"][2].endswith("-1 s]")


def test_features_of_a_segmented_dir_equal_one_file_each(dirs, tmp_path: Path) -> None:
    segmented, plain, samples = dirs
    # Two jobs over three recordings: each recording goes to one job, read once.
    cfg = FeatureConfig(num_mel_bins=23, nj=2)
    frames = compute_features_for_dir(segmented, tmp_path / "fbank_seg", cfg)
    expected = compute_features_for_dir(plain, tmp_path / "fbank_plain", FEATS)
    assert frames == expected and sorted(frames) == sorted(samples)
    ours = dict(kaldi_io.read_mat_scp(str(segmented / "feats.scp")))
    theirs = dict(kaldi_io.read_mat_scp(str(plain / "feats.scp")))
    for utt, mat in theirs.items():
        np.testing.assert_array_equal(ours[utt], mat, err_msg=utt)
    assert read_kaldi_map(segmented / "utt2num_frames") == read_kaldi_map(plain / "utt2num_frames")
    cmvn_ours = dict(kaldi_io.read_mat_scp(str(segmented / "cmvn.scp")))
    for spk, stats in kaldi_io.read_mat_scp(str(plain / "cmvn.scp")):
        np.testing.assert_allclose(cmvn_ours[spk], stats, rtol=1e-9)
    arks = {utt: entry.rsplit(":", 1)[0] for utt, entry in read_kaldi_map(segmented / "feats.scp").items()}
    segments = read_data_dir(segmented).segments
    assert segments is not None
    for reco in RECORDINGS:
        assert len({arks[utt] for utt, seg in segments.items() if seg.recording == reco}) == 1, reco
    assert len(set(arks.values())) == 2


def test_a_segment_past_the_recording_end_is_an_error_and_writes_nothing(dirs, tmp_path: Path) -> None:
    segmented, _, _ = dirs
    segments = read_kaldi_map(segmented / "segments")
    reco, start, end = segments["fash-an254-fash-b"].split()
    late = float(end) + 10.0
    segments["fash-an254-fash-b"] = f"{reco} {start} {format_time(late)}"
    write_kaldi_map(segmented / "segments", segments)
    validate_data_dir(segmented)  # the recording's length is known only once it is read
    with pytest.raises(DataError) as info:
        compute_features_for_dir(segmented, tmp_path / "fbank", FeatureConfig(num_mel_bins=23, nj=2))
    message = str(info.value)
    for needle in (
        str(segmented / "segments"),
        "utterance 'fash-an254-fash-b' of recording 'fash-a'",
        "past the end of the recording",
        f"at most {MAX_OVERSHOOT} s",
        "fix the segment's times",
    ):
        assert needle in message, (needle, message)
    assert not (segmented / "feats.scp").exists() and not (segmented / "cmvn.scp").exists()
    assert not list((tmp_path / "fbank").glob("*.ark")) and not list(tmp_path.rglob("*.tmp"))


def test_decoding_without_features_cuts_the_recordings(dirs) -> None:
    # What the decoders do (Recognizer.open_set) for a data dir without feats.scp,
    # with an identity CMVN in place of a trained experiment's.
    from asrkit.decoding.recognizer import Recognizer

    segmented, plain, samples = dirs
    fake = SimpleNamespace(features=FEATS, normalize=lambda feats: feats)
    fake.audio_features = functools.partial(Recognizer.audio_features, fake)
    ours = {u.utt: u.feats for u in Recognizer.open_set(fake, segmented).read_all()}
    theirs = {u.utt: u.feats for u in Recognizer.open_set(fake, plain).read_all()}
    assert sorted(ours) == sorted(theirs) == sorted(samples)
    for utt, feats in theirs.items():
        np.testing.assert_array_equal(ours[utt], feats, err_msg=utt)


def test_the_feature_benchmark_reads_segmented_dirs(dirs) -> None:
    from asrkit.bench import bench_features

    segmented, _, samples = dirs
    result = bench_features(segmented, repeats=1)
    assert result["utterances"] == len(samples) and result["loop_max_abs_diff"] == 0.0
    seconds = sum(len(s) for s in samples.values()) / RATE
    assert result["audio_seconds"] == pytest.approx(seconds, abs=0.01)


# --- speed perturbation -----------------------------------------------------------------


def test_speed_perturbation_renames_recordings_and_rescales_times(dirs) -> None:
    segmented, _, _ = dirs
    original = read_data_dir(segmented)
    assert original.segments is not None
    speed_perturb(segmented, [0.9, 1.0, 1.1])
    data = validate_data_dir(segmented)
    assert data.segments is not None and data.reco2file_and_channel is not None
    assert len(data.utt_ids) == 21 and len(data.wav_scp) == 12
    assert data.reco2file_and_channel["sp0.9-fash-b"] == "fash-b A"
    assert data.wav_scp["fash-a"] == original.wav_scp["fash-a"]
    assert data.wav_scp["sp1.1-fash-a"] == f"sox -R {original.wav_scp['fash-a']} -t wav - speed 1.1 |"
    assert data.wav_scp["sp0.9-fash-b"] == (
        f"{original.wav_scp['fash-b'][:-1].rstrip()} | sox -R -t wav - -t wav - speed 0.9 |"
    )
    for utt, seg in original.segments.items():
        assert data.segments[utt] == seg
        for factor in (0.9, 1.1):
            new = data.segments[f"sp{factor:g}-{utt}"]
            assert new.recording == f"sp{factor:g}-{seg.recording}"
            assert new.start == pytest.approx(seg.start / factor, abs=1e-6)
            assert new.end == (-1 if seg.end == -1 else pytest.approx(seg.end / factor, abs=1e-6))
            assert data.utt2spk[f"sp{factor:g}-{utt}"] == f"sp{factor:g}-{original.utt2spk[utt]}"
    assert read_kaldi_map(segmented / "utt2uniq")["sp0.9-fash-an251-fash-b"] == "fash-an251-fash-b"


@pytest.mark.skipif(shutil.which("sox") is None, reason="sox is not installed (make sysdeps)")
def test_perturbed_recordings_are_cut_where_their_utterances_went(dirs, tmp_path: Path) -> None:
    segmented, _, samples = dirs
    speed_perturb(segmented, [0.9, 1.0, 1.1])
    frames = compute_features_for_dir(segmented, tmp_path / "fbank", FEATS)
    for utt, audio in samples.items():
        seconds = len(audio) / RATE
        for factor in (0.9, 1.1):
            got = frames[f"sp{factor:g}-{utt}"] * 0.01
            assert got == pytest.approx(seconds / factor, abs=0.05), (utt, factor)


# --- import and listed corpora ----------------------------------------------------------


def test_import_copies_segments_and_reco2file_and_channel(dirs, tmp_path: Path) -> None:
    segmented, _, _ = dirs
    before = _snapshot(segmented)
    import_data_dirs({"train": str(segmented)}, ["train"], tmp_path / "data")
    target = tmp_path / "data" / "train"
    for name in ("segments", "reco2file_and_channel", "wav.scp"):
        assert (target / name).read_bytes() == (segmented / name).read_bytes(), name
    assert validate_data_dir(target).segmented
    assert _snapshot(segmented) == before


def test_a_listed_corpus_of_a_segmented_dir_stays_valid(dirs, tmp_path: Path) -> None:
    segmented, _, _ = dirs
    compute_features_for_dir(segmented, tmp_path / "fbank", FEATS)
    info = list_corpus(segmented, tmp_path / "listed", hours=0.005)
    data = validate_data_dir(tmp_path / "listed")
    assert data.segments is not None and info["copies"] >= 2
    assert data.segments["x0001-fash-an251-fash-b"].recording == "x0001-fash-a"
    assert "x0001-fash-a" in data.wav_scp and "x0001-fash-a" in (data.reco2file_and_channel or {})


# --- bad segments through the CLI -------------------------------------------------------

UTT = "fash-an254-fash-b"  # line 3 of segments


def _set_line(path: Path, key: str, line: str | None) -> None:
    """Replace (or with None remove) the line of ``key``, keeping the others as they are."""
    lines = path.read_text().splitlines(keepends=True)
    index = next(i for i, ln in enumerate(lines) if ln.split()[0] == key)
    lines[index : index + 1] = [] if line is None else [line + "\n"]
    path.write_text("".join(lines))


R2FC = "reco2file_and_channel"
#: case -> (file to break, key of the line, new line or None to drop it, expected line no., words)
BAD = {
    "end-before-start": ("segments", UTT, f"{UTT} fash-a 2.5 2.4", 3, ["is not after start time 2.5"]),
    "end-equals-start": ("segments", UTT, f"{UTT} fash-a 2.5 2.5", 3, ["end time 2.5 is not after"]),
    "negative-start": ("segments", UTT, f"{UTT} fash-a -0.5 2.4", 3, ["start time -0.5 is negative"]),
    "negative-end": ("segments", UTT, f"{UTT} fash-a 0.5 -2", 3, ["end time -2 is not after", "-1"]),
    "unknown-recording": ("segments", UTT, f"{UTT} fash-z 0.5 2.4", 3, ["'fash-z' is not in wav.scp"]),
    "three-fields": ("segments", UTT, f"{UTT} fash-a 0.5", 3, ["has 3 fields, not 4", "<start-seconds>"]),
    "five-fields": ("segments", UTT, f"{UTT} fash-a 0.5 1.0 2.0", 3, ["has 5 fields, not 4"]),
    "not-a-number": ("segments", UTT, f"{UTT} fash-a 0.5 2.4s", 3, ["'0.5 2.4s' are not numbers"]),
    "nan": ("segments", UTT, f"{UTT} fash-a nan 2.4", 3, ["'nan 2.4' are not numbers"]),
    "duplicate": ("segments", UTT, "fash-an253-fash-b fash-b 0.25 0.95", 3, ["duplicate id"]),
    "unsorted": ("segments", UTT, "fbbh-x fash-a 0.5 2.4", 4, ["not sorted", "LC_ALL=C sort"]),
    "utterance-missing": ("segments", UTT, None, None, [f"'{UTT}'", "in utt2spk but not in segments"]),
    "reco2file-fields": (R2FC, "fash-b", "fash-b A", 2, ["recording 'fash-b' has 2 fields"]),
    "reco2file-missing": (R2FC, "fash-b", None, None, ["recording 'fash-b', which is not in " + R2FC]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_segments_are_one_error_line(case: str, dirs, capfd) -> None:
    segmented = dirs[0]
    name, key, line, lineno, needles = BAD[case]
    _set_line(segmented / name, key, line)
    before = _snapshot(segmented.parent)
    code = main(["validate-data", str(segmented)])
    out, err = capfd.readouterr()
    errors = [ln for ln in err.splitlines() if ln.startswith("asrkit: error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err and out == "", err
    where = f"{segmented / name}:{lineno}" if lineno else str(segmented / "segments")
    for needle in (where, *needles):
        assert needle in errors[0], (needle, errors[0])
    assert _snapshot(segmented.parent) == before  # nothing written, nothing half written


def test_a_bad_segment_through_the_command_line(dirs) -> None:
    segmented = dirs[0]
    _set_line(segmented / "segments", UTT, f"{UTT} fash-a 2.5 1")
    result: subprocess.CompletedProcess = run_cli("validate-data", str(segmented))
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("asrkit: error:")]
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in result.stderr
    assert f"{segmented / 'segments'}:3: utterance '{UTT}'" in errors[0] and "fix the times" in errors[0]
