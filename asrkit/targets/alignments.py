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

A Kaldi GMM exp dir (``exp/tri3_ali``: ``final.mdl`` beside ``ali.*.gz``, ``ali.ark`` or
``ali.scp``) holds transition-ids, not labels: they are turned into pdf-ids (what
``ali-to-pdf`` prints; ``labels="phone"``: the phones of ``ali-to-phones --per-frame``)
through the dir's ``final.mdl``, read by :mod:`asrkit.gmm.model_io`, and the dir's number of
classes is the model's number of pdfs (or its largest phone + 1).

Features are only read for their frame counts, so binary matrix headers are parsed and
the data skipped: ``FM``/``DM`` float matrices, ``CM``/``CM2``/``CM3`` compressed matrices
and text matrices.

A Kaldi model with frame subsampling factor ``f`` keeps feature frames 0, f, 2f, ...,
so ``T`` feature frames need ``(T + f - 1) // f`` labels. Alignments a frame or two
off (a different edge convention in the feature pipeline) are padded by repeating
the last label or trimmed; anything further off is reported, all problems at once.

The tables are read by :mod:`asrkit.data.kaldi_table` rather than kaldi-io, whose readers
check a pipe's exit status in a thread that cannot report it (a failing ``gunzip -c x.gz |``
reads as an empty archive), misread an empty text vector, and stop at assertions.
"""

from __future__ import annotations

import logging
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asrkit.data.datadir import read_utt2num_frames
from asrkit.data.kaldi_table import TableReader, is_rspecifier, parse_rspecifier, read_table
from asrkit.errors import ConfigError, DataError
from asrkit.gmm.model_io import KaldiModel, read_model, transition_id_to_pdf, transition_id_to_phone

log = logging.getLogger(__name__)

_SHOW = 5
#: What the transition-ids of a GMM dir become.
_LABELS = {"pdf": transition_id_to_pdf, "phone": transition_id_to_phone}


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
        labels: what a GMM dir's transition-ids are read as (``pdf`` or ``phone``, as in
            :func:`read_alignments`); it sets the classes counted from its ``final.mdl``.
    """

    subsampling_factor: int = 0
    tolerance: int = 2
    num_classes: int = 0
    max_missing: float = 0.0
    labels: str = "pdf"

    def check(self) -> None:
        """Raise :class:`ConfigError` for a value the check cannot use."""
        for name in ("subsampling_factor", "tolerance", "num_classes"):
            value = getattr(self, name)
            if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
                raise ConfigError(
                    f"alignment check: {name}={value!r} must be an integer >= 0 "
                    "(0 = take it from the alignment dir)"
                )
        if not 0.0 <= self.max_missing < 1.0:
            raise ConfigError(
                f"alignment check: max_missing={self.max_missing!r} must be in [0, 1) "
                "— the fraction of feature utterances that may lack an alignment"
            )
        _check_labels(self.labels)


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
        return (
            not self.bad_length
            and not self.bad_label
            and self.utterances > 0
            and self.missing_fraction <= self.max_missing
        )

    def summary(self) -> str:
        """A multi-line report for people: totals, then one line per kind of mismatch."""
        total = self.utterances + len(self.missing)
        rows = [
            ("alignments", self.source or "(given in memory)"),
            ("utterances checked", f"{self.utterances} of {total} with features"),
            (
                "frames",
                f"{self.frames} (subsampling factor {self.subsampling_factor}, tolerance {self.tolerance})",
            ),
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
                "alignments and features must come from the same data set — pass matching ones"
            )
        problems, fixes = [], []
        if self.missing_fraction > self.max_missing:
            problems.append(
                f"{len(self.missing)} of {total} feature utterances have no alignment (more than "
                f"max_missing={self.max_missing:g} allows), first: {_first(self.missing)}"
            )
            fixes.append(
                "re-run the alignment for these utterances, or leave them out: training "
                "align.max_missing=<fraction>, asrkit check-alignments --max-missing <fraction>"
            )
        if self.bad_length:
            shown = _first([f"{u} (got {g}, expected {e})" for u, g, e in self.bad_length])
            problems.append(
                f"{len(self.bad_length)} alignment(s) more than {self.tolerance} label(s) off "
                f"ceil(frames / {self.subsampling_factor}), first: {shown}"
            )
            fixes.append("check the subsampling factor, re-align with these features, or raise --tolerance")
        if self.bad_label:
            shown = _first([f"{u} (label {lab})" for u, lab in self.bad_label])
            problems.append(
                f"{len(self.bad_label)} alignment(s) with labels outside "
                f"[0, {self.num_classes}), first: {shown}"
            )
            fixes.append(
                "set num_classes to the model's output size (transition-ids need ali-to-pdf first, "
                "or pass the GMM dir that holds them with its final.mdl)"
            )
        raise DataError(
            f"{where}: alignments do not fit the features: {'; '.join(problems)}; fix: {'; '.join(fixes)}"
        )


def read_alignments(source: str, *, labels: str = "pdf") -> dict[str, np.ndarray]:
    """int32 label vectors per utterance from a Kaldi rspecifier or an alignment dir.

    Args:
        source: ``ark[,opts]:PATH``, ``ark:CMD |``, ``scp[,opts]:PATH`` (entries
            ``utt file.ark:offset``), a bare archive path (gzip is detected), a bare
            ``*.scp`` path, or an alignment dir (its ``ali.scp``, else every ``ali.N.gz``
            in numeric order, else ``ali.ark``). A dir that also holds ``final.mdl`` is a
            Kaldi GMM dir: its alignments are transition-ids, converted through the model.
        labels: what transition-ids become: ``pdf`` (pdf-ids, as ``ali-to-pdf``) or
            ``phone`` (as ``ali-to-phones --per-frame``), or stay as they are (``transition``).
            Other sources are read as they are.

    Returns:
        utterance id -> ``(frames,)`` int32 labels, in archive order.

    Raises:
        ConfigError: an unknown ``labels``.
        DataError: missing file, failing command, corrupt or truncated archive (naming
            the last good utterance), an utterance aligned twice, no alignments, an unreadable
            ``final.mdl`` or a transition-id it does not have.
    """
    _check_labels(labels)
    parts = _alignment_parts(source)
    model = _gmm_dir_model(source)
    table = None if model is None or labels == "transition" else _LABELS[labels](model)
    model_file = model.path if model is not None else ""
    alignments: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    for kind, target, where in parts:
        # Read whole, so that a failing command is reported before any duplicate it caused.
        for utt, vector, entry_where in list(read_table(kind, target, where=where, value=_int_vector)):
            if utt in origin:
                raise DataError(
                    f"utterance '{utt}' is aligned twice: in {origin[utt]} and in {entry_where}; "
                    "each utterance must be aligned once — remove the duplicate or the stale archive"
                )
            origin[utt] = entry_where
            if table is not None:
                vector = _from_transition_ids(vector, table, utt=utt, where=entry_where, model=model_file)
            alignments[utt] = vector
    if not alignments:
        raise DataError(
            f"{source}: no alignments in it (empty archive); check that the alignment "
            "job succeeded and that this is the right path"
        )
    if model is not None:
        log.info(
            "%s: %d alignments of transition-ids converted to %s-ids through %s",
            source,
            len(alignments),
            labels,
            model_file,
        )
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
    if not is_rspecifier(source) and path.is_dir():
        if (path / "utt2num_frames").exists():
            return read_utt2num_frames(path / "utt2num_frames")
        if not (path / "feats.scp").exists():
            raise DataError(
                f"{path}: no utt2num_frames or feats.scp in this data dir; run the "
                "feature stage first (or pass an rspecifier such as scp:feats.scp)"
            )
        kind, target = "scp", str(path / "feats.scp")
        source = target
    else:
        kind, target = parse_rspecifier(source, what="feature")
        if Path(target).is_dir() and not target.rstrip().endswith("|"):
            raise DataError(
                f"{source}: is a directory; pass the data dir without '{kind}:' or point at its feats.scp"
            )
    counts: dict[str, int] = {}
    origin: dict[str, str] = {}
    for utt, rows, where in list(read_table(kind, target, where=source, value=TableReader.matrix_rows)):
        if utt in origin:
            raise DataError(
                f"utterance '{utt}' has features twice: in {origin[utt]} and in {where}; keep one copy"
            )
        origin[utt] = where
        counts[utt] = rows
    if not counts:
        raise DataError(f"{source}: no feature matrices in it; check that the feature job succeeded")
    return counts


def alignment_dir_settings(source: str, *, labels: str = "pdf") -> tuple[int | None, int | None]:
    """``(frame_subsampling_factor, num_classes)`` from an alignment dir's files of those names.

    A GMM dir without a ``num_classes`` file takes it from its ``final.mdl``: the number of
    pdfs (``labels="pdf"``) or the largest phone + 1 (``labels="phone"``). Each is None when
    it has no source or ``source`` is not a directory.

    Raises:
        DataError: a file that does not hold one positive integer, or an unreadable ``final.mdl``.
    """
    path = Path(source)
    if not path.is_dir():
        return None, None
    num_classes = _read_int_file(path / "num_classes")
    model = _gmm_dir_model(source) if num_classes is None else None
    if model is not None:
        num_classes = model.num_pdfs if labels == "pdf" else max(model.phones) + 1
    return _read_int_file(path / "frame_subsampling_factor"), num_classes


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
    dir_factor, dir_classes = alignment_dir_settings(source, labels=cfg.labels) if source else (None, None)
    factor = (
        _resolve(
            "subsampling_factor",
            cfg.subsampling_factor,
            dir_factor,
            Path(source) / "frame_subsampling_factor",
        )
        or 1
    )
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
            ali = (
                ali[:expected]
                if len(ali) > expected
                else np.concatenate([ali, np.full(expected - len(ali), ali[-1], dtype=np.int64)])
            )
        usable[utt] = ali
        seen[ali] = True
    extra = [utt for utt in alignments if utt not in frame_counts]
    if extra:
        log.debug(
            "%d aligned utterance(s) have no features and are ignored, first: %s", len(extra), _first(extra)
        )
    report = AlignmentReport(
        source=source,
        utterances=len(frame_counts) - len(missing),
        frames=sum(len(ali) for ali in usable.values()),
        num_classes=num_classes,
        classes_seen=int(seen.sum()),
        subsampling_factor=factor,
        tolerance=cfg.tolerance,
        missing=missing,
        extra=extra,
        fixed=fixed,
        bad_length=bad_length,
        bad_label=bad_label,
        max_missing=cfg.max_missing,
    )
    return usable, report


# --- settings -----------------------------------------------------------------------------


def _resolve(name: str, given: int, from_dir: int | None, file: Path) -> int:
    if given and from_dir is not None and given != from_dir:
        raise ConfigError(
            f"alignment check: {name}={given} but {file} says {from_dir}; drop the "
            "setting to use the file's value, or fix the file"
        )
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
        raise DataError(f"{path}: holds {text[:40]!r}, expected one positive integer; fix or remove the file")
    return value


def _count_line(items: list[str], *, note: str = "") -> str:
    text = f"{len(items)}" + (f" ({note})" if note else "")
    return text + (f": {_first(items)}" if items else "")


def _first(items: list[str]) -> str:
    if not items:
        return "(none)"
    return ", ".join(items[:_SHOW]) + (f", ... ({len(items) - _SHOW} more)" if len(items) > _SHOW else "")


# --- sources ------------------------------------------------------------------------------


def _alignment_parts(source: str) -> list[tuple[str, str, str]]:
    """``(kind, target, where)`` for each table making up an alignment source."""
    path = Path(source)
    if is_rspecifier(source) or not path.is_dir():
        kind, target = parse_rspecifier(source, what="alignment")
        if Path(target).is_dir() and not target.endswith("|"):
            raise DataError(f"{source}: is a directory; pass the alignment dir itself, without '{kind}:'")
        return [(kind, target, source)]
    if (path / "ali.scp").is_file():
        return [("scp", str(path / "ali.scp"), str(path / "ali.scp"))]
    numbered = [
        (int(m.group(1)), p) for p in path.glob("ali.*.gz") if (m := re.fullmatch(r"ali\.(\d+)\.gz", p.name))
    ]
    if numbered:
        return [("ark", str(p), str(p)) for _, p in sorted(numbered)]
    if (path / "ali.ark").is_file():
        return [("ark", str(path / "ali.ark"), str(path / "ali.ark"))]
    raise DataError(
        f"{path}: no ali.scp, ali.N.gz or ali.ark in this alignment dir; run the "
        "alignment (e.g. steps/align_si.sh) or pass the archive itself"
    )


def _check_labels(labels: str) -> None:
    if labels not in (*_LABELS, "transition"):
        raise ConfigError(
            f"alignment labels={labels!r}: a GMM dir's transition-ids become {' or '.join(_LABELS)} "
            "labels, or stay transition-ids (transition); use one of these"
        )


def _gmm_dir_model(source: str) -> KaldiModel | None:
    """The transition model of a Kaldi GMM dir (a dir holding ``final.mdl``); None for other sources."""
    path = Path(source)
    if is_rspecifier(source) or not (path / "final.mdl").is_file():
        return None
    return read_model(path / "final.mdl", with_gmm=False)


def _from_transition_ids(
    vector: np.ndarray, table: np.ndarray, *, utt: str, where: str, model: str
) -> np.ndarray:
    """Labels of transition-ids through ``table`` (indexed by transition-id; id 0 does not exist)."""
    outside = np.flatnonzero((vector < 1) | (vector >= len(table)))
    if outside.size:
        raise DataError(
            f"{where}: utterance '{utt}': transition-id {vector[outside[0]]} is not in 1..{len(table) - 1} "
            f"of {model}; these alignments were made with another model — put the aligning "
            "model's final.mdl in the dir (or re-align with this one)"
        )
    return table[vector]


def _int_vector(reader: TableReader, utt: str | None, first: bytes) -> np.ndarray:
    """An int32 vector: binary (``\\0B\\4`` + length + ``\\4``-prefixed int32s) or a text line."""
    first = reader.begin(utt, first)
    if first == b"\n":  # a text entry "utt \n" is an empty vector
        return np.zeros(0, dtype=np.int32)
    if first == b"\0":
        head = reader.exact(5, utt=utt, what="the vector length")
        if head[0] != 4:
            kind = head[:3].decode("latin-1").strip()
            raise reader.fail(
                f"holds a {kind!r} object, not an int32 vector",
                utt=utt,
                fix="pass an alignment archive (pdf-ids: ali-to-pdf; phones: ali-to-phones --per-frame)",
            )
        (size,) = struct.unpack("<i", head[1:])
        if size < 0:
            raise reader.fail(f"negative vector length {size}", utt=utt)
        return reader.int32s(size, utt=utt).astype(np.int32)
    line = first + reader.stream.readline()
    tokens = line.split()
    if tokens[:1] == [b"["]:
        tokens = tokens[1:]
    if tokens[-1:] == [b"]"]:
        tokens = tokens[:-1]
    try:
        values = np.array(tokens, dtype=np.int64)
    except ValueError:
        bad = next(t for t in tokens if not t.lstrip(b"-").isdigit())
        raise reader.fail(
            f"text vector has {bad[:20].decode('latin-1')!r}, not an integer",
            utt=utt,
            fix="alignments must be integer labels",
        ) from None
    if values.size and (values.min() < -(2**31) or values.max() >= 2**31):
        raise reader.fail("a label does not fit in int32", utt=utt)
    return values.astype(np.int32)
