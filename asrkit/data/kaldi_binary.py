"""Kaldi's binary basic types: the bytes Kaldi writes for them, and one reader for them.

Every Kaldi binary file or archive object starts with :data:`BINARY_MARKER`; inside it the
basic types of Kaldi's ``base/io-funcs.h`` and ``matrix/kaldi-vector.cc`` follow each other
with nothing in between:

====================  ======================================================================
type                  bytes
====================  ======================================================================
token                 its text, then one space (``<Topology> ``, ``FM ``)
int32                 the size byte ``\\4``, four little-endian bytes
uint32                the size byte ``\\xfc`` (-4: unsigned), four little-endian bytes
float                 ``\\4`` and a little-endian float32 (``\\8`` and a float64 are read too)
int32 values          int32 after int32, each with its size byte (the elements of an int32
                      vector in a table, Kaldi's ``BasicVectorHolder``)
integer vector        ``WriteIntegerVector``: ``\\4`` (the element size), the int32 count with
                      no size byte, the raw int32s
float vector          ``FV`` (float32) or ``DV`` (float64), the int32 size, the raw values
float matrix          ``FM`` or ``DM``, the int32 rows, the int32 columns, the values row by row
====================  ======================================================================

Public API:
    - :data:`BINARY_MARKER`; :data:`FLOAT_VECTOR_TOKENS`, :data:`FLOAT_MATRIX_TOKENS` and
      :data:`FLOAT_TYPES` (the element type each token stores).
    - ``pack_*`` — the bytes of one value: :func:`pack_token`, :func:`pack_int32`,
      :func:`pack_uint32`, :func:`pack_float32`, :func:`pack_int32s`, :func:`pack_int32_vector`,
      :func:`pack_float_vector`, :func:`pack_float_matrix` (``FV``/``FM`` for float32 values,
      ``DV``/``DM`` for float64).
    - ``write_*`` — the same written to a binary stream, as Kaldi's ``Write(os, binary=true)``
      methods write them inside an object: :func:`write_token`, :func:`write_int32`,
      :func:`write_float32`, :func:`write_int32_vector`, and :func:`write_float_vector` /
      :func:`write_float_matrix`, which write ``Vector<float>`` / ``Matrix<float>``
      (values converted to float32).
    - :class:`BinaryReader` — reads them back from a binary stream (a file, a pipe, a
      ``BytesIO``): :meth:`~BinaryReader.token`, :meth:`~BinaryReader.peek_token`,
      :meth:`~BinaryReader.expect`, :meth:`~BinaryReader.int32`, ... Every problem is a
      :class:`~asrkit.errors.DataError` naming the file (and the table entry, inside a table),
      what was expected and the fix.

The table readers (:mod:`asrkit.data.kaldi_table`), the archive writer
(:mod:`asrkit.data.kaldi_ark`), Kaldi's model files (:mod:`asrkit.gmm.model_io`) and tree files
(:mod:`asrkit.gmm.tree`) all read and write these types through this module.
"""

from __future__ import annotations

import contextlib
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import IO

import numpy as np

from asrkit.errors import DataError

BINARY_MARKER = b"\0B"
"""The two bytes that open every Kaldi binary file and binary archive object."""

#: Kaldi's ``WriteBasicType<int32>`` record: the size byte 4, then the value.
_INT32 = np.dtype([("size", "u1"), ("value", "<i4")])
#: The float vector and float matrix tokens, and the element type each stores.
FLOAT_VECTOR_TOKENS = ("FV", "DV")
FLOAT_MATRIX_TOKENS = ("FM", "DM")
FLOAT_TYPES: dict[str, np.dtype] = {
    "FV": np.dtype("<f4"),
    "DV": np.dtype("<f8"),
    "FM": np.dtype("<f4"),
    "DM": np.dtype("<f8"),
}
#: The (vector, matrix) tokens that store values of each dtype; values are read back as these.
_TOKENS_OF: dict[np.dtype, tuple[str, str]] = {
    np.dtype(np.float32): ("FV", "FM"),
    np.dtype(np.float64): ("DV", "DM"),
}
_READ_AS = {4: np.float32, 8: np.float64}
#: The longest token the reader takes before deciding there is none.
_LONGEST_TOKEN = 64
#: Bytes read at a time, so that a corrupt size cannot allocate them all up front.
_CHUNK = 1 << 24
_SPACE = b" \t\r\n"
_FIX = "the file is truncated or corrupt; re-create it (re-run the job that wrote it)"


# --- writing --------------------------------------------------------------------------------


def pack_token(token: str) -> bytes:
    """A token such as ``<Topology>``: its text and one space.

    Raises:
        ValueError: the token is empty or holds whitespace (Kaldi could not read it back).
    """
    if not token or any(char.isspace() for char in token):
        raise ValueError(f"a Kaldi token must be non-empty and hold no whitespace, got {token!r}")
    return token.encode() + b" "


def pack_int32(value: int) -> bytes:
    """Kaldi's ``WriteBasicType<int32>``: the size byte 4, then four little-endian bytes."""
    return b"\x04" + int(value).to_bytes(4, "little", signed=True)


def pack_uint32(value: int) -> bytes:
    """Kaldi's ``WriteBasicType<uint32>``: the size byte -4 (``\\xfc``), then four bytes."""
    return b"\xfc" + int(value).to_bytes(4, "little", signed=False)


def pack_float32(value: float) -> bytes:
    """Kaldi's ``WriteBasicType<float>``: the size byte 4, then a little-endian float32."""
    return b"\x04" + struct.pack("<f", value)


def pack_int32s(values: Sequence[int] | np.ndarray) -> bytes:
    """One :func:`pack_int32` record per value, back to back (vectorised)."""
    records = np.empty(len(values), dtype=_INT32)
    records["size"] = 4
    records["value"] = values
    return records.tobytes()


def pack_int32_vector(values: Sequence[int] | np.ndarray) -> bytes:
    """Kaldi's ``WriteIntegerVector<int32>``: the size byte 4, the int32 count (no size byte),
    the raw int32s."""
    data = np.asarray(values, dtype="<i4")
    return b"\x04" + struct.pack("<i", data.size) + data.tobytes()


def pack_float_vector(values: np.ndarray) -> bytes:
    """Kaldi's binary ``Vector::Write``: ``FV`` for float32 values, ``DV`` for float64, the
    size, the values.

    Raises:
        ValueError: ``values`` is not a 1-d float32 or float64 numpy array.
    """
    return _pack_floats(values, dims=1)


def pack_float_matrix(values: np.ndarray) -> bytes:
    """Kaldi's binary ``Matrix::Write``: ``FM`` for float32 values, ``DM`` for float64, rows,
    columns, the values row by row.

    Raises:
        ValueError: ``values`` is not a 2-d float32 or float64 numpy array.
    """
    return _pack_floats(values, dims=2)


def _pack_floats(values: np.ndarray, *, dims: int) -> bytes:
    kind = "vector" if dims == 1 else "matrix"
    if not isinstance(values, np.ndarray):
        raise ValueError(f"a Kaldi float {kind} needs a numpy array, got {type(values).__name__}")
    tokens = _TOKENS_OF.get(values.dtype)
    if values.ndim != dims or tokens is None:
        raise ValueError(
            f"a Kaldi float {kind} needs a {dims}-d float32 or float64 array, got a {values.ndim}-d "
            f"{values.dtype} one"
        )
    token = tokens[dims - 1]
    shape = b"".join(pack_int32(size) for size in values.shape)
    return pack_token(token) + shape + values.astype(FLOAT_TYPES[token], copy=False).tobytes()


def write_token(out: IO[bytes], token: str) -> None:
    """Write :func:`pack_token`."""
    out.write(pack_token(token))


def write_int32(out: IO[bytes], value: int) -> None:
    """Write :func:`pack_int32`."""
    out.write(pack_int32(value))


def write_float32(out: IO[bytes], value: float) -> None:
    """Write :func:`pack_float32`."""
    out.write(pack_float32(value))


def write_int32_vector(out: IO[bytes], values: Sequence[int] | np.ndarray) -> None:
    """Write :func:`pack_int32_vector` (Kaldi's ``WriteIntegerVector<int32>``)."""
    out.write(pack_int32_vector(values))


def write_float_vector(out: IO[bytes], values: Sequence[float] | np.ndarray) -> None:
    """Kaldi's binary ``Vector<float>::Write``: ``FV``, the size, the values as float32."""
    out.write(pack_float_vector(np.asarray(values, dtype=np.float32).reshape(-1)))


def write_float_matrix(out: IO[bytes], values: np.ndarray) -> None:
    """Kaldi's binary ``Matrix<float>::Write``: ``FM``, rows, columns, the float32s row by row."""
    out.write(pack_float_matrix(np.asarray(values, dtype=np.float32)))


# --- reading --------------------------------------------------------------------------------


class BinaryReader:
    """Reads Kaldi's binary basic types from one stream (after the ``\\0B`` marker).

    Errors name ``where`` (the file, ``file.ark:offset``, ``scp:line``) and, inside a table,
    the entry: the ``utt`` arguments name the utterance being read (None outside a table) and
    :attr:`last` the last one read completely.

    Attributes:
        stream: the binary stream; :meth:`peek_token` needs it seekable, nothing else does.
        where: names the stream in messages.
        fix: what messages tell the user to do when the call gives no fix of its own.
        last: the last table entry read completely, named in messages; None outside a table.
    """

    def __init__(self, stream: IO[bytes], where: str, *, fix: str = _FIX) -> None:
        self.stream = stream
        self.where = where
        self.fix = fix
        self.last: str | None = None

    def fail(self, problem: str, *, utt: str | None = None, fix: str | None = None) -> DataError:
        """The error for ``problem``: ``where: [utterance 'utt': ]problem[ (last good ...)]; fix``."""
        at = f"utterance '{utt}': " if utt else ""
        good = f" (last good utterance: '{self.last}')" if self.last else ""
        return DataError(f"{self.where}: {at}{problem}{good}; {fix or self.fix}")

    @contextlib.contextmanager
    def low_level_errors(self) -> Iterator[None]:
        """Turn I/O and decompression failures into a :class:`DataError` naming the place."""
        try:
            yield
        except (OSError, EOFError, zlib.error, struct.error) as err:
            raise self.fail(f"cannot read ({err})") from err

    def exact(self, size: int, *, what: str, utt: str | None = None) -> bytes:
        """``size`` bytes, read in chunks so that a corrupt size cannot allocate them all up front.

        Raises:
            DataError: fewer are left (``truncated: <what> needs N bytes, M left``).
        """
        data = self.stream.read(min(size, _CHUNK))
        if len(data) == size:
            return data
        parts, left = [data], size - len(data)
        while left and parts[-1]:
            parts.append(self.stream.read(min(left, _CHUNK)))
            left -= len(parts[-1])
        data = b"".join(parts)
        if len(data) != size:
            raise self.fail(f"truncated: {what} needs {size} bytes, {len(data)} left", utt=utt)
        return data

    def token(self, *, utt: str | None = None) -> str:
        """The next token, as Kaldi's ``ReadToken``: whitespace is skipped, then the text up to
        the space that ends the token (which is consumed)."""
        read = self.stream.read
        char = read(1)
        while char and char in _SPACE:
            char = read(1)
        token = bytearray()
        while char and char != b" ":
            token += char
            if len(token) > _LONGEST_TOKEN:
                raise self.fail(f"no token in the {_LONGEST_TOKEN} bytes where one was expected", utt=utt)
            char = read(1)
        if not char:
            raise self.fail("truncated: the file ends where a token was expected", utt=utt)
        return token.decode("latin-1")

    def peek_token(self, *, utt: str | None = None) -> str | None:
        """The next token, left unread; None at the end of the stream (which must be seekable)."""
        start = self.stream.tell()
        ahead = self.stream.read(_LONGEST_TOKEN + 8).lstrip(_SPACE)
        self.stream.seek(start)
        token, space, _ = ahead.partition(b" ")
        if ahead and not space and len(ahead) <= _LONGEST_TOKEN:
            raise self.fail("truncated: the file ends inside a token", utt=utt)
        return token.decode("latin-1") if ahead else None

    def expect(self, token: str, *, utt: str | None = None) -> None:
        """Read the next token, which must be ``token``."""
        found = self.token(utt=utt)
        if found != token:
            raise self.fail(f"expected {token}, found {found[:40]!r}", utt=utt)

    def int32s(self, count: int, *, utt: str | None = None) -> np.ndarray:
        """``count`` int32 basic types, each with its size byte, as int64."""
        what = "an int32" if count == 1 else f"{count} int32 values"
        records = np.frombuffer(self.exact(5 * count, what=what, utt=utt), dtype=_INT32)
        if (records["size"] != 4).any():
            raise self.fail("an integer is not stored as an int32 (its size byte is not 4)", utt=utt)
        return records["value"].astype(np.int64)

    def int32(self, *, utt: str | None = None) -> int:
        """One int32 basic type (size byte 4)."""
        data = self.exact(5, what="an int32", utt=utt)
        if data[0] != 4:
            raise self.fail("an integer is not stored as an int32 (its size byte is not 4)", utt=utt)
        return int.from_bytes(data[1:], "little", signed=True)

    def uint32(self, *, utt: str | None = None) -> int:
        """One uint32 basic type (size byte -4)."""
        data = self.exact(5, what="a uint32", utt=utt)
        if data[0] != 0xFC:
            raise self.fail(
                f"an unsigned integer is not stored as a uint32 (its size byte is {data[0]}, not -4)",
                utt=utt,
            )
        return int.from_bytes(data[1:], "little", signed=False)

    def float_value(self, *, utt: str | None = None) -> float:
        """One float basic type: size byte 4 and a float32, or 8 and a float64."""
        size = self.exact(1, what="a float", utt=utt)[0]
        if size not in (4, 8):
            raise self.fail(f"a float has size byte {size}, expected 4 or 8", utt=utt)
        data = self.exact(size, what="a float", utt=utt)
        return float(np.frombuffer(data, dtype="<f4" if size == 4 else "<f8")[0])

    def int32_vector(self, *, utt: str | None = None) -> np.ndarray:
        """An integer vector as ``WriteIntegerVector<int32>`` writes it, as int64."""
        head = self.exact(5, what="an integer vector's size", utt=utt)
        (count,) = struct.unpack_from("<i", head, 1)
        if head[0] != 4 or count < 0:
            raise self.fail(f"bad integer vector header (element size {head[0]}, count {count})", utt=utt)
        data = self.exact(4 * count, what=f"{count} int32s", utt=utt)
        return np.frombuffer(data, dtype="<i4").astype(np.int64)

    def float_vector(self, *, utt: str | None = None) -> np.ndarray:
        """A float vector (``FV`` or ``DV`` token, size, values): float32 or float64."""
        return self._float_object(FLOAT_VECTOR_TOKENS, "vector", utt)

    def float_matrix(self, *, utt: str | None = None) -> np.ndarray:
        """A float matrix (``FM`` or ``DM`` token, rows, columns, values): float32 or float64."""
        return self._float_object(FLOAT_MATRIX_TOKENS, "matrix", utt)

    def float_shape(self, token: str, *, utt: str | None = None) -> tuple[int, ...]:
        """The size of the float vector, or rows and columns of the float matrix, whose
        ``token`` (``FV``, ``DV``, ``FM``, ``DM``) was just read."""
        kind = "vector" if token in FLOAT_VECTOR_TOKENS else "matrix"
        dims = 1 if kind == "vector" else 2
        head = self.exact(5 * dims, what=f"the {kind} size", utt=utt)
        if any(head[5 * d] != 4 for d in range(dims)):
            raise self.fail(f"bad {kind} size header", utt=utt)
        shape = struct.unpack("<" + "xi" * dims, head)
        if min(shape) < 0:
            raise self.fail(f"negative {kind} size {'x'.join(map(str, shape))}", utt=utt)
        return shape

    def float_values(self, token: str, shape: tuple[int, ...], *, utt: str | None = None) -> np.ndarray:
        """The values of the float vector or matrix of ``token`` and ``shape`` (as read by
        :meth:`float_shape`), float32 or float64 as stored."""
        stored = FLOAT_TYPES[token]
        if len(shape) == 1:
            what = f"the {shape[0]}-dim {token} vector"
        else:
            what = f"the {'x'.join(map(str, shape))} {token} matrix"
        data = self.exact(int(np.prod(shape)) * stored.itemsize, what=what, utt=utt)
        return np.frombuffer(data, dtype=stored).reshape(shape).astype(_READ_AS[stored.itemsize])

    def _float_object(self, tokens: tuple[str, ...], kind: str, utt: str | None) -> np.ndarray:
        token = self.token(utt=utt)
        if token not in tokens:
            expected = " or ".join(tokens)
            raise self.fail(f"expected a float {kind} ({expected}), found {token[:40]!r}", utt=utt)
        return self.float_values(token, self.float_shape(token, utt=utt), utt=utt)


__all__ = [
    "BINARY_MARKER",
    "FLOAT_MATRIX_TOKENS",
    "FLOAT_TYPES",
    "FLOAT_VECTOR_TOKENS",
    "BinaryReader",
    "pack_float32",
    "pack_float_matrix",
    "pack_float_vector",
    "pack_int32",
    "pack_int32_vector",
    "pack_int32s",
    "pack_token",
    "pack_uint32",
    "write_float32",
    "write_float_matrix",
    "write_float_vector",
    "write_int32",
    "write_int32_vector",
    "write_token",
]
