"""Kaldi alignments: reading every table form Kaldi writes, checking them against features, the CLI.

The files are produced byte for byte as Kaldi's binaries write them: int-vector archives
through kaldi-io's writer (the layout is asserted below), text archives as
``copy-int-vector ark:- ark,t:-`` prints them, feature matrices (compressed ones through a
small encoder of Kaldi's CompressedMatrix formats) by :mod:`tests.kaldi_fixtures`.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from asrkit.cli.main import main
from asrkit.data.kaldi_ark import kaldi_io
from asrkit.errors import ConfigError, DataError
from asrkit.targets import (
    AlignmentCheckConfig,
    alignment_dir_settings,
    check_alignments,
    read_alignments,
    read_frame_counts,
)
from tests.kaldi_fixtures import (
    cm_error_bound,
    compress,
    from_u16,
    global_header,
    random_features,
    read_cm_with_kaldi_io,
    text_mat_ark,
    write_gz,
    write_mat_ark,
)

# --- writers: what Kaldi's binaries produce -------------------------------------------------


def _alignments(seed: int, lengths: dict[str, int], *, classes: int = 10) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {utt: rng.integers(0, classes, size=n).astype(np.int32) for utt, n in lengths.items()}


def _write_int_ark(path: Path, alignments: dict[str, np.ndarray]) -> dict[str, int]:
    """A binary int-vector archive; returns each utterance's scp offset (just past ``utt ``)."""
    offsets = {}
    with open(path, "wb") as handle:
        for utt, ali in alignments.items():
            offsets[utt] = handle.tell() + len(utt) + 1
            kaldi_io.write_vec_int(handle, ali.astype(np.int32), key=utt)
    return offsets


def _int_ark_bytes(alignments: dict[str, np.ndarray], tmp_path: Path) -> bytes:
    _write_int_ark(tmp_path / "tmp.ark", alignments)
    return (tmp_path / "tmp.ark").read_bytes()


def _text_int_ark(alignments: dict[str, np.ndarray]) -> str:
    # copy-int-vector's text output: every value followed by a space, then a newline.
    return "".join(f"{utt} " + "".join(f"{v} " for v in ali) + "\n" for utt, ali in alignments.items())


def _write_data_dir(path: Path, frames: dict[str, int], *, feats_scp: str | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "utt2num_frames").write_text("".join(f"{u} {n}\n" for u, n in sorted(frames.items())))
    if feats_scp is not None:
        (path / "feats.scp").write_text(feats_scp)
    return path


# --- the Kaldi int-vector format --------------------------------------------------------------


def test_binary_int_vector_layout_is_kaldis(tmp_path: Path) -> None:
    data = _int_ark_bytes({"spk1-utt1": np.array([3, -1, 70000], dtype=np.int32)}, tmp_path)
    expected = (
        b"spk1-utt1 "
        + b"\0B"
        + b"\x04"
        + struct.pack("<i", 3)
        + b"".join(b"\x04" + struct.pack("<i", v) for v in (3, -1, 70000))
    )
    assert data == expected
    assert read_alignments(str(tmp_path / "tmp.ark"))["spk1-utt1"].tolist() == [3, -1, 70000]


@pytest.mark.parametrize("prefix", ["ark:", "ark,t:", "ark,s,cs:", ""])
def test_binary_and_text_archives(tmp_path: Path, prefix: str) -> None:
    alis = _alignments(0, {"a-1": 7, "a-2": 0, "a-3": 12})
    _write_int_ark(tmp_path / "ali.ark", alis)
    (tmp_path / "ali.txt").write_text(_text_int_ark(alis))
    for name in ("ali.ark", "ali.txt"):
        got = read_alignments(f"{prefix}{tmp_path / name}")
        assert list(got) == list(alis)
        for utt, ali in alis.items():
            assert got[utt].dtype == np.int32 and got[utt].tolist() == ali.tolist()


def test_text_vectors_with_brackets_and_empty_ones(tmp_path: Path) -> None:
    # kaldi-io 0.9.8 reads the empty "b-2 " line's vector from the next line's key.
    (tmp_path / "ali.txt").write_text("b-1 [ 1 2 3 ]\nb-2 \nb-3 4 5 \nb-4\n")
    got = read_alignments(f"ark,t:{tmp_path / 'ali.txt'}")
    assert {u: a.tolist() for u, a in got.items()} == {"b-1": [1, 2, 3], "b-2": [], "b-3": [4, 5], "b-4": []}


def test_gzipped_archive_through_a_pipe_and_as_a_bare_path(tmp_path: Path) -> None:
    alis = _alignments(1, {"c-1": 5, "c-2": 9})
    gz = write_gz(tmp_path / "ali.1.gz", _int_ark_bytes(alis, tmp_path))
    for source in (f"ark:gunzip -c {gz} |", str(gz), f"ark:{gz}"):
        got = read_alignments(source)
        assert {u: a.tolist() for u, a in got.items()} == {u: a.tolist() for u, a in alis.items()}


def test_scp_with_byte_offsets(tmp_path: Path) -> None:
    first = _alignments(2, {"d-1": 4, "d-2": 6})
    second = _alignments(3, {"d-3": 8})
    offsets = _write_int_ark(tmp_path / "ali.1.ark", first)
    offsets.update({u: o for u, o in _write_int_ark(tmp_path / "ali.2.ark", second).items()})
    lines = [f"{u} {tmp_path / 'ali.1.ark'}:{offsets[u]}" for u in first]
    lines += [f"{u} {tmp_path / 'ali.2.ark'}:{offsets[u]}" for u in second]
    (tmp_path / "ali.scp").write_text("\n".join(lines) + "\n")
    for source in (f"scp:{tmp_path / 'ali.scp'}", str(tmp_path / "ali.scp")):
        got = read_alignments(source)
        assert {u: a.tolist() for u, a in got.items()} == {
            u: a.tolist() for u, a in {**first, **second}.items()
        }


def _ali_dir(
    tmp_path: Path,
    parts: list[dict[str, np.ndarray]],
    *,
    factor: int | None = 3,
    num_classes: int | None = 10,
) -> Path:
    ali_dir = tmp_path / "exp" / "tri3_ali"
    ali_dir.mkdir(parents=True)
    for job, alis in enumerate(parts, start=1):
        write_gz(ali_dir / f"ali.{job}.gz", _int_ark_bytes(alis, tmp_path))
    if factor is not None:
        (ali_dir / "frame_subsampling_factor").write_text(f"{factor}\n")
    if num_classes is not None:
        (ali_dir / "num_classes").write_text(f"{num_classes}\n")
    return ali_dir


def test_alignment_dir_reads_jobs_in_numeric_order_and_its_settings(tmp_path: Path) -> None:
    parts = [_alignments(10 + job, {f"e-{job:02d}": 3}) for job in range(1, 12)]
    ali_dir = _ali_dir(tmp_path, parts, factor=3, num_classes=10)
    assert list(read_alignments(str(ali_dir))) == [f"e-{job:02d}" for job in range(1, 12)]
    assert alignment_dir_settings(str(ali_dir)) == (3, 10)
    assert alignment_dir_settings(str(ali_dir / "ali.1.gz")) == (None, None)
    (ali_dir / "num_classes").write_text("many\n")
    with pytest.raises(DataError, match="num_classes: holds 'many'"):
        alignment_dir_settings(str(ali_dir))


def test_duplicate_utterance_across_archives(tmp_path: Path) -> None:
    ali_dir = _ali_dir(tmp_path, [_alignments(4, {"f-1": 3, "f-2": 4}), _alignments(5, {"f-2": 4})])
    with pytest.raises(DataError) as err:
        read_alignments(str(ali_dir))
    message = str(err.value)
    assert "'f-2' is aligned twice" in message
    assert str(ali_dir / "ali.1.gz") in message and str(ali_dir / "ali.2.gz") in message


# --- broken inputs ------------------------------------------------------------------------------


def test_truncated_archive_names_file_and_last_good_utterance(tmp_path: Path) -> None:
    data = _int_ark_bytes(_alignments(6, {"g-1": 5, "g-2": 5, "g-3": 50}), tmp_path)
    (tmp_path / "cut.ark").write_bytes(data[:-20])
    with pytest.raises(DataError) as err:
        read_alignments(f"ark:{tmp_path / 'cut.ark'}")
    message = str(err.value)
    assert str(tmp_path / "cut.ark") in message and "truncated" in message
    assert "'g-3'" in message and "last good utterance: 'g-2'" in message

    gz = write_gz(tmp_path / "ali.1.gz", data)
    (tmp_path / "cut.1.gz").write_bytes(gz.read_bytes()[:-30])
    with pytest.raises(DataError, match=r"cut\.1\.gz: .*(truncated|cannot read)"):
        read_alignments(str(tmp_path / "cut.1.gz"))


def test_garbage_and_wrong_kind_of_archive(tmp_path: Path) -> None:
    (tmp_path / "noise.bin").write_bytes(np.random.default_rng(7).bytes(6000))
    with pytest.raises(DataError, match="noise.bin: .*not a Kaldi"):
        read_alignments(str(tmp_path / "noise.bin"))
    write_mat_ark(tmp_path / "feats.ark", random_features(7, {"h-1": 4}))
    with pytest.raises(
        DataError,
        match=r"feats\.ark: utterance 'h-1': holds a 'FM' object, not an "
        r"int32 vector",
    ):
        read_alignments(f"ark:{tmp_path / 'feats.ark'}")
    _write_int_ark(tmp_path / "ali.ark", _alignments(7, {"h-2": 4}))
    with pytest.raises(DataError, match=r"ali\.ark: utterance 'h-2': holds an int32 vector"):
        read_frame_counts(f"ark:{tmp_path / 'ali.ark'}")
    (tmp_path / "words.txt").write_text("h-1 1 2 x3\n")
    with pytest.raises(DataError, match="utterance 'h-1': text vector has 'x3', not an integer"):
        read_alignments(str(tmp_path / "words.txt"))


def test_failing_pipe_is_an_error_not_an_empty_archive(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gz"
    with pytest.raises(DataError) as err:
        read_alignments(f"ark:gunzip -c {missing} |")
    message = str(err.value)
    assert f"gunzip -c {missing}" in message and "exited with status 1" in message
    assert "No such file" in message
    # A command that writes a valid archive and then fails is still a failure.
    _write_int_ark(tmp_path / "ali.ark", _alignments(8, {"i-1": 3}))
    with pytest.raises(DataError, match="exited with status 3"):
        read_alignments(f"ark:cat {tmp_path / 'ali.ark'}; exit 3 |")


def test_missing_file_and_empty_archive(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.ark: file not found"):
        read_alignments(f"ark:{tmp_path / 'nope.ark'}")
    (tmp_path / "empty.ark").write_bytes(b"")
    with pytest.raises(DataError, match=r"empty\.ark: no alignments"):
        read_alignments(str(tmp_path / "empty.ark"))
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(DataError, match="no ali.scp, ali.N.gz or ali.ark"):
        read_alignments(str(tmp_path / "empty_dir"))


def test_stale_scp_offset(tmp_path: Path) -> None:
    _write_int_ark(tmp_path / "ali.ark", _alignments(9, {"j-1": 3}))
    (tmp_path / "ali.scp").write_text(f"j-1 {tmp_path / 'ali.ark'}:99999\n")
    with pytest.raises(DataError, match=r"ali\.scp:1 .*offset 99999 is past the end"):
        read_alignments(f"scp:{tmp_path / 'ali.scp'}")


# --- features: frame counts -----------------------------------------------------------------


def test_compressed_matrix_cm_decodes_in_kaldi_io_within_quantisation_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mat = random_features(11, {"k": 40}, dim=6)["k"]
    (tmp_path / "cm.ark").write_bytes(b"k-1 " + compress(mat, "CM"))
    decoded = read_cm_with_kaldi_io(tmp_path / "cm.ark", monkeypatch)["k-1"]
    assert decoded.shape == mat.shape
    error = np.abs(decoded - mat)
    assert (error <= cm_error_bound(mat)[None, :]).all(), error.max(axis=0)
    assert error.max() > 0  # it really is quantised


def test_compressed_matrix_cm2_cm3_layout(tmp_path: Path) -> None:
    mat = random_features(12, {"k": 9}, dim=4)["k"]
    low, span, _ = global_header(mat)
    payload = compress(mat, "CM2")
    q = np.frombuffer(payload[len(b"\0BCM2 ") + 16 :], dtype="<u2").reshape(mat.shape)
    assert np.abs(from_u16(q, low, span) - mat).max() <= span / 65535
    q3 = np.frombuffer(compress(mat, "CM3")[len(b"\0BCM3 ") + 16 :], dtype=np.uint8).reshape(mat.shape)
    assert np.abs(low + span / 255 * q3 - mat).max() <= span / 255
    # kaldi-io 0.9.8 decodes only CM (it asserts the token is 'CM '), so frame counts
    # must not rely on it for CM2/CM3.
    (tmp_path / "cm2.ark").write_bytes(b"k-1 " + payload)
    with pytest.raises(AssertionError):
        dict(kaldi_io.read_mat_ark(str(tmp_path / "cm2.ark")))


def test_frame_counts_from_every_matrix_kind(tmp_path: Path) -> None:
    rows = {"m-1": 7, "m-2": 12, "m-3": 5, "m-4": 9, "m-5": 6, "m-6": 8}
    mats = random_features(13, rows)
    mats["m-2"] = mats["m-2"].astype(np.float64)
    # Binary float and double matrices, then the compressed kinds, in one archive.
    offsets = write_mat_ark(tmp_path / "feats.ark", {u: mats[u] for u in ("m-1", "m-2")})
    with open(tmp_path / "feats.ark", "ab") as handle:
        for utt, token in (("m-3", "CM"), ("m-4", "CM2"), ("m-5", "CM3")):
            offsets[utt] = handle.tell() + len(utt) + 1
            handle.write(f"{utt} ".encode() + compress(mats[utt], token))
    (tmp_path / "text.ark").write_text(text_mat_ark({"m-6": mats["m-6"]}))
    binary_rows = {u: n for u, n in rows.items() if u != "m-6"}
    assert read_frame_counts(f"ark:{tmp_path / 'feats.ark'}") == binary_rows
    assert read_frame_counts(f"ark,t:{tmp_path / 'text.ark'}") == {"m-6": 8}
    gz = write_gz(tmp_path / "feats.ark.gz", (tmp_path / "feats.ark").read_bytes())
    assert read_frame_counts(f"ark:gunzip -c {gz} |") == binary_rows

    scp = [f"{u} {tmp_path / 'feats.ark'}:{offsets[u]}" for u in binary_rows]
    scp.append(f"m-6 {tmp_path / 'text.ark'}:{len('m-6 ')}")
    scp.append(f"m-7 {tmp_path / 'feats.ark'}:{offsets['m-2']}[2:7]")  # Kaldi ranges are inclusive
    (tmp_path / "feats.scp").write_text("\n".join(scp) + "\n")
    assert read_frame_counts(f"scp:{tmp_path / 'feats.scp'}") == {**rows, "m-7": 6}


def test_frame_counts_from_a_data_dir(tmp_path: Path) -> None:
    rows = {"n-1": 4, "n-2": 6}
    offsets = write_mat_ark(tmp_path / "raw.ark", random_features(14, rows))
    scp = "".join(f"{u} {tmp_path / 'raw.ark'}:{offsets[u]}\n" for u in rows)
    data = _write_data_dir(tmp_path / "data", {"n-1": 4, "n-2": 6}, feats_scp=scp)
    assert read_frame_counts(str(data)) == rows  # utt2num_frames
    (data / "utt2num_frames").unlink()
    assert read_frame_counts(str(data)) == rows  # feats.scp
    (data / "feats.scp").unlink()
    with pytest.raises(DataError, match="no utt2num_frames or feats.scp"):
        read_frame_counts(str(data))


def test_truncated_feature_archive(tmp_path: Path) -> None:
    write_mat_ark(tmp_path / "feats.ark", random_features(15, {"o-1": 4, "o-2": 30}))
    data = (tmp_path / "feats.ark").read_bytes()
    (tmp_path / "feats.ark").write_bytes(data[:-8])
    with pytest.raises(
        DataError,
        match=r"feats\.ark: utterance 'o-2': truncated.*\(last good "
        r"utterance: 'o-1'\)",
    ):
        read_frame_counts(f"ark:{tmp_path / 'feats.ark'}")


# --- checking alignments against frame counts -----------------------------------------------


def test_matching_alignments_are_usable_as_int64(tmp_path: Path) -> None:
    frames = {"p-1": 10, "p-2": 13}
    alis = _alignments(16, frames, classes=6)
    usable, report = check_alignments(alis, frames, AlignmentCheckConfig())
    assert report.usable and report.utterances == 2 and report.frames == 23
    assert report.num_classes == max(int(a.max()) for a in alis.values()) + 1
    assert report.classes_seen == len(np.unique(np.concatenate(list(alis.values()))))
    assert all(usable[u].dtype == np.int64 and usable[u].tolist() == alis[u].tolist() for u in frames)
    report.raise_if_unusable()
    assert "utterances checked: 2 of 2" in report.summary()


def test_missing_alignments_are_one_error_or_allowed(tmp_path: Path) -> None:
    frames = {f"q-{i}": 5 for i in range(10)}
    alis = _alignments(17, {u: 5 for u in list(frames)[:3]})
    usable, report = check_alignments(alis, frames, AlignmentCheckConfig(), source="exp/ali")
    assert not report.usable and len(report.missing) == 7 and list(usable) == list(alis)
    with pytest.raises(DataError) as err:
        report.raise_if_unusable()
    message = str(err.value)
    assert message.startswith("exp/ali: ")
    assert "7 of 10 feature utterances have no alignment" in message
    assert "first: q-3, q-4, q-5, q-6, q-7, ... (2 more)" in message
    assert "align.max_missing=" in message and "--max-missing" in message and "\n" not in message

    _, report = check_alignments(alis, frames, AlignmentCheckConfig(max_missing=0.75))
    assert report.usable


def test_lengths_within_tolerance_are_padded_or_trimmed(tmp_path: Path) -> None:
    frames = {"r-1": 10, "r-2": 10, "r-3": 10}
    alis = {
        "r-1": np.array([1] * 7 + [4], dtype=np.int32),  # 2 short: repeat the last label
        "r-2": np.arange(11, dtype=np.int32) % 5,  # 1 long: trim
        "r-3": np.full(10, 2, dtype=np.int32),
    }
    usable, report = check_alignments(alis, frames, AlignmentCheckConfig(tolerance=2))
    assert report.usable and report.fixed == ["r-1", "r-2"]
    assert usable["r-1"].tolist() == [1] * 7 + [4, 4, 4]
    assert usable["r-2"].tolist() == (np.arange(10) % 5).tolist()
    assert all(len(a) == 10 and a.dtype == np.int64 for a in usable.values())


def test_length_beyond_tolerance_is_an_error(tmp_path: Path) -> None:
    frames = {"s-1": 10, "s-2": 10}
    alis = {"s-1": np.zeros(14, dtype=np.int32), "s-2": np.zeros(10, dtype=np.int32)}
    usable, report = check_alignments(alis, frames, AlignmentCheckConfig(tolerance=2), source="a.ark")
    assert report.bad_length == [("s-1", 14, 10)] and list(usable) == ["s-2"]
    with pytest.raises(
        DataError,
        match=r"a\.ark: .*1 alignment\(s\) more than 2 label\(s\) off "
        r".*first: s-1 \(got 14, expected 10\).*--tolerance",
    ):
        report.raise_if_unusable()


def test_labels_out_of_range(tmp_path: Path) -> None:
    frames = {"t-1": 4, "t-2": 4, "t-3": 4}
    alis = {
        "t-1": np.array([0, 1, 7, 9], dtype=np.int32),
        "t-2": np.array([0, -1, 2, 3], dtype=np.int32),
        "t-3": np.array([1, 2, 3, 4], dtype=np.int32),
    }
    _, report = check_alignments(alis, frames, AlignmentCheckConfig(num_classes=5))
    assert report.bad_label == [("t-1", 7), ("t-2", -1)]
    with pytest.raises(DataError) as err:
        report.raise_if_unusable()
    message = str(err.value)
    assert "2 alignment(s) with labels outside [0, 5)" in message
    assert "t-1 (label 7), t-2 (label -1)" in message and "ali-to-pdf" in message


def test_subsampling_factor_three_from_the_dir(tmp_path: Path) -> None:
    frames = {"u-1": 30, "u-2": 31, "u-3": 32, "u-4": 29, "u-5": 1}
    expected = {u: (t + 2) // 3 for u, t in frames.items()}
    assert list(expected.values()) == [10, 11, 11, 10, 1]
    alis = _alignments(18, expected)
    ali_dir = _ali_dir(tmp_path, [alis], factor=3, num_classes=10)
    usable, report = check_alignments(
        read_alignments(str(ali_dir)), frames, AlignmentCheckConfig(), source=str(ali_dir)
    )
    assert report.usable and report.subsampling_factor == 3 and not report.fixed
    assert {u: len(a) for u, a in usable.items()} == expected
    # Without the factor every alignment is about a third of the expected length.
    _, report = check_alignments(alis, frames, AlignmentCheckConfig(subsampling_factor=1))
    assert [u for u, _, _ in report.bad_length] == ["u-1", "u-2", "u-3", "u-4"]


def test_num_classes_from_dir_file_data_and_conflicting_setting(tmp_path: Path) -> None:
    frames = {"v-1": 6}
    alis = {"v-1": np.array([0, 1, 2, 3, 3, 3], dtype=np.int32)}
    ali_dir = _ali_dir(tmp_path, [alis], factor=None, num_classes=40)
    _, report = check_alignments(alis, frames, AlignmentCheckConfig(), source=str(ali_dir))
    assert (report.num_classes, report.classes_seen, report.subsampling_factor) == (40, 4, 1)
    _, report = check_alignments(alis, frames, AlignmentCheckConfig())
    assert report.num_classes == 4
    _, report = check_alignments(alis, frames, AlignmentCheckConfig(num_classes=40), source=str(ali_dir))
    assert report.num_classes == 40
    with pytest.raises(ConfigError) as err:
        check_alignments(alis, frames, AlignmentCheckConfig(num_classes=42), source=str(ali_dir))
    assert "num_classes=42" in str(err.value) and str(ali_dir / "num_classes") in str(err.value)
    assert "says 40" in str(err.value)
    (ali_dir / "frame_subsampling_factor").write_text("3\n")
    with pytest.raises(ConfigError, match="subsampling_factor=2 but .*frame_subsampling_factor says 3"):
        check_alignments(alis, frames, AlignmentCheckConfig(subsampling_factor=2), source=str(ali_dir))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tolerance", -1),
        ("subsampling_factor", -2),
        ("num_classes", -5),
        ("max_missing", 1.0),
        ("max_missing", -0.1),
    ],
)
def test_config_check(field: str, value: float) -> None:
    cfg = AlignmentCheckConfig(**{field: value})
    with pytest.raises(ConfigError, match=f"{field}={value}"):
        cfg.check()


def test_no_common_utterances(tmp_path: Path) -> None:
    _, report = check_alignments(
        {"w-1": np.zeros(3, dtype=np.int32)}, {"x-1": 3}, AlignmentCheckConfig(max_missing=0.5)
    )
    assert report.extra == ["w-1"] and not report.usable
    with pytest.raises(DataError, match="none of the 1 feature utterances has an alignment"):
        report.raise_if_unusable()


# --- the CLI -------------------------------------------------------------------------------------


def _cli_pair(tmp_path: Path, *, drop: int = 0) -> tuple[Path, Path]:
    frames = {f"spk1-utt{i}": 30 + i for i in range(6)}
    alis = _alignments(19, {u: (t + 2) // 3 for u, t in frames.items()})
    for utt in list(alis)[:drop]:
        del alis[utt]
    ali_dir = _ali_dir(
        tmp_path, [dict(list(alis.items())[:3]), dict(list(alis.items())[3:])], factor=3, num_classes=10
    )
    return ali_dir, _write_data_dir(tmp_path / "data" / "train", frames)


def test_cli_good_pair(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    ali_dir, data = _cli_pair(tmp_path)
    assert main(["check-alignments", str(ali_dir), str(data)]) == 0
    out, err = capfd.readouterr()
    assert "utterances checked: 6 of 6" in out
    assert f"frames:             {sum((30 + i + 2) // 3 for i in range(6))}" in out
    assert "classes seen:" in out and "/ 10" in out and "usable" in out
    assert "error" not in err


def _assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("asrkit: error:"), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_cli_bad_pair(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    ali_dir, data = _cli_pair(tmp_path, drop=2)
    code = main(["check-alignments", str(ali_dir), str(data), "--max-missing", "0.2"])
    out, err = capfd.readouterr()
    assert "missing alignment:  2" in out and "NOT usable" in out
    _assert_one_line_error(
        code, err, str(ali_dir), "2 of 6 feature utterances have no alignment", "spk1-utt0, spk1-utt1"
    )


def test_cli_bad_sources(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    ali_dir, data = _cli_pair(tmp_path)
    code = main(["check-alignments", f"ark:gunzip -c {tmp_path / 'gone.gz'} |", str(data)])
    _assert_one_line_error(code, capfd.readouterr().err, "gone.gz", "exited with status 1")
    code = main(["check-alignments", str(ali_dir), f"scp:{tmp_path / 'feats.scp'}"])
    _assert_one_line_error(code, capfd.readouterr().err, "feats.scp: file not found")
    code = main(["check-alignments", str(ali_dir), str(data), "--num-classes", "12"])
    _assert_one_line_error(code, capfd.readouterr().err, "num_classes=12", "says 10")
