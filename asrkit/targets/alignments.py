"""Kaldi alignments as frame-level training targets: read, check against the features, fix.

An alignment gives one integer label per (subsampled) feature frame — pdf-ids from
``ali-to-pdf``, phones from ``ali-to-phones --per-frame``, or a CTC model's forced
alignment. Kaldi stores them as int-vector tables:

* binary: ``utt \\0B`` then ``\\4`` + int32 length, then ``\\4`` + int32 per label;
* text (``copy-int-vector ark:- ark,t:-``): ``utt 1 1 5 5 \\n`` — no brackets
  (``[ ]`` is tolerated anyway);

in an archive (``ark:ali.ark``, ``ark:gunzip -c ali.1.gz |``), through an ``scp`` of
``utt file.ark:offset`` lines, or as the ``ali.N.gz`` files of an alignment directory,
which may also hold ``frame_subsampling_factor`` and ``num_classes``.

Features are only read for their frame counts, so matrix headers are parsed and the
data skipped: ``FM``/``DM`` float matrices, ``CM``/``CM2``/``CM3`` compressed
matrices (kaldi-io 0.9.8 rejects ``CM2``/``CM3``, and its ``CM`` decoder passes
``np.reshape`` a ``newshape`` keyword that numpy 2.4 no longer accepts) and text matrices.

A Kaldi model with frame subsampling factor ``f`` keeps feature frames 0, f, 2f, ...,
so ``T`` feature frames need ``(T + f - 1) // f`` labels. Alignments a frame or two
off (a different edge convention in the feature pipeline) are padded by repeating
the last label or trimmed; anything further off is reported, all problems at once.

Everything here is parsed by asrkit rather than kaldi-io, whose readers check a
pipe's exit status in a thread that cannot report it (a failing ``gunzip -c x.gz |``
reads as an empty archive), misread an empty text vector, and stop at assertions.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import logging
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

import numpy as np

from asrkit.data.datadir import read_kaldi_map
from asrkit.errors import ConfigError, DataError

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: ``ark:``, ``scp:``, ``ark,t:``, ``scp,s,cs:`` ... — the options only matter to Kaldi's
#: own readers (sorted, once-only access); reading everything in order ignores them.
_RSPECIFIER = re.compile(r"^(ark|scp)((?:,[A-Za-z]+)*):(.*)$", re.DOTALL)
#: ``file.ark:1234`` — a byte offset into an archive, as written in scp files.
_OFFSET = re.compile(r"^(.+):([0-9]+)$", re.DOTALL)
#: ``file.ark:1234[0:99]`` or ``[0:99,0:12]`` — an inclusive row (and column) range of a matrix.
_RANGE = re.compile(r"^(.+)\[(\d*):(\d*)(?:,\d*:\d*)?\]$", re.DOTALL)
_GZIP_MAGIC = b"\x1f\x8b"
_LONGEST_KEY = 4096
_SHOW = 5

_REWRITE = "re-create it (re-run the job that wrote it) or check that this is the right file"


@dataclass
class AlignmentCheckConfig:
    """How alignments are matched to feature frames.

    Attributes:
        subsampling_factor: feature frames per alignment frame; 0 means the alignment
            dir's ``frame_subsampling_factor`` file when the source is a dir, else 1.
        tolerance: an alignment ``|len - expected| <= tolerance`` labels off is padded
            (repeating its last label) or trimmed; further off is an error.
        num_classes: labels must lie in ``[0, num_classes)``; 0 means the dir's
            ``num_classes`` file if there is one, else the largest label + 1.
        max_missing: fraction of feature utterances allowed to have no alignment
            (they are left out of training).
    """

    subsampling_factor: int = 0
    tolerance: int = 2
    num_classes: int = 0
    max_missing: float = 0.0

    def check(self) -> None:
        """Raise :class:`ConfigError` for a value the check cannot use."""
        for name in ("subsampling_factor", "tolerance", "num_classes"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"alignment check: {name}={value!r} must be an integer >= 0 "
                                  "(0 = take it from the alignment dir)")
        if not 0.0 <= self.max_missing < 1.0:
            raise ConfigError(f"alignment check: max_missing={self.max_missing!r} must be in [0, 1) "
                              "— the fraction of feature utterances that may lack an alignment")


@dataclass
class AlignmentReport:
    """What :func:`check_alignments` found.

    Attributes:
        source: where the alignments came from (for messages).
        utterances: feature utterances that have an alignment (checked).
        frames: labels in the usable, length-fixed alignments.
        num_classes: the label range ``[0, num_classes)`` checked against.
        classes_seen: distinct labels in the usable alignments.
        subsampling_factor, tolerance: the settings used.
        missing: feature utterances with no alignment.
        extra: aligned utterances without features (ignored; a warning, not an error).
        fixed: lengths 1..tolerance off, padded or trimmed.
        bad_length: ``(utt, got, expected)`` for lengths further off.
        bad_label: ``(utt, label)``: the first label outside ``[0, num_classes)``.
        max_missing: the allowed fraction of ``missing``.
    """

    source: str
    utterances: int
    frames: int
    num_classes: int
    classes_seen: int
    subsampling_factor: int
    tolerance: int
    missing: list[str]
    extra: list[str]
    fixed: list[str]
    bad_length: list[tuple[str, int, int]]
    bad_label: list[tuple[str, int]]
    max_missing: float

    @property
    def missing_fraction(self) -> float:
        total = self.utterances + len(self.missing)
        return len(self.missing) / total if total else 0.0

    @property
    def usable(self) -> bool:
        """No bad length or label, few enough missing, and at least one utterance checked."""
        return (not self.bad_length and not self.bad_label and self.utterances > 0
                and self.missing_fraction <= self.max_missing)

    def summary(self) -> str:
        """A multi-line report for people: totals, then one line per kind of mismatch."""
        total = self.utterances + len(self.missing)
        rows = [
            ("alignments", self.source or "(given in memory)"),
            ("utterances checked", f"{self.utterances} of {total} with features"),
            ("frames", f"{self.frames} (subsampling factor {self.subsampling_factor}, "
                       f"tolerance {self.tolerance})"),
            ("classes seen", f"{self.classes_seen} / {self.num_classes}"),
            ("missing alignment", _count_line(self.missing, note=f"max_missing {self.max_missing:g}")),
            ("no features", _count_line(self.extra, note="ignored")),
            ("length fixed", _count_line(self.fixed, note="padded or trimmed")),
            ("bad length", _count_line([f"{u} (got {g}, expected {e})" for u, g, e in self.bad_length])),
            ("bad label", _count_line([f"{u} (label {lab})" for u, lab in self.bad_label])),
            ("result", "usable" if self.usable else "NOT usable"),
        ]
        width = max(len(name) for name, _ in rows) + 1
        return "\n".join(f"{name + ':':<{width}} {text}" for name, text in rows)

    def raise_if_unusable(self) -> None:
        """Raise one :class:`DataError` listing every kind of problem, or return.

        Raises:
            DataError: counts per kind, the first few utterance ids and the fix.
        """
        if self.usable:
            return
        where = self.source or "alignments"
        total = self.utterances + len(self.missing)
        if self.utterances == 0:
            raise DataError(
                f"{where}: none of the {total} feature utterances has an alignment (first feature "
                f"ids: {_first(self.missing)}; first aligned ids: {_first(self.extra)}); the "
                "alignments and features must come from the same data set — pass matching ones")
        problems, fixes = [], []
        if self.missing_fraction > self.max_missing:
            problems.append(
                f"{len(self.missing)} of {total} feature utterances have no alignment (more than "
                f"max_missing={self.max_missing:g} allows), first: {_first(self.missing)}")
            fixes.append("re-run the alignment for these utterances or set max_missing to skip them")
        if self.bad_length:
            shown = _first([f"{u} (got {g}, expected {e})" for u, g, e in self.bad_length])
            problems.append(
                f"{len(self.bad_length)} alignment(s) more than {self.tolerance} label(s) off "
                f"ceil(frames / {self.subsampling_factor}), first: {shown}")
            fixes.append("check the subsampling factor, re-align with these features, or raise "
                         "--tolerance")
        if self.bad_label:
            shown = _first([f"{u} (label {lab})" for u, lab in self.bad_label])
            problems.append(f"{len(self.bad_label)} alignment(s) with labels outside "
                            f"[0, {self.num_classes}), first: {shown}")
            fixes.append("set num_classes to the model's output size (transition-ids need "
                         "ali-to-pdf first)")
        raise DataError(f"{where}: alignments do not fit the features: {'; '.join(problems)}; "
                        f"fix: {'; '.join(fixes)}")


def read_alignments(source: str) -> dict[str, np.ndarray]:
    """int32 label vectors per utterance from a Kaldi rspecifier or an alignment dir.

    Args:
        source: ``ark[,opts]:PATH``, ``ark:CMD |``, ``scp[,opts]:PATH`` (entries
            ``utt file.ark:offset``), a bare archive path (gzip is detected), a bare
            ``*.scp`` path, or an alignment dir (its ``ali.scp``, else every ``ali.N.gz``
            in numeric order, else ``ali.ark``).

    Returns:
        utterance id -> ``(frames,)`` int32 labels, in archive order.

    Raises:
        DataError: missing file, failing command, corrupt or truncated archive (naming
            the last good utterance), an utterance aligned twice, or no alignments.
    """
    parts = _alignment_parts(source)
    alignments: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    for kind, target, where in parts:
        entries = (_read_ark(target, where=where, value=_TableReader.int_vector) if kind == "ark"
                   else _read_scp(target, where=where, value=_TableReader.int_vector))
        for utt, vector, entry_where in entries:
            if utt in origin:
                raise DataError(
                    f"utterance '{utt}' is aligned twice: in {origin[utt]} and in {entry_where}; "
                    "each utterance must be aligned once — remove the duplicate or the stale archive")
            origin[utt] = entry_where
            alignments[utt] = vector
    if not alignments:
        raise DataError(f"{source}: no alignments in it (empty archive); check that the alignment "
                        "job succeeded and that this is the right path")
    return alignments


def read_frame_counts(source: str) -> dict[str, int]:
    """Feature frames per utterance.

    Args:
        source: a data dir (its ``utt2num_frames`` if present, else its ``feats.scp``), or a
            feature rspecifier (``scp:feats.scp``, ``ark:feats.ark``, ``ark:gunzip -c x.gz |``),
            or a bare ``*.scp`` / archive path. Matrices may be binary float/double, compressed
            (``CM``, ``CM2``, ``CM3``) or text; scp row ranges ``[first:last]`` are honoured.

    Returns:
        utterance id -> number of frames (matrix rows).

    Raises:
        DataError: missing file, failing command, corrupt archive, duplicate or no utterances.
    """
    path = Path(source)
    if not _RSPECIFIER.match(source) and path.is_dir():
        if (path / "utt2num_frames").exists():
            return _read_utt2num_frames(path / "utt2num_frames")
        if not (path / "feats.scp").exists():
            raise DataError(f"{path}: no utt2num_frames or feats.scp in this data dir; run the "
                            "feature stage first (or pass an rspecifier such as scp:feats.scp)")
        kind, target = "scp", str(path / "feats.scp")
        source = target
    else:
        kind, target = _parse_rspecifier(source, what="feature")
        if Path(target).is_dir() and not target.rstrip().endswith("|"):
            raise DataError(f"{source}: is a directory; pass the data dir without '{kind}:' or "
                            "point at its feats.scp")
    read = _read_ark if kind == "ark" else _read_scp
    counts: dict[str, int] = {}
    origin: dict[str, str] = {}
    for utt, rows, where in read(target, where=source, value=_TableReader.matrix_rows):
        if utt in origin:
            raise DataError(f"utterance '{utt}' has features twice: in {origin[utt]} and in {where}; "
                            "keep one copy")
        origin[utt] = where
        counts[utt] = rows
    if not counts:
        raise DataError(f"{source}: no feature matrices in it; check that the feature job succeeded")
    return counts


def alignment_dir_settings(source: str) -> tuple[int | None, int | None]:
    """``(frame_subsampling_factor, num_classes)`` from an alignment dir's files of those names.

    Each is None when its file is absent or ``source`` is not a directory.

    Raises:
        DataError: a file that does not hold one positive integer.
    """
    path = Path(source)
    if not path.is_dir():
        return None, None
    return _read_int_file(path / "frame_subsampling_factor"), _read_int_file(path / "num_classes")


def check_alignments(
    alignments: dict[str, np.ndarray],
    frame_counts: dict[str, int],
    cfg: AlignmentCheckConfig,
    *,
    source: str = "",
) -> tuple[dict[str, np.ndarray], AlignmentReport]:
    """Validate alignments against feature frame counts and fix small length differences.

    Args:
        alignments: utterance id -> labels, e.g. from :func:`read_alignments`.
        frame_counts: utterance id -> feature frames ``T``, e.g. from :func:`read_frame_counts`.
        cfg: the settings; zeros are resolved from ``source``'s alignment dir files.
        source: where the alignments came from — an alignment dir supplies
            ``frame_subsampling_factor`` and ``num_classes``; also named in messages.

    Returns:
        The usable alignments — for each feature utterance (in ``frame_counts`` order) whose
        alignment has valid labels and a length within tolerance, an int64 ``(ceil(T / f),)``
        array — and the report. Call :meth:`AlignmentReport.raise_if_unusable` to stop on problems.

    Raises:
        ConfigError: a bad setting, or one that contradicts the alignment dir's file.
        DataError: an unreadable ``frame_subsampling_factor`` / ``num_classes`` file.
    """
    cfg.check()
    dir_factor, dir_classes = alignment_dir_settings(source) if source else (None, None)
    factor = _resolve("subsampling_factor", cfg.subsampling_factor, dir_factor,
                      Path(source) / "frame_subsampling_factor") or 1
    num_classes = _resolve("num_classes", cfg.num_classes, dir_classes, Path(source) / "num_classes")
    if not num_classes:
        num_classes = max((int(ali.max()) for ali in alignments.values() if ali.size), default=-1) + 1

    usable: dict[str, np.ndarray] = {}
    missing: list[str] = []
    fixed: list[str] = []
    bad_length: list[tuple[str, int, int]] = []
    bad_label: list[tuple[str, int]] = []
    seen = np.zeros(max(num_classes, 1), dtype=bool)
    for utt, num_frames in frame_counts.items():
        ali = alignments.get(utt)
        if ali is None:
            missing.append(utt)
            continue
        ali = np.asarray(ali, dtype=np.int64)
        expected = (int(num_frames) + factor - 1) // factor
        ok = True
        outside = np.flatnonzero((ali < 0) | (ali >= num_classes))
        if outside.size:
            bad_label.append((utt, int(ali[outside[0]])))
            ok = False
        # An empty alignment has no last label to repeat, so it cannot be padded.
        if abs(len(ali) - expected) > cfg.tolerance or (len(ali) == 0 and expected > 0):
            bad_length.append((utt, len(ali), expected))
            ok = False
        if not ok:
            continue
        if len(ali) != expected:
            fixed.append(utt)
            ali = (ali[:expected] if len(ali) > expected
                   else np.concatenate([ali, np.full(expected - len(ali), ali[-1], dtype=np.int64)]))
        usable[utt] = ali
        seen[ali] = True
    extra = [utt for utt in alignments if utt not in frame_counts]
    if extra:
        log.debug("%d aligned utterance(s) have no features and are ignored, first: %s",
                  len(extra), _first(extra))
    report = AlignmentReport(
        source=source, utterances=len(frame_counts) - len(missing),
        frames=sum(len(ali) for ali in usable.values()), num_classes=num_classes,
        classes_seen=int(seen.sum()), subsampling_factor=factor, tolerance=cfg.tolerance,
        missing=missing, extra=extra, fixed=fixed, bad_length=bad_length, bad_label=bad_label,
        max_missing=cfg.max_missing)
    return usable, report


# --- settings -----------------------------------------------------------------------------


def _resolve(name: str, given: int, from_dir: int | None, file: Path) -> int:
    if given and from_dir is not None and given != from_dir:
        raise ConfigError(f"alignment check: {name}={given} but {file} says {from_dir}; drop the "
                          "setting to use the file's value, or fix the file")
    return given or from_dir or 0


def _read_int_file(path: Path) -> int | None:
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace").strip()
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise DataError(f"{path}: holds {text[:40]!r}, expected one positive integer; fix or remove "
                        "the file")
    return value


def _read_utt2num_frames(path: Path) -> dict[str, int]:
    counts = {}
    for lineno, (utt, value) in enumerate(read_kaldi_map(path).items(), start=1):
        try:
            counts[utt] = int(value)
        except ValueError:
            counts[utt] = -1
        if counts[utt] < 0:
            raise DataError(f"{path}:{lineno}: utterance '{utt}' has frame count {value!r}, expected "
                            "an integer >= 0; regenerate it (feat-to-len scp:feats.scp ark,t:-)")
    if not counts:
        raise DataError(f"{path}: empty; regenerate it with feat-to-len scp:feats.scp ark,t:-")
    return counts


def _count_line(items: list[str], *, note: str = "") -> str:
    text = f"{len(items)}" + (f" ({note})" if note else "")
    return text + (f": {_first(items)}" if items else "")


def _first(items: list[str]) -> str:
    if not items:
        return "(none)"
    return ", ".join(items[:_SHOW]) + (f", ... ({len(items) - _SHOW} more)" if len(items) > _SHOW else "")


# --- sources ------------------------------------------------------------------------------


def _parse_rspecifier(source: str, *, what: str) -> tuple[str, str]:
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


def _alignment_parts(source: str) -> list[tuple[str, str, str]]:
    """``(kind, target, where)`` for each table making up an alignment source."""
    path = Path(source)
    if _RSPECIFIER.match(source) or not path.is_dir():
        kind, target = _parse_rspecifier(source, what="alignment")
        if Path(target).is_dir() and not target.endswith("|"):
            raise DataError(f"{source}: is a directory; pass the alignment dir itself, without "
                            f"'{kind}:'")
        return [(kind, target, source)]
    if (path / "ali.scp").is_file():
        return [("scp", str(path / "ali.scp"), str(path / "ali.scp"))]
    numbered = [(int(m.group(1)), p) for p in path.glob("ali.*.gz")
                if (m := re.fullmatch(r"ali\.(\d+)\.gz", p.name))]
    if numbered:
        return [("ark", str(p), str(p)) for _, p in sorted(numbered)]
    if (path / "ali.ark").is_file():
        return [("ark", str(path / "ali.ark"), str(path / "ali.ark"))]
    raise DataError(f"{path}: no ali.scp, ali.N.gz or ali.ark in this alignment dir; run the "
                    "alignment (e.g. steps/align_si.sh) or pass the archive itself")


def _read_ark(rx: str, *, where: str, value: Callable[[_TableReader, str, bytes], _T]
              ) -> list[tuple[str, _T, str]]:
    """Every ``(utt, value, where)`` of one archive, in order."""
    entries: list[tuple[str, _T, str]] = []
    with _open_input(rx, where=where) as stream:
        reader = _TableReader(stream, where)
        with reader.low_level_errors():
            while (head := reader.key()) is not None:
                utt, ended_by = head
                entries.append((utt, value(reader, utt, ended_by), where))
                reader.last = utt
    return entries


def _read_scp(rx: str, *, where: str, value: Callable[[_TableReader, str, bytes], _T]
              ) -> list[tuple[str, _T, str]]:
    """Every ``(utt, value, where)`` of an scp, each object read at its ``file:offset``."""
    with _open_input(rx, where=where) as stream, _TableReader(stream, where).low_level_errors():
        data = stream.read()
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise DataError(f"{where}: not a text scp file (undecodable bytes); pass scp: only for "
                        "'utt file:offset' lists, ark: for archives") from None
    entries: list[tuple[str, _T, str]] = []
    with _SeekCache() as files:
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            utt, *rest = line.split(None, 1)
            entry = rest[0].strip() if rest else ""
            entry_where = f"{rx}:{lineno}"
            if not entry:
                raise DataError(f"{entry_where}: utterance '{utt}' has no file; each line must be "
                                "'utt file.ark:offset'")
            first_row, last_row = 0, None
            range_match = _RANGE.match(entry) if not entry.endswith("|") else None
            if range_match:
                entry = range_match.group(1)
                first_row = int(range_match.group(2) or 0)
                last_row = int(range_match.group(3)) if range_match.group(3) else None
            with files.open(entry, where=f"{entry_where} ({entry})") as handle:
                reader = _TableReader(handle, f"{entry_where} ({entry})")
                with reader.low_level_errors():
                    first = handle.read(1)
                    if not first:
                        raise reader.fail("nothing at this offset", utt=utt,
                                          fix="the scp is stale; regenerate it with the archive")
                    item = value(reader, utt, first)
            if range_match:
                item = _apply_range(item, first_row, last_row, utt=utt, where=entry_where)
            entries.append((utt, item, entry_where))
    return entries


def _apply_range(rows: _T, first: int, last: int | None, *, utt: str, where: str) -> _T:
    if not isinstance(rows, int):
        raise DataError(f"{where}: utterance '{utt}' has a row range, which only matrices can have; "
                        "remove the [..] suffix")
    last = rows - 1 if last is None else last
    if not 0 <= first <= last < rows:
        raise DataError(f"{where}: utterance '{utt}' asks for rows {first}..{last} of a {rows}-row "
                        "matrix; fix the range (Kaldi ranges are inclusive)")
    return last - first + 1  # type: ignore[return-value]


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
        raise DataError(f"{prefix}{path}: file not found; check the path (did the job that writes it "
                        "run?)") from None
    except IsADirectoryError:
        raise DataError(f"{prefix}{path}: is a directory, expected a file") from None
    except OSError as err:
        raise DataError(f"{prefix}{path}: cannot open ({err.strerror}); check its permissions") from None


def _seek(handle: io.BufferedReader, offset: int, *, path: str, where: str) -> None:
    size = os.fstat(handle.fileno()).st_size
    if offset >= size:
        raise DataError(f"{where}: offset {offset} is past the end of {path} ({size} bytes); the scp "
                        "is stale — regenerate it together with the archive")
    handle.seek(offset)


@contextlib.contextmanager
def _open_pipe(command: str, *, where: str) -> Iterator[IO[bytes]]:
    """Read the output of ``command`` (run by /bin/sh, as Kaldi does); a failure is an error.

    The command's stderr is kept and its last line quoted if it fails. Reading stops
    early only on a parse error; then the command's own failure, if any, is reported
    instead, as it is the likely cause.
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
        except BaseException:
            proc.stdout.close()
            status = _finish(proc)
            if status > 0 and status != 128 + signal.SIGPIPE:
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
    said = [line.strip() for line in stderr.read().decode("utf-8", "replace").splitlines()
            if line.strip()]
    how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
    quote = f" ({said[-1][:300]})" if said else ""
    return DataError(f"{where}: the command `{command}` {how}{quote}; run it in a shell to see why, "
                     "then fix the path or the command")


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


# --- parsing table entries ----------------------------------------------------------------


class _TableReader:
    """Reads Kaldi table entries from one binary stream; errors name ``where``."""

    def __init__(self, stream: IO[bytes], where: str) -> None:
        self.stream = stream
        self.where = where
        self.last: str | None = None  # the last utterance read completely

    def fail(self, problem: str, *, utt: str | None = None, fix: str = _REWRITE) -> DataError:
        at = f"utterance '{utt}': " if utt else ""
        good = f" (last good utterance: '{self.last}')" if self.last else ""
        return DataError(f"{self.where}: {at}{problem}{good}; {fix}")

    @contextlib.contextmanager
    def low_level_errors(self) -> Iterator[None]:
        """Turn I/O and decompression failures into a :class:`DataError` naming the place."""
        try:
            yield
        except (OSError, EOFError, zlib.error, struct.error) as err:
            raise self.fail(f"cannot read ({err})") from err

    def exact(self, size: int, *, utt: str, what: str) -> bytes:
        data = self.stream.read(size)
        if len(data) != size:
            raise self.fail(f"truncated: {what} needs {size} bytes, {len(data)} left", utt=utt)
        return data

    def skip(self, size: int, *, utt: str) -> None:
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
                raise self.fail(f"truncated: the matrix needs {size} bytes of data, "
                                f"{size - left} left", utt=utt)
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
                raise self.fail(f"no utterance id in the first {_LONGEST_KEY} bytes — not a Kaldi "
                                "archive (a compressed or foreign file?)")
            char = self.stream.read(1)
        try:
            utt = key.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("an utterance id is not text — not a Kaldi archive (a compressed or "
                            "foreign file?)") from None
        if not char:
            raise self.fail("truncated: the archive ends right after the id", utt=utt)
        return utt, char

    def _token(self, *, utt: str) -> str:
        token = bytearray()
        while (char := self.exact(1, utt=utt, what="a type token")) != b" ":
            token += char
            if len(token) > 8:
                break
        return token.decode("latin-1")

    def int_vector(self, utt: str, first: bytes) -> np.ndarray:
        """An int32 vector: binary (``\\0B\\4`` + length + ``\\4``-prefixed int32s) or a text line."""
        if first in (b" ", b"\t"):
            first = self.stream.read(1)
        if not first:
            raise self.fail("truncated: nothing after the id", utt=utt)
        if first == b"\n":  # a text entry "utt \n" is an empty vector
            return np.zeros(0, dtype=np.int32)
        if first == b"\0":
            if self.exact(1, utt=utt, what="the binary marker") != b"B":
                raise self.fail("bad binary marker (expected '\\0B')", utt=utt)
            head = self.exact(5, utt=utt, what="the vector length")
            if head[0] != 4:
                kind = head[:3].decode("latin-1").strip()
                raise self.fail(f"holds a {kind!r} object, not an int32 vector", utt=utt,
                                fix="pass an alignment archive (pdf-ids: ali-to-pdf; phones: "
                                "ali-to-phones --per-frame)")
            (size,) = struct.unpack("<i", head[1:])
            if size < 0:
                raise self.fail(f"negative vector length {size}", utt=utt)
            body = self.exact(5 * size, utt=utt, what=f"a vector of {size} int32s")
            records = np.frombuffer(body, dtype=[("size", "u1"), ("value", "<i4")])
            if (records["size"] != 4).any():
                raise self.fail("an element is not a 4-byte integer", utt=utt)
            return records["value"].astype(np.int32)
        line = first + self.stream.readline()
        tokens = line.split()
        if tokens[:1] == [b"["]:
            tokens = tokens[1:]
        if tokens[-1:] == [b"]"]:
            tokens = tokens[:-1]
        try:
            values = np.array(tokens, dtype=np.int64)
        except ValueError:
            bad = next(t for t in tokens if not t.lstrip(b"-").isdigit())
            raise self.fail(f"text vector has {bad[:20].decode('latin-1')!r}, not an integer",
                            utt=utt, fix="alignments must be integer labels") from None
        if values.size and (values.min() < -(2**31) or values.max() >= 2**31):
            raise self.fail("a label does not fit in int32", utt=utt)
        return values.astype(np.int32)

    def matrix_rows(self, utt: str, first: bytes) -> int:
        """Rows of a matrix; its data is skipped, not decoded."""
        if first in (b" ", b"\t"):
            first = self.stream.read(1)
        if not first:
            raise self.fail("truncated: nothing after the id", utt=utt)
        if first == b"\0":
            if self.exact(1, utt=utt, what="the binary marker") != b"B":
                raise self.fail("bad binary marker (expected '\\0B')", utt=utt)
            return self._binary_matrix_rows(utt)
        return self._text_matrix_rows(utt, first)

    def _binary_matrix_rows(self, utt: str) -> int:
        token = self._token(utt=utt)
        if token.startswith("\4"):
            raise self.fail("holds an int32 vector (an alignment?), not a feature matrix", utt=utt,
                            fix="pass the feature archive (feats.scp / ark)")
        if token in ("FM", "DM"):
            head = self.exact(10, utt=utt, what="the matrix size")
            if head[0] != 4 or head[5] != 4:
                raise self.fail("bad matrix size header", utt=utt)
            rows, cols = struct.unpack("<xixi", head)
            if rows < 0 or cols < 0:
                raise self.fail(f"negative matrix size {rows}x{cols}", utt=utt)
            self.skip(rows * cols * (4 if token == "FM" else 8), utt=utt)
            return rows
        if token in ("CM", "CM2", "CM3"):
            # GlobalHeader {float min_value, float range, int32 num_rows, int32 num_cols}
            # (Kaldi leaves its int32 format field out of the file; the token says it).
            _, _, rows, cols = struct.unpack("<ffii", self.exact(16, utt=utt, what="the header"))
            if rows < 0 or cols < 0:
                raise self.fail(f"negative matrix size {rows}x{cols}", utt=utt)
            if cols == 0:  # Kaldi reads no data for an empty compressed matrix
                return 0
            per_column = {"CM": 8 + rows, "CM2": 2 * rows, "CM3": rows}[token]
            self.skip(cols * per_column, utt=utt)
            return rows
        if token in ("FV", "DV"):
            raise self.fail(f"holds a {token} vector, not a feature matrix", utt=utt,
                            fix="pass the feature archive (feats.scp / ark)")
        shown = f"a {token!r}" if token.isprintable() else "an unknown"
        raise self.fail(f"holds {shown} binary object, not a feature matrix", utt=utt,
                        fix="pass the feature archive (feats.scp / ark)")

    def _text_matrix_rows(self, utt: str, first: bytes) -> int:
        while first in (b" ", b"\t"):
            first = self.stream.read(1)
        if first != b"[":
            raise self.fail(f"expected a matrix ('\\0B' binary or '[' text), found {first!r}", utt=utt,
                            fix="pass the feature archive (feats.scp / ark)")
        rows, width = 0, None
        line = self.stream.readline()
        while True:
            closed = b"]" in line
            values = (line[: line.index(b"]")] if closed else line).split()
            if values:
                try:
                    np.array(values, dtype=np.float64)
                except ValueError:
                    raise self.fail(f"text matrix row {rows + 1} is not numeric", utt=utt) from None
                if width is not None and len(values) != width:
                    raise self.fail(f"text matrix row {rows + 1} has {len(values)} values, the first "
                                    f"has {width}", utt=utt)
                width = len(values)
                rows += 1
            if closed:
                return rows
            line = self.stream.readline()
            if not line:
                raise self.fail("truncated: text matrix has no closing ']'", utt=utt)
