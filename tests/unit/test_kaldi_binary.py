"""Kaldi's binary basic types (asrkit.data.kaldi_binary): every type written and read back, the
bytes against Kaldi's layout (and kaldi-io's writers), and the errors of broken input."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest

from asrkit.data.kaldi_ark import kaldi_io, write_ark
from asrkit.data.kaldi_binary import (
    BINARY_MARKER,
    BinaryReader,
    pack_float32,
    pack_float_matrix,
    pack_float_vector,
    pack_int32,
    pack_int32_vector,
    pack_int32s,
    pack_token,
    pack_uint32,
    write_float32,
    write_float_matrix,
    write_float_vector,
    write_int32,
    write_int32_vector,
    write_token,
)
from asrkit.errors import DataError


def _reader(data: bytes, where: str = "test.bin") -> BinaryReader:
    return BinaryReader(io.BytesIO(data), where)


class _Written(io.BytesIO):
    mode = "wb"  # kaldi-io's writers check the mode of the stream they are given


def test_the_bytes_are_kaldis() -> None:
    assert pack_token("<Topology>") == b"<Topology> "
    assert pack_int32(-2) == b"\x04\xfe\xff\xff\xff"
    assert pack_uint32(3) == b"\xfc\x03\x00\x00\x00"
    assert pack_float32(0.5) == b"\x04" + struct.pack("<f", 0.5)
    assert pack_int32s([1, -1]) == b"\x04\x01\x00\x00\x00\x04\xff\xff\xff\xff"
    # WriteIntegerVector: the element size, the count with no size byte, the raw elements.
    assert pack_int32_vector([7, 8]) == b"\x04\x02\x00\x00\x00\x07\x00\x00\x00\x08\x00\x00\x00"
    vector = np.array([1.5, -2.0], dtype=np.float32)
    assert pack_float_vector(vector) == b"FV \x04\x02\x00\x00\x00" + vector.tobytes()
    matrix = np.arange(6, dtype=np.float64).reshape(2, 3)
    assert pack_float_matrix(matrix) == b"DM \x04\x02\x00\x00\x00\x04\x03\x00\x00\x00" + matrix.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_objects_match_kaldi_io(dtype: type) -> None:
    rng = np.random.default_rng(0)
    for shape in [(3, 4), (0, 0), (0, 5), (1, 1)]:
        matrix = rng.normal(size=shape).astype(dtype)
        written = _Written()
        kaldi_io.write_mat(written, matrix)
        assert BINARY_MARKER + pack_float_matrix(matrix) == written.getvalue()
    vector = rng.normal(size=7).astype(dtype)
    written = _Written()
    kaldi_io.write_vec_flt(written, vector)
    assert BINARY_MARKER + pack_float_vector(vector) == written.getvalue()


def test_write_ark_writes_kaldi_ios_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    mats = {"a-1": rng.normal(size=(4, 3)).astype(np.float32), "a-2": rng.normal(size=(2, 2))}
    ints = {"b-1": np.array([3, -1, 7]), "b-2": np.zeros(0, dtype=np.int64)}
    write_ark(tmp_path / "mats.ark", mats.items())
    write_ark(tmp_path / "ints.ark", ints.items(), kind="int")
    expected_mats, expected_ints = _Written(), _Written()
    for key, mat in mats.items():
        kaldi_io.write_mat(expected_mats, mat, key=key)
    for key, vec in ints.items():
        kaldi_io.write_vec_int(expected_ints, vec.astype(np.int32), key=key)
    assert (tmp_path / "mats.ark").read_bytes() == expected_mats.getvalue()
    assert (tmp_path / "ints.ark").read_bytes() == expected_ints.getvalue()


def test_every_type_round_trips() -> None:
    out = io.BytesIO()
    write_token(out, "<Head>")
    for value in (0, 1, -1, 2**31 - 1, -(2**31)):
        write_int32(out, value)
    out.write(pack_uint32(2**32 - 1))
    write_float32(out, 0.1)
    out.write(b"\x08" + struct.pack("<d", 0.1))  # a double where a float is read: Kaldi takes it
    out.write(pack_int32s([5, -6, 7]))
    write_int32_vector(out, [4, -5, 6])
    write_int32_vector(out, [])
    write_float_vector(out, [1.0, 2.5])
    out.write(pack_float_vector(np.array([1e300, -2.0])))
    write_float_matrix(out, np.arange(6).reshape(2, 3))
    out.write(pack_float_matrix(np.zeros((0, 0))))
    write_token(out, "<Tail>")

    reader = _reader(out.getvalue())
    assert reader.peek_token() == "<Head>"
    reader.expect("<Head>")
    assert [reader.int32() for _ in range(5)] == [0, 1, -1, 2**31 - 1, -(2**31)]
    assert reader.uint32() == 2**32 - 1
    assert reader.float_value() == np.float32(0.1)
    assert reader.float_value() == 0.1
    assert reader.int32s(3).tolist() == [5, -6, 7]
    assert reader.int32_vector().tolist() == [4, -5, 6]
    assert reader.int32_vector().tolist() == []
    vector = reader.float_vector()
    assert vector.dtype == np.float32 and vector.tolist() == [1.0, 2.5]
    vector = reader.float_vector()
    assert vector.dtype == np.float64 and vector.tolist() == [1e300, -2.0]
    matrix = reader.float_matrix()
    assert matrix.dtype == np.float32 and matrix.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert reader.float_matrix().shape == (0, 0)
    assert reader.token() == "<Tail>"
    assert reader.peek_token() is None


def test_tokens_skip_whitespace_as_kaldis_read_token() -> None:
    reader = _reader(b"\n <A> \t<B> ")
    assert reader.peek_token() == "<A>"
    assert reader.token() == "<A>"
    assert reader.token() == "<B>"
    assert reader.peek_token() is None


def test_bad_values_are_refused_when_written() -> None:
    with pytest.raises(ValueError, match="no whitespace"):
        pack_token("two words")
    with pytest.raises(ValueError, match="no whitespace"):
        pack_token("")
    with pytest.raises(ValueError, match="2-d float32 or float64 array, got a 2-d int32"):
        pack_float_matrix(np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="1-d float32 or float64 array, got a 2-d float32"):
        pack_float_vector(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(OverflowError):
        pack_int32(2**31)


def test_truncated_input_names_the_file_and_what_was_cut(tmp_path: Path) -> None:
    path = tmp_path / "cut.bin"
    full = pack_token("<X>") + pack_int32(3) + pack_float_matrix(np.ones((2, 3), dtype=np.float32))
    path.write_bytes(full[:-4])
    with open(path, "rb") as stream:
        reader = BinaryReader(stream, str(path), fix="write it again")
        reader.expect("<X>")
        assert reader.int32() == 3
        with pytest.raises(DataError) as err:
            reader.float_matrix()
    assert str(err.value) == f"{path}: truncated: the 2x3 FM matrix needs 24 bytes, 20 left; write it again"
    for end, needle in [
        (0, "truncated: the file ends where a token was expected"),
        (6, "truncated: an int32 needs 5 bytes, 2 left"),
        (11, "truncated: the file ends where a token was expected"),
        (12, "truncated: the matrix size needs 10 bytes, 0 left"),
        (15, "truncated: the matrix size needs 10 bytes, 3 left"),
    ]:
        reader = _reader(full[:end], str(path))
        with pytest.raises(DataError, match=f"^{path}: {needle}; ") as err:
            reader.expect("<X>")
            reader.int32()
            reader.float_matrix()
    with pytest.raises(DataError, match="test.bin: truncated: the file ends inside a token"):
        _reader(b"<X").peek_token()


def test_wrong_token_and_wrong_sizes_name_the_file_and_what_was_expected() -> None:
    with pytest.raises(DataError, match=r"^model\.mdl: expected <TransitionModel>, found '<Nnet3>'; "):
        _reader(b"<Nnet3> ", "model.mdl").expect("<TransitionModel>")
    with pytest.raises(DataError, match=r"^m: expected a float matrix \(FM or DM\), found 'FV'"):
        _reader(pack_float_vector(np.zeros(2, dtype=np.float32)), "m").float_matrix()
    with pytest.raises(DataError, match=r"an integer is not stored as an int32 \(its size byte is not 4\)"):
        _reader(pack_uint32(1)).int32()
    with pytest.raises(DataError, match=r"unsigned integer is not stored as a uint32 .*size byte is 4"):
        _reader(pack_int32(1)).uint32()
    with pytest.raises(DataError, match="a float has size byte 2, expected 4 or 8"):
        _reader(b"\x02\x00\x00").float_value()
    with pytest.raises(DataError, match=r"bad integer vector header \(element size 8, count 1\)"):
        _reader(b"\x08\x01\x00\x00\x00").int32_vector()
    with pytest.raises(DataError, match="negative matrix size 2x-3"):
        _reader(b"FM " + pack_int32(2) + pack_int32(-3)).float_matrix()
    with pytest.raises(DataError, match="bad vector size header"):
        _reader(b"FV " + pack_uint32(2)).float_vector()
    with pytest.raises(DataError, match="no token in the 64 bytes where one was expected"):
        _reader(b"x" * 100).token()


def test_messages_name_the_table_entry_and_the_last_good_one() -> None:
    reader = _reader(pack_int32(1), "ali.ark")
    reader.last = "utt-1"
    with pytest.raises(DataError) as err:
        reader.int32s(2, utt="utt-2")
    assert str(err.value) == (
        "ali.ark: utterance 'utt-2': truncated: 2 int32 values needs 10 bytes, 5 left "
        "(last good utterance: 'utt-1'); the file is truncated or corrupt; re-create it "
        "(re-run the job that wrote it)"
    )


def test_low_level_errors_become_data_errors() -> None:
    reader = _reader(b"", "pipe")
    with pytest.raises(DataError, match=r"^pipe: cannot read \(boom\)"), reader.low_level_errors():
        raise OSError("boom")
