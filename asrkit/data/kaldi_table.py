"""Reading Kaldi tables and objects: matrices (plain and compressed), vectors, scp and ark.

Public API:
    - :func:`read_matrix`, :func:`read_vector` — one object from an rxfilename: a file,
      ``file.ark:offset``, ``file.ark:offset[first:last]`` (an inclusive row range, optionally
      ``[r1:r2,c1:c2]``), ``cmd |`` or ``-`` (stdin).
    - :func:`read_matrix_at` — the matrix at an offset of an archive that is already open;
      :func:`read_float_matrix_at`, its fast path for a float matrix of known shape.
    - :func:`read_matrices`, :func:`read_vectors` — every ``(key, object)`` of an rspecifier
      (``ark:``, ``scp:``, ``ark:gunzip -c x.gz |``), in table order.

Objects Kaldi writes, binary (``\\0B`` + a type token) or text:

=========  ===========================================================  ================
token      layout after the token                                       returned dtype
=========  ===========================================================  ================
``FM``     ``\\4`` int32 rows, ``\\4`` int32 cols, float32 row-major      float32
``DM``     the same with float64 values                                 float64
``CM``     global header, per column 4 uint16 percentiles, then one     float32
           byte per value, column-major
``CM2``    global header, one uint16 per value, row-major               float32
``CM3``    global header, one uint8 per value, row-major                float32
``FV/DV``  ``\\4`` int32 size, float32 / float64 values                  float32 / float64
text       ``[`` rows of numbers, one per line, ``]``                   float64
=========  ===========================================================  ================

The global header of the compressed kinds is ``float min, float range, int32 rows, int32 cols``
(Kaldi keeps its format field out of the file; the token says it). ``CM`` is what
``copy-feats --compress=true`` and ``make_fbank.sh``/``make_mfcc.sh`` write by default. A text
matrix carries no precision, so it is parsed as float64 and nothing is lost.

Everything is parsed here rather than by kaldi-io 0.9.8, which rejects ``CM2``/``CM3``, passes
``np.reshape`` a ``newshape`` keyword numpy 2.4 no longer accepts (so ``CM`` fails too), checks a
pipe's exit status in a thread that cannot report it (a failing ``gunzip -c x.gz |`` reads as
an empty archive) and stops at assertions. Every problem here is a :class:`DataError` naming
the file (and the key) and the fix. Kaldi's basic types (tokens, int32s, ``FV``/``FM``
objects) are read through :class:`asrkit.data.kaldi_binary.BinaryReader`, which
:class:`TableReader` extends; archives are written by :func:`asrkit.data.kaldi_ark.write_ark`.

The building blocks — :func:`parse_rspecifier`, :func:`read_table` and :class:`TableReader` —
are shared with the other table readers (alignments in :mod:`asrkit.targets.alignments`).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

import numpy as np

from asrkit.data.kaldi_binary import (
    BINARY_MARKER,
    FLOAT_MATRIX_TOKENS,
    FLOAT_TYPES,
    FLOAT_VECTOR_TOKENS,
    BinaryReader,
    pack_int32,
    pack_token,
)
from asrkit.errors import DataError

_T = TypeVar("_T")

#: ``ark:``, ``scp:``, ``ark,t:``, ``scp,s,cs:`` ... — the options only matter to Kaldi's
#: own readers (sorted, once-only access); reading everything in order ignores them.
_RSPECIFIER = re.compile(r"^(ark|scp)((?:,[A-Za-z]+)*):(.*)$", re.DOTALL)
#: ``file.ark:1234`` — a byte offset into an archive, as written in scp files.
_OFFSET = re.compile(r"^(.+):([0-9]+)$", re.DOTALL)
#: ``file.ark:1234[0:99]`` or ``[0:99,0:12]`` — an inclusive row (and column) range of a matrix.
_RANGE = re.compile(r"^(.+)\[(\d*):(\d*)(?:,(\d*):(\d*))?\]$", re.DOTALL)
_GZIP_MAGIC = b"\x1f\x8b"
_LONGEST_KEY = 4096

_REWRITE = "re-create it (re-run the job that wrote it) or check that this is the right file"
_FEATURES = "pass the feature archive (feats.scp / ark)"

#: What opens a binary float32 matrix: the marker and the ``FM`` token (rows and columns follow).
_FLOAT_MATRIX_HEAD = BINARY_MARKER + pack_token("FM")
#: Payload bytes per column of a compressed matrix of ``rows`` rows.
_COMPRESSED_COLUMN = {"CM": lambda rows: 8 + rows, "CM2": lambda rows: 2 * rows, "CM3": lambda rows: rows}

#: Reads one object, given the reader, the entry's key (None for a lone object) and the
#: first byte after the key: :meth:`TableReader.matrix`, :meth:`TableReader.vector`, ...
Value = Callable[["TableReader", str | None, bytes], _T]


# --- public API ---------------------------------------------------------------------------


def read_matrix(rxfilename: str | Path) -> np.ndarray:
    """One Kaldi matrix, decompressed.

    Args:
        rxfilename: ``file.ark:123``, ``file.ark:123[0:9]`` (rows 0..9, inclusive),
            ``file.ark:123[0:9,0:12]``, a file holding one matrix (gzip is detected),
            ``cmd |`` or ``-``.

    Returns:
        ``(rows, cols)``: float32 for ``FM`` and the compressed kinds, float64 for ``DM`` and text.

    Raises:
        DataError: missing file, failing command, corrupt or truncated data, an unknown
            object, a bad range — naming ``rxfilename``.
    """
    return _read_object(str(rxfilename), TableReader.matrix)


def read_matrices(rspecifier: str) -> Iterator[tuple[str, np.ndarray]]:
    """Every ``(key, matrix)`` of a table, in order, read as it is iterated.

    Args:
        rspecifier: ``ark[,opts]:PATH``, ``ark:CMD |``, ``scp[,opts]:PATH`` (lines
            ``key file.ark:offset``, optionally with a ``[first:last]`` row range), or a bare
            path (``*.scp`` is read as an scp, anything else as an archive; gzip is detected).

    Yields:
        key and matrix, dtypes as in :func:`read_matrix`. A command's failure is reported
        when the table is read to its end.

    Raises:
        DataError: as :func:`read_matrix`, naming the table (and scp line) and the key.
    """
    return _read_objects(rspecifier, "matrix", TableReader.matrix)


def read_matrix_at(handle: IO[bytes], offset: int, *, where: str, utt: str | None = None) -> np.ndarray:
    """The matrix at byte ``offset`` of an open archive (an scp entry's ``file.ark:offset``).

    The streaming data path keeps one handle per archive and reads entries in any order
    through it, so an archive is opened once however many of its entries are read.

    Raises:
        DataError: corrupt or truncated data, or an object that is not a matrix, naming
            ``where`` (and ``utt`` when given).
    """
    handle.seek(offset)
    return _read_at(
        handle,
        where,
        utt,
        TableReader.matrix,
        empty="nothing at this offset",
        fix="the scp is stale or the archive was cut short; regenerate both (feature stage, --force)",
    )


def read_float_matrix_at(
    handle: IO[bytes], offset: int, *, rows: int, cols: int, out: np.ndarray | None = None
) -> np.ndarray | None:
    """The binary ``FM`` matrix of ``rows x cols`` at ``offset`` in one header read and one
    data read, as float32 (read straight into ``out``, a C-contiguous float32 array of that
    shape, when given); None when the entry is anything else (another kind, another shape,
    cut short), for :func:`read_matrix_at` to read or report."""
    handle.seek(offset)
    expected = _FLOAT_MATRIX_HEAD + pack_int32(rows) + pack_int32(cols)
    if handle.read(len(expected)) != expected:
        return None
    if out is None:
        out = np.empty((rows, cols), dtype="<f4")
    if handle.readinto(out.data.cast("B")) != rows * cols * 4:  # type: ignore[attr-defined]
        return None
    return out


def read_vector(rxfilename: str | Path) -> np.ndarray:
    """One Kaldi float vector (``FV`` float32, ``DV`` float64, text float64), as :func:`read_matrix`."""
    return _read_object(str(rxfilename), TableReader.vector)


def read_vectors(rspecifier: str) -> Iterator[tuple[str, np.ndarray]]:
    """Every ``(key, float vector)`` of a table, in order, as :func:`read_matrices`."""
    return _read_objects(rspecifier, "vector", TableReader.vector)


# --- tables -------------------------------------------------------------------------------


def is_rspecifier(source: str) -> bool:
    """Whether ``source`` starts with ``ark:``/``scp:`` (with options such as ``ark,t:``)."""
    return _RSPECIFIER.match(source) is not None


def parse_rspecifier(source: str, *, what: str) -> tuple[str, str]:
    """``(kind, target)`` with kind ``ark`` or ``scp``; bare paths are classified by name."""
    match = _RSPECIFIER.match(source)
    if match:
        kind, target = match.group(1), match.group(3).strip()
        if not target:
            raise DataError(f"{source!r}: no {what} file after '{kind}:'; write e.g. {kind}:PATH")
        return kind, target
    if not source.strip():
        raise DataError(f"empty {what} source; give a path or a Kaldi rspecifier such as ark:PATH")
    return ("scp" if source.endswith(".scp") else "ark"), source.strip()


def read_table(
    kind: str, target: str, *, where: str, value: Value[_T]
) -> Generator[tuple[str, _T, str], None, None]:
    """Every ``(key, value, where)`` of an archive (``kind="ark"``) or an scp, in order.

    Args:
        kind, target: from :func:`parse_rspecifier`.
        where: names the table in messages.
        value: reads one object, e.g. :meth:`TableReader.matrix`; it is given the reader,
            the key and the first byte after the key.

    Yields:
        The key, its object and where it was read (the archive, or ``scp:line``).
    """
    read = _read_ark if kind == "ark" else _read_scp
    return read(target, where=where, value=value)


def _read_ark(rx: str, *, where: str, value: Value[_T]) -> Generator[tuple[str, _T, str], None, None]:
    with _open_input(rx, where=where) as stream:
        reader = TableReader(stream, where)
        with reader.low_level_errors():
            while (head := reader.key()) is not None:
                key, ended_by = head
                item = value(reader, key, ended_by)
                reader.last = key
                yield key, item, where


def _read_scp(rx: str, *, where: str, value: Value[_T]) -> Generator[tuple[str, _T, str], None, None]:
    with _open_input(rx, where=where) as stream, TableReader(stream, where).low_level_errors():
        data = stream.read()
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise DataError(
            f"{where}: not a text scp file (undecodable bytes); pass scp: only for "
            "'utt file:offset' lists, ark: for archives"
        ) from None
    with _SeekCache() as files:
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            key, *rest = line.split(None, 1)
            entry = rest[0].strip() if rest else ""
            entry_where = f"{rx}:{lineno}"
            if not entry:
                raise DataError(
                    f"{entry_where}: utterance '{key}' has no file; each line must be 'utt file.ark:offset'"
                )
            entry, ranges = _split_range(entry)
            with files.open(entry, where=f"{entry_where} ({entry})") as handle:
                item = _read_at(
                    handle,
                    f"{entry_where} ({entry})",
                    key,
                    value,
                    empty="nothing at this offset",
                    fix="the scp is stale; regenerate it with the archive",
                )
            if ranges is not None:
                item = _apply_range(item, ranges, key=key, where=entry_where)
            yield key, item, entry_where


def _read_objects(rspecifier: str, what: str, value: Value[_T]) -> Iterator[tuple[str, _T]]:
    kind, target = parse_rspecifier(rspecifier, what=what)
    entries = read_table(kind, target, where=rspecifier, value=value)
    # Closed here, not whenever it is collected, so that a caller who stops early
    # releases the file or command at once.
    with contextlib.closing(entries):
        for key, item, _ in entries:
            yield key, item


def _read_object(rx: str, value: Value[_T]) -> _T:
    rx = rx.strip()
    if not rx:
        raise DataError("empty rxfilename; give a file, file.ark:offset or a 'cmd |'")
    if is_rspecifier(rx):
        raise DataError(
            f"{rx}: is a table (rspecifier), not one object; drop the "
            f"'{rx.split(':', 1)[0]}:' prefix or read every entry of the table"
        )
    entry, ranges = _split_range(rx)
    with _open_input(entry, where=rx) as stream:
        item = _read_at(stream, rx, None, value, empty="empty: nothing to read", fix=_REWRITE)
    return item if ranges is None else _apply_range(item, ranges, key=None, where=rx)


def _read_at(stream: IO[bytes], where: str, key: str | None, value: Value[_T], *, empty: str, fix: str) -> _T:
    reader = TableReader(stream, where)
    with reader.low_level_errors():
        first = stream.read(1)
        if not first:
            raise reader.fail(empty, utt=key, fix=fix)
        return value(reader, key, first)


# --- row and column ranges ------------------------------------------------------------------


def _split_range(entry: str) -> tuple[str, re.Match[str] | None]:
    """``(rxfilename, range match)``: the ``[..]`` suffix of a file entry, None for none or a pipe."""
    match = _RANGE.match(entry) if not entry.endswith("|") else None
    return (match.group(1), match) if match else (entry, None)


def _apply_range(item: _T, ranges: re.Match[str], *, key: str | None, where: str) -> _T:
    """Kaldi's inclusive ``[first:last]`` / ``[first:last,first:last]`` of a matrix (or its row count)."""
    at = f"utterance '{key}' " if key else ""
    if isinstance(item, int):
        rows = item
    elif isinstance(item, np.ndarray) and item.ndim == 2:
        rows = item.shape[0]
    else:
        raise DataError(f"{where}: {at}has a row range, which only matrices can have; remove the [..] suffix")
    first, last = _bounds(ranges.group(2), ranges.group(3), rows, "rows", at=at, where=where)
    if isinstance(item, int):
        return last - first + 1  # type: ignore[return-value]
    assert isinstance(item, np.ndarray)
    selected = item[first : last + 1]
    if ranges.group(4) is not None:
        col_first, col_last = _bounds(
            ranges.group(4), ranges.group(5), item.shape[1], "columns", at=at, where=where
        )
        selected = selected[:, col_first : col_last + 1]
    return selected.copy()  # type: ignore[return-value]


def _bounds(first_text: str, last_text: str, size: int, what: str, *, at: str, where: str) -> tuple[int, int]:
    first = int(first_text or 0)
    last = int(last_text) if last_text else size - 1
    if not 0 <= first <= last < size:
        raise DataError(
            f"{where}: {at}asks for {what} {first}..{last} of a {size}-{what[:-1]} "
            "matrix; fix the range (Kaldi ranges are inclusive)"
        )
    return first, last


# --- opening rxfilenames ------------------------------------------------------------------


@contextlib.contextmanager
def _open_input(rx: str, *, where: str) -> Iterator[IO[bytes]]:
    """Open a Kaldi rxfilename: ``cmd |``, ``-`` (stdin), ``path`` or ``path:offset``.

    A plain file that starts with the gzip magic is decompressed, so bare ``ali.1.gz``
    and ``ark:ali.1.gz`` work (Kaldi itself needs ``ark:gunzip -c ali.1.gz |``).
    """
    rx = rx.strip()
    if rx.endswith("|"):
        with _open_pipe(rx[:-1].strip(), where=where) as stream:
            yield stream
        return
    if rx == "-":
        yield sys.stdin.buffer
        return
    path, offset = rx, None
    match = _OFFSET.match(rx)
    if match:
        path, offset = match.group(1), int(match.group(2))
    with _open_file(path, where=where) as handle:
        if offset is not None:
            _seek(handle, offset, path=path, where=where)
            yield handle
        elif handle.peek(2)[:2] == _GZIP_MAGIC:
            with gzip.GzipFile(fileobj=handle, mode="rb") as unzipped:
                yield unzipped  # type: ignore[misc]
        else:
            yield handle


def _open_file(path: str, *, where: str) -> io.BufferedReader:
    prefix = f"{where}: " if where != path else ""
    try:
        return open(path, "rb")  # the caller closes it
    except FileNotFoundError:
        raise DataError(
            f"{prefix}{path}: file not found; check the path (did the job that writes it run?)"
        ) from None
    except IsADirectoryError:
        raise DataError(f"{prefix}{path}: is a directory, expected a file") from None
    except OSError as err:
        raise DataError(f"{prefix}{path}: cannot open ({err.strerror}); check its permissions") from None


def _seek(handle: io.BufferedReader, offset: int, *, path: str, where: str) -> None:
    size = os.fstat(handle.fileno()).st_size
    if offset >= size:
        raise DataError(
            f"{where}: offset {offset} is past the end of {path} ({size} bytes); the scp "
            "is stale — regenerate it together with the archive"
        )
    handle.seek(offset)


@contextlib.contextmanager
def _open_pipe(command: str, *, where: str) -> Iterator[IO[bytes]]:
    """Read the output of ``command`` (run by /bin/sh, as Kaldi does); a failure is an error.

    The command's stderr is kept and its last line quoted if it fails. Reading stops
    early only on a parse error; then the command's own failure, if any, is reported
    instead, as it is the likely cause. A reader that is closed early (a lazy table
    whose caller stopped iterating) does not ask how the command ended.
    """
    with tempfile.TemporaryFile() as stderr:
        try:
            proc = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=stderr)
        except OSError as err:
            raise DataError(f"{where}: cannot run `{command}` ({err.strerror})") from None
        assert proc.stdout is not None
        try:
            yield proc.stdout
            # An scp entry may read one header from a command: drain the rest so that the
            # exit status is the command's own, not a SIGPIPE from an early close.
            while proc.stdout.read(1 << 20):
                pass
        except BaseException as exc:
            proc.stdout.close()
            status = _finish(proc)
            if not isinstance(exc, GeneratorExit) and status > 0 and status != 128 + signal.SIGPIPE:
                raise _command_failed(command, status, stderr, where=where) from None
            raise
        proc.stdout.close()
        status = proc.wait()
        if status != 0:
            raise _command_failed(command, status, stderr, where=where)


def _finish(proc: subprocess.Popen) -> int:
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return 0


def _command_failed(command: str, status: int, stderr: IO[bytes], *, where: str) -> DataError:
    stderr.seek(0)
    said = [line.strip() for line in stderr.read().decode("utf-8", "replace").splitlines() if line.strip()]
    how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
    quote = f" ({said[-1][:300]})" if said else ""
    return DataError(
        f"{where}: the command `{command}` {how}{quote}; run it in a shell to see why, "
        "then fix the path or the command"
    )


class _SeekCache:
    """Keeps the last opened archive of an scp open: consecutive entries share a file."""

    def __init__(self) -> None:
        self._path: str | None = None
        self._handle: io.BufferedReader | None = None

    def __enter__(self) -> _SeekCache:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.close()

    @contextlib.contextmanager
    def open(self, rx: str, *, where: str) -> Iterator[IO[bytes]]:
        match = _OFFSET.match(rx)
        if match is None:
            with _open_input(rx, where=where) as stream:
                yield stream
            return
        path, offset = match.group(1), int(match.group(2))
        if path != self._path or self._handle is None:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
            self._handle = _open_file(path, where=where)
            self._path = path
        _seek(self._handle, offset, path=path, where=where)
        yield self._handle


# --- parsing objects ------------------------------------------------------------------------


@dataclass(frozen=True)
class _MatrixHeader:
    """A binary matrix's token, shape and the bytes of data that follow its header."""

    token: str
    rows: int
    cols: int
    size: int
    min_value: float = 0.0
    span: float = 0.0


class TableReader(BinaryReader):
    """Reads Kaldi table entries and objects from one binary stream; errors name ``where``.

    ``utt`` arguments name the entry in messages; None for a lone object (an rxfilename).
    :attr:`last` is the last utterance read completely. The basic types (:meth:`exact`,
    :meth:`int32s`, ...) and the error messages (:meth:`fail`, :meth:`low_level_errors`) are
    :class:`~asrkit.data.kaldi_binary.BinaryReader`'s.
    """

    def __init__(self, stream: IO[bytes], where: str) -> None:
        super().__init__(stream, where, fix=_REWRITE)

    def skip(self, size: int, *, utt: str | None) -> None:
        stream = self.stream
        if isinstance(stream, io.BufferedReader) and stream.seekable():
            end = stream.tell() + size
            if end > os.fstat(stream.fileno()).st_size:
                raise self.fail(f"truncated: the matrix needs {size} bytes of data", utt=utt)
            stream.seek(end)
            return
        left = size
        while left:
            chunk = stream.read(min(left, 1 << 20))
            if not chunk:
                raise self.fail(
                    f"truncated: the matrix needs {size} bytes of data, {size - left} left", utt=utt
                )
            left -= len(chunk)

    def key(self) -> tuple[str, bytes] | None:
        """The next utterance id and the byte that ended it; None at the end of the archive."""
        char = self.stream.read(1)
        # NUL bytes are skipped too: Kaldi writes an empty CompressedMatrix with a 20-byte
        # header but reads 16, leaving four zero bytes before the next key.
        while char and char in b" \t\r\n\0":
            char = self.stream.read(1)
        if not char:
            return None
        key = bytearray()
        while char and char not in b" \t\n":
            key += char
            if len(key) > _LONGEST_KEY:
                raise self.fail(
                    f"no utterance id in the first {_LONGEST_KEY} bytes — not a Kaldi "
                    "archive (a compressed or foreign file?)"
                )
            char = self.stream.read(1)
        try:
            utt = key.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(
                "an utterance id is not text — not a Kaldi archive (a compressed or foreign file?)"
            ) from None
        if not char:
            raise self.fail("truncated: the archive ends right after the id", utt=utt)
        return utt, char

    def begin(self, utt: str | None, first: bytes) -> bytes:
        """The object's first byte after the key's separator; ``\\0`` once a ``\\0B`` marker is read."""
        if first in (b" ", b"\t"):
            first = self.stream.read(1)
        if not first:
            raise self.fail("truncated: nothing after the id", utt=utt)
        if first == b"\0" and self.exact(1, utt=utt, what="the binary marker") != b"B":
            raise self.fail("bad binary marker (expected '\\0B')", utt=utt)
        return first

    def type_token(self, *, utt: str | None) -> str:
        """A binary object's type token (``FM``, ``CM2``, ...), read up to its space; at most
        nine bytes are read, so that a foreign object (an int32 vector) is named, not parsed."""
        token = bytearray()
        while (char := self.exact(1, utt=utt, what="a type token")) != b" ":
            token += char
            if len(token) > 8:
                break
        return token.decode("latin-1")

    def matrix(self, utt: str | None, first: bytes) -> np.ndarray:
        """A matrix, decompressed: see the module docstring for the kinds and dtypes."""
        first = self.begin(utt, first)
        if first != b"\0":
            return self._text_matrix(utt, first)
        head = self._binary_matrix_header(utt)
        if head.token in FLOAT_MATRIX_TOKENS:
            return self.float_values(head.token, (head.rows, head.cols), utt=utt)
        data = self.exact(head.size, utt=utt, what=f"the {head.rows}x{head.cols} {head.token} matrix")
        return _decompress(head, data)

    def matrix_rows(self, utt: str | None, first: bytes) -> int:
        """Rows of a matrix; binary data is skipped, not decoded."""
        first = self.begin(utt, first)
        if first != b"\0":
            return self._text_matrix(utt, first).shape[0]
        head = self._binary_matrix_header(utt)
        self.skip(head.size, utt=utt)
        return head.rows

    def vector(self, utt: str | None, first: bytes) -> np.ndarray:
        """A float vector: binary ``FV``/``DV`` or text ``[ v v v ]``."""
        first = self.begin(utt, first)
        if first != b"\0":
            mat = self._text_matrix(utt, first, what="vector")
            if mat.shape[0] > 1:
                raise self.fail(f"holds a {mat.shape[0]}-row text matrix, not a vector", utt=utt)
            return mat.reshape(-1)
        token = self.type_token(utt=utt)
        if token not in FLOAT_VECTOR_TOKENS:
            shown = f"a {token!r}" if token.isprintable() else "an unknown"
            raise self.fail(
                f"holds {shown} binary object, not a float vector",
                utt=utt,
                fix="pass a table of vectors (FV/DV)",
            )
        return self.float_values(token, self.float_shape(token, utt=utt), utt=utt)

    def _binary_matrix_header(self, utt: str | None) -> _MatrixHeader:
        token = self.type_token(utt=utt)
        if token.startswith("\4"):
            raise self.fail(
                "holds an int32 vector (an alignment?), not a feature matrix", utt=utt, fix=_FEATURES
            )
        if token in FLOAT_MATRIX_TOKENS:
            rows, cols = self.float_shape(token, utt=utt)
            return _MatrixHeader(token, rows, cols, rows * cols * FLOAT_TYPES[token].itemsize)
        if token in _COMPRESSED_COLUMN:
            # GlobalHeader {float min_value, float range, int32 num_rows, int32 num_cols}
            # (Kaldi leaves its int32 format field out of the file; the token says it).
            low, span, rows, cols = struct.unpack("<ffii", self.exact(16, utt=utt, what="the header"))
            if rows < 0 or cols < 0:
                raise self.fail(f"negative matrix size {rows}x{cols}", utt=utt)
            if cols == 0:  # Kaldi reads no data for an empty compressed matrix
                return _MatrixHeader(token, 0, 0, 0)
            return _MatrixHeader(token, rows, cols, cols * _COMPRESSED_COLUMN[token](rows), low, span)
        if token in FLOAT_VECTOR_TOKENS:
            raise self.fail(f"holds a {token} vector, not a feature matrix", utt=utt, fix=_FEATURES)
        shown = f"a {token!r}" if token.isprintable() else "an unknown"
        raise self.fail(f"holds {shown} binary object, not a feature matrix", utt=utt, fix=_FEATURES)

    def _text_matrix(self, utt: str | None, first: bytes, *, what: str = "matrix") -> np.ndarray:
        """``[`` then rows of numbers, one per line, then ``]`` — as float64 ``(rows, cols)``."""
        while first in (b" ", b"\t"):
            first = self.stream.read(1)
        if first != b"[":
            fix = (
                (_FEATURES if what == "matrix" else "pass a table of vectors")
                if utt
                else "give one object: a file holding it, or an archive entry as file.ark:offset "
                "(see the archive's scp)"
            )
            raise self.fail(
                f"expected a {what} ('\\0B' binary or '[' text), found {first!r}", utt=utt, fix=fix
            )
        rows: list[np.ndarray] = []
        line = self.stream.readline()
        while True:
            closed = b"]" in line
            values = (line[: line.index(b"]")] if closed else line).split()
            if values:
                try:
                    row = np.array(values, dtype=np.float64)
                except ValueError:
                    raise self.fail(f"text {what} row {len(rows) + 1} is not numeric", utt=utt) from None
                if rows and len(row) != len(rows[0]):
                    raise self.fail(
                        f"text {what} row {len(rows) + 1} has {len(row)} values, the "
                        f"first has {len(rows[0])}",
                        utt=utt,
                    )
                rows.append(row)
            if closed:
                return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float64)
            line = self.stream.readline()
            if not line:
                raise self.fail(f"truncated: text {what} has no closing ']'", utt=utt)


# --- decompression (Kaldi's CompressedMatrix::CopyToMat) ------------------------------------

#: Byte codes of a ``CM`` column: 0..64 span percentiles p0..p25, 64..192 p25..p75 and
#: 192..255 p75..p100, linearly. For each code: its segment (0, 1, 2), the code where the
#: segment starts and the reciprocal of the segment's number of steps.
_CODES = np.arange(256)
_SEGMENT = (_CODES > 64).astype(np.intp) + (_CODES > 192)
_SEGMENT_START = np.array([0, 64, 192])[_SEGMENT]
_SEGMENT_STEP = np.array([1 / 64.0, 1 / 128.0, 1 / 63.0])[_SEGMENT]


def _decompress(head: _MatrixHeader, data: bytes) -> np.ndarray:
    """A ``CM``/``CM2``/``CM3`` payload as float32 ``(rows, cols)``, with Kaldi's arithmetic.

    Kaldi mixes float and double: percentiles are ``min + range * (1/65535) * p`` in float; a
    byte ``k`` of a segment is ``p_lo + (p_hi - p_lo) * k`` with the product in float and the
    scaling by ``1/64``, ``1/128`` or ``1/63`` in double; ``CM2``/``CM3`` add ``q`` times a float
    increment ``range / 65535`` or ``range / 255``. The same order is kept here, so the values
    are Kaldi's to the last bit or so.
    """
    rows, cols, low, span = head.rows, head.cols, head.min_value, head.span
    if head.token != "CM":
        levels, stored = (65535.0, "<u2") if head.token == "CM2" else (255.0, np.uint8)
        quantised = np.frombuffer(data, dtype=stored).reshape(rows, cols)
        increment = np.float32(span * (1.0 / levels))
        return np.float32(low) + quantised.astype(np.float32) * increment
    headers = np.frombuffer(data, dtype="<u2", count=4 * cols).reshape(cols, 4)
    percentile_step = np.float32(span) * np.float32(1.52590218966964e-05)  # range / 65535
    percentiles = np.float32(low) + percentile_step * headers.astype(np.float32)
    lower = percentiles[:, _SEGMENT]  # (cols, 256): each code's segment start value
    upper = percentiles[:, _SEGMENT + 1]
    steps = (upper - lower) * (_CODES - _SEGMENT_START).astype(np.float32)
    table = (lower.astype(np.float64) + steps.astype(np.float64) * _SEGMENT_STEP).astype(np.float32)
    codes = np.frombuffer(data, dtype=np.uint8, offset=8 * cols).reshape(cols, rows)
    return np.ascontiguousarray(np.take_along_axis(table, codes.astype(np.intp), axis=1).T)
