"""Kaldi matrices and vectors through asrkit's own reader: every kind Kaldi writes, every way in.

Quantisation bounds asserted for the compressed kinds (``range`` is the matrix's max - min):

* ``CM2`` (uint16 per value) and ``CM3`` (uint8 per value): the encoder rounds to the
  nearest of 65536 / 256 evenly spaced levels, so a value is off by half a step
  (``range / 65535`` or ``range / 255``); 0.52 of a step leaves room for the float32
  arithmetic of encoder and decoder (measured: at most 0.505 of a step).
* ``CM``: per column, half the widest step of its three percentile segments plus four
  uint16 levels of the global range for the quantised percentiles
  (:func:`tests.kaldi_fixtures.cm_error_bound`); and it must agree with kaldi-io's
  independent ``CM`` decoder to float32 rounding (1e-6 of the range).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from asrkit.data import read_matrices, read_matrix, read_vector, read_vectors
from asrkit.data.kaldi_ark import kaldi_io
from asrkit.errors import DataError
from asrkit.features.cmvn import cmvn_stats, read_cmvn
from asrkit.loader.batch import CmvnNormalizer
from asrkit.loader.opening import load_utterances
from tests import kaldi_fixtures as fx
from tests.helpers import make_data_dir


def _scp(path: Path, ark: Path, offsets: dict[str, int], suffix: str = "") -> Path:
    path.write_text("".join(f"{utt} {ark}:{offset}{suffix}\n" for utt, offset in offsets.items()))
    return path


def _assert_same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    assert list(got) == list(expected)
    for utt, mat in expected.items():
        assert got[utt].dtype == mat.dtype and got[utt].shape == mat.shape, utt
        np.testing.assert_array_equal(got[utt], mat)


# --- plain binary and text matrices ---------------------------------------------------------


def test_float_matrices_read_back_identically_via_ark_scp_and_offsets(tmp_path: Path) -> None:
    mats = fx.random_features(0, {"a-1": 7, "a-2": 1, "a-3": 12}, dim=4)
    offsets = fx.write_mat_ark(tmp_path / "feats.ark", mats)
    scp = _scp(tmp_path / "feats.scp", tmp_path / "feats.ark", offsets)
    for source in (f"ark:{tmp_path / 'feats.ark'}", str(tmp_path / "feats.ark"), f"scp:{scp}", str(scp)):
        _assert_same(dict(read_matrices(source)), mats)
    _assert_same(
        {utt: read_matrix(f"{tmp_path / 'feats.ark'}:{offset}") for utt, offset in offsets.items()}, mats
    )


def test_double_matrices_stay_float64_as_cmvn_stats_need(tmp_path: Path) -> None:
    stats = {
        "spk1": cmvn_stats(fx.random_features(1, {"x": 20})["x"]),
        "spk2": cmvn_stats(fx.random_features(2, {"x": 9})["x"]),
    }
    offsets = fx.write_mat_ark(tmp_path / "cmvn.ark", stats)
    _assert_same(dict(read_matrices(f"ark:{tmp_path / 'cmvn.ark'}")), stats)
    entry = f"{tmp_path / 'cmvn.ark'}:{offsets['spk2']}"
    assert read_matrix(entry).dtype == np.float64
    np.testing.assert_array_equal(read_cmvn(entry), stats["spk2"])
    # A lone matrix without a key, as asrkit writes cmvn_global.ark.
    with open(tmp_path / "cmvn_global.ark", "wb") as handle:
        kaldi_io.write_mat(handle, stats["spk1"] + stats["spk2"])
    np.testing.assert_array_equal(read_cmvn(tmp_path / "cmvn_global.ark"), stats["spk1"] + stats["spk2"])


def test_text_matrices(tmp_path: Path) -> None:
    mats = fx.random_features(3, {"t-1": 6, "t-2": 2}, dim=3)
    (tmp_path / "feats.txt").write_text(fx.text_mat_ark(mats) + "t-3 [ ]\n")
    got = dict(read_matrices(f"ark,t:{tmp_path / 'feats.txt'}"))
    assert list(got) == ["t-1", "t-2", "t-3"] and got["t-3"].shape == (0, 0)
    for utt, mat in mats.items():
        # %g keeps 6 significant digits: at most 5e-6 relative; text is read as float64.
        assert got[utt].dtype == np.float64
        np.testing.assert_allclose(got[utt], mat, rtol=5e-6, atol=0)
    # A scp offset points just past "key ", at the " [" of the text matrix.
    offset = fx.text_mat_ark(mats).index("t-2") + len("t-2 ")
    (tmp_path / "feats.scp").write_text(f"t-2 {tmp_path / 'feats.txt'}:{offset}\n")
    np.testing.assert_allclose(
        dict(read_matrices(f"scp:{tmp_path / 'feats.scp'}"))["t-2"], mats["t-2"], rtol=5e-6
    )
    (tmp_path / "one.txt").write_text(" [ 1 2.5\n  -3 4e-3 ]\n")  # copy-matrix --binary=false
    np.testing.assert_array_equal(read_matrix(tmp_path / "one.txt"), [[1, 2.5], [-3, 4e-3]])


# --- compressed matrices ----------------------------------------------------------------------


@pytest.mark.parametrize("token", ["CM", "CM2", "CM3"])
def test_compressed_matrices_decode_within_quantisation_error(tmp_path: Path, token: str) -> None:
    mats = fx.random_features(4, {"c-1": 40, "c-2": 5, "c-3": 123}, dim=13)
    offsets = fx.write_mat_ark(tmp_path / "cm.ark", mats, compress_as=token)
    got = dict(read_matrices(f"ark:{tmp_path / 'cm.ark'}"))
    assert list(got) == list(mats)
    for utt, mat in mats.items():
        assert got[utt].dtype == np.float32 and got[utt].shape == mat.shape
        np.testing.assert_array_equal(read_matrix(f"{tmp_path / 'cm.ark'}:{offsets[utt]}"), got[utt])
        error = np.abs(got[utt] - mat)
        if token == "CM":
            bound = fx.cm_error_bound(mat)[None, :]
        else:
            _, span, _ = fx.global_header(mat)
            bound = 0.52 * span / (65535 if token == "CM2" else 255)
        assert (error <= bound).all(), (utt, float((error / bound).max()))
        assert error.max() > 0  # it really is quantised


def test_cm_agrees_with_kaldi_io_and_empty_compressed_matrices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mat = fx.random_features(5, {"k": 64}, dim=20)["k"]
    fx.write_mat_ark(tmp_path / "cm.ark", {"k-1": mat}, compress_as="CM")
    reference = fx.read_cm_with_kaldi_io(tmp_path / "cm.ark", monkeypatch)["k-1"]
    _, span, _ = fx.global_header(mat)
    np.testing.assert_allclose(read_matrix(f"{tmp_path / 'cm.ark'}:4"), reference, rtol=0, atol=1e-6 * span)
    # Kaldi writes an empty CompressedMatrix as a 20-byte header and reads back 16 of them.
    with open(tmp_path / "cm.ark", "ab") as handle:
        handle.write(b"k-2 \0BCM " + bytes(20))
        handle.write(b"k-3 \0BCM3 " + struct.pack("<ffii", -1.0, 2.0, 1, 2) + bytes([0, 255]))
    got = dict(read_matrices(f"ark:{tmp_path / 'cm.ark'}"))
    assert list(got) == ["k-1", "k-2", "k-3"] and got["k-2"].shape == (0, 0)
    np.testing.assert_array_equal(got["k-3"], [[-1.0, 1.0]])


# --- ranges, pipes, vectors -------------------------------------------------------------------


def test_row_and_column_ranges_are_inclusive(tmp_path: Path) -> None:
    mats = fx.random_features(6, {"r-1": 10}, dim=6)
    mats["r-2"] = mats["r-1"].astype(np.float64)
    offsets = fx.write_mat_ark(tmp_path / "feats.ark", mats)
    mat, ark = mats["r-1"], tmp_path / "feats.ark"
    np.testing.assert_array_equal(read_matrix(f"{ark}:{offsets['r-1']}[2:5]"), mat[2:6])
    np.testing.assert_array_equal(read_matrix(f"{ark}:{offsets['r-1']}[3:3,1:4]"), mat[3:4, 1:5])
    np.testing.assert_array_equal(read_matrix(f"{ark}:{offsets['r-1']}[7:]"), mat[7:])
    scp = _scp(tmp_path / "feats.scp", ark, offsets, "[0:8]")
    got = dict(read_matrices(f"scp:{scp}"))
    np.testing.assert_array_equal(got["r-1"], mat[:9])
    assert got["r-2"].dtype == np.float64 and got["r-2"].shape == (9, 6)
    with pytest.raises(
        DataError,
        match=r"feats\.ark:\d+\[4:10\]: asks for rows 4\.\.10 of a 10-row "
        r"matrix; .*inclusive",
    ):
        read_matrix(f"{ark}:{offsets['r-1']}[4:10]")
    _scp(tmp_path / "bad.scp", ark, offsets, "[0:5,2:6]")
    with pytest.raises(
        DataError,
        match=r"bad\.scp:1: utterance 'r-1' asks for columns 2\.\.6 of a "
        r"6-column matrix",
    ):
        dict(read_matrices(f"scp:{tmp_path / 'bad.scp'}"))


def test_gzipped_archive_through_a_pipe(tmp_path: Path) -> None:
    mats = fx.random_features(7, {"g-1": 8, "g-2": 3})
    fx.write_mat_ark(tmp_path / "feats.ark", mats)
    gz = fx.write_gz(tmp_path / "feats.ark.gz", (tmp_path / "feats.ark").read_bytes())
    for source in (f"ark:gunzip -c {gz} |", str(gz)):
        _assert_same(dict(read_matrices(source)), mats)
    with open(tmp_path / "one.mat", "wb") as handle:
        kaldi_io.write_mat(handle, mats["g-1"])
    np.testing.assert_array_equal(read_matrix(f"cat {tmp_path / 'one.mat'} |"), mats["g-1"])


def test_float_vectors(tmp_path: Path) -> None:
    vectors = {"v-1": np.arange(5, dtype=np.float32) / 3, "v-2": np.array([1e300, -2.5])}
    with open(tmp_path / "vec.ark", "wb") as handle:
        for utt, vec in vectors.items():
            kaldi_io.write_vec_flt(handle, vec, key=utt)
    got = dict(read_vectors(f"ark:{tmp_path / 'vec.ark'}"))
    _assert_same(got, vectors)
    (tmp_path / "vec.txt").write_text("v-3 [ 1 2.5 -3 ]\nv-4 [ ]\n")
    got = dict(read_vectors(f"ark,t:{tmp_path / 'vec.txt'}"))
    assert got["v-3"].tolist() == [1, 2.5, -3] and got["v-4"].shape == (0,)
    assert read_vector(f"{tmp_path / 'vec.txt'}:4").tolist() == [1, 2.5, -3]
    with pytest.raises(DataError, match=r"utterance 'v-1': holds a FV vector, not a feature matrix"):
        dict(read_matrices(f"ark:{tmp_path / 'vec.ark'}"))


# --- broken inputs --------------------------------------------------------------------------------


def test_truncated_archives_name_the_file_and_utterance(tmp_path: Path) -> None:
    mats = fx.random_features(8, {"o-1": 5, "o-2": 30})
    for token in (None, "CM"):
        ark = tmp_path / f"{token}.ark"
        offsets = fx.write_mat_ark(ark, mats, compress_as=token)
        ark.write_bytes(ark.read_bytes()[:-8])
        with pytest.raises(
            DataError,
            match=rf"{token}\.ark: utterance 'o-2': truncated: the 30x5 "
            rf"{token or 'FM'} matrix needs \d+ bytes, \d+ left "
            r"\(last good utterance: 'o-1'\); re-create it",
        ):
            dict(read_matrices(f"ark:{ark}"))
        with pytest.raises(DataError, match=rf"{token}\.ark:{offsets['o-2']}: truncated"):
            read_matrix(f"{ark}:{offsets['o-2']}")


def test_failing_pipe_missing_file_and_foreign_objects(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gz"
    with pytest.raises(DataError, match=rf"the command `gunzip -c {missing}` exited with status 1"):
        dict(read_matrices(f"ark:gunzip -c {missing} |"))
    with pytest.raises(DataError, match=r"missing\.gz.*exited with status 1"):
        read_matrix(f"gunzip -c {missing} |")
    offsets = fx.write_mat_ark(tmp_path / "feats.ark", fx.random_features(9, {"f-1": 3}))
    with pytest.raises(DataError, match="exited with status 3"):
        dict(read_matrices(f"ark:cat {tmp_path / 'feats.ark'}; exit 3 |"))
    with pytest.raises(DataError, match=r"nope\.ark: file not found"):
        read_matrix(f"{tmp_path / 'nope.ark'}:{offsets['f-1']}")
    with pytest.raises(DataError, match=r"feats\.ark: is a table .*drop the 'ark:' prefix"):
        read_matrix(f"ark:{tmp_path / 'feats.ark'}")
    (tmp_path / "odd.ark").write_bytes(b"x-1 \0BQQ \4\3\0\0\0")
    with pytest.raises(
        DataError,
        match=r"odd\.ark: utterance 'x-1': holds a 'QQ' binary object, not a "
        r"feature matrix",
    ):
        dict(read_matrices(str(tmp_path / "odd.ark")))
    (tmp_path / "empty.mat").write_bytes(b"")
    with pytest.raises(DataError, match=r"empty\.mat: empty"):
        read_matrix(tmp_path / "empty.mat")


def test_stopping_early_on_a_pipe_is_not_an_error(tmp_path: Path) -> None:
    fx.write_mat_ark(tmp_path / "feats.ark", fx.random_features(10, {"s-1": 3, "s-2": 3}))
    matrices = read_matrices(f"ark:cat {tmp_path / 'feats.ark'}; exit 3 |")
    assert next(matrices)[0] == "s-1"
    matrices.close()  # the command's failure is not asked for: the caller stopped reading


# --- asrkit's own training input --------------------------------------------------------------


def test_load_utterances_reads_a_compressed_feats_scp(tmp_path: Path) -> None:
    data_dir = tmp_path / "data" / "train"
    data = make_data_dir(data_dir, utts=4)
    mats = fx.random_features(11, {utt: 20 + 7 * i for i, utt in enumerate(data.utt_ids)}, dim=13)
    offsets = fx.write_mat_ark(tmp_path / "raw_fbank_train.1.ark", mats, compress_as="CM")
    _scp(data_dir / "feats.scp", tmp_path / "raw_fbank_train.1.ark", offsets)
    utts = load_utterances(data_dir, CmvnNormalizer("none"), input_dim=13)
    assert [u.utt for u in utts] == data.utt_ids
    for utt in utts:
        assert utt.feats.dtype == np.float32 and utt.feats.shape == mats[utt.utt].shape
        assert (np.abs(utt.feats - mats[utt.utt]) <= fx.cm_error_bound(mats[utt.utt])[None, :]).all()

    ark = tmp_path / "raw_fbank_train.1.ark"
    ark.write_bytes(ark.read_bytes()[:-100])
    with pytest.raises(
        DataError,
        match=rf"feats\.scp: utterance '{data.utt_ids[-1]}': cannot read "
        r"features \(.*raw_fbank_train\.1\.ark:\d+: truncated.*rerun "
        r"the feature stage",
    ):
        load_utterances(data_dir, CmvnNormalizer("none"))
