"""A data dir's feature archives as an utterance source.

:class:`StreamingSource` holds metadata only — ids, frame counts from ``utt2num_frames``,
where each matrix lies (``feats.scp``: archive and byte offset), speakers and token
targets, packed into arrays — so a learner's memory grows with the corpus only by a few
bytes per utterance. :class:`ArchiveReader` reads its matrices (plain or compressed),
normalised, one planned batch at a time, keeping each archive open once. Build a source
with :func:`asrkit.loader.opening.open_data_dir`.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import torch

from asrkit.data.kaldi_table import TableReader, read_float_matrix_at, read_matrix, read_matrix_at
from asrkit.errors import DataError
from asrkit.loader.batch import Batch, CmvnNormalizer, Utterance, batch_around
from asrkit.loader.sources import Indices, UtteranceReader, UtteranceSource

log = logging.getLogger(__name__)


#: The largest magnitude a feature value may have once normalised (or raw, with
#: ``features.cmvn=none``): log-mel and MFCC values of real speech stay within a few
#: hundred, normalised ones within a few tens. Random bytes written into an archive's
#: float data give NaN, infinities or magnitudes up to 3.4e38 in most of their floats.
FEATURE_LIMIT = 1.0e4
_LIMIT_SQUARED = FEATURE_LIMIT * FEATURE_LIMIT

#: What to do about a damaged feature archive: stage 2 alone says "already done".
RERUN_FEATURES = (
    "rerun the feature stage with --force (asrkit run --stage 2 --stop-stage 2 --force, same settings)"
)


def check_values(
    feats: np.ndarray, source: StreamingSource, indices: Sequence[int], lengths: Sequence[int]
) -> None:
    """Raise a :class:`DataError` naming the utterance, its archive and the value when any
    frame of ``feats`` ``(B, T, D)`` (utterance ``indices[k]``'s first ``lengths[k]``
    rows in ``feats[k]``) is not finite or beyond :data:`FEATURE_LIMIT`."""
    if feats.size == 0:
        return
    flat = feats.reshape(-1)
    # One BLAS pass: a sum of squares within the limit's square bounds every value (NaN and
    # infinities make it NaN or inf); real normalised features stay far below it. Only a
    # block over it (raw features, say) is looked at value by value.
    with np.errstate(over="ignore", invalid="ignore"):  # damaged data overflow it: looked at below
        within = np.dot(flat, flat) <= _LIMIT_SQUARED
    if within:
        return
    if feats.min() >= -FEATURE_LIMIT and feats.max() <= FEATURE_LIMIT:
        return
    for k, (i, n) in enumerate(zip(indices, lengths, strict=True)):
        rows = feats[k, : int(n)]
        bad = np.flatnonzero(~(np.abs(rows) <= FEATURE_LIMIT))
        if bad.size:
            frame, dim = divmod(int(bad[0]), rows.shape[1])
            raise DataError(
                f"{source.scp}: utterance '{source.ids[int(i)]}' at {source.where(int(i))}: feature "
                f"value {rows[frame, dim]:.6g} at frame {frame}, dim {dim} (|value| > {FEATURE_LIMIT:g} "
                f"or not a number); the archive is damaged — {RERUN_FEATURES}"
            )


@dataclass
class Packed:
    """Variable-length int sequences packed into one array: item ``i`` is
    ``values[starts[i]:starts[i + 1]]``."""

    values: np.ndarray
    starts: np.ndarray

    @classmethod
    def of(cls, items: Sequence[Indices], dtype: type = np.int32) -> Packed:
        sizes = np.fromiter((len(x) for x in items), dtype=np.int64, count=len(items))
        starts = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        values = (
            np.concatenate([np.asarray(x, dtype=dtype) for x in items])
            if len(items)
            else np.zeros(0, dtype=dtype)
        )
        return cls(values.astype(dtype, copy=False), starts)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.starts[i] : self.starts[i + 1]]

    def take(self, indices: Sequence[int]) -> Packed:
        return Packed.of([self[i] for i in indices], dtype=self.values.dtype.type)


class StreamingSource(UtteranceSource):
    """A data dir's utterances, read from its feature archives when asked for.

    Build it with :func:`open_data_dir`. Entries of ``feats.scp`` of the usual form
    ``file.ark:offset`` are kept as (archive number, offset); any other rxfilename (a row
    range, a pipe, a file holding one matrix) is kept as text and read with
    :func:`~asrkit.data.kaldi_table.read_matrix`.
    """

    def __init__(
        self,
        *,
        data_dir: Path,
        ids: list[str],
        lengths: np.ndarray,
        arks: list[str],
        ark_of: np.ndarray,
        offsets: np.ndarray,
        others: dict[int, str],
        speakers: list[str],
        spk_of: np.ndarray,
        tokens: Packed | None,
        text: dict[str, str] | None,
        normalize: CmvnNormalizer,
        speaker_stats: dict[str, np.ndarray],
        dim: int,
        ali: Packed | None = None,
    ) -> None:
        self.data_dir, self.ids, self.lengths = data_dir, ids, lengths
        self.arks, self.ark_of, self.offsets, self.others = arks, ark_of, offsets, others
        self.speakers, self.spk_of, self.tokens, self.text = speakers, spk_of, tokens, text
        self.normalize, self.speaker_stats, self.dim, self.ali = normalize, speaker_stats, dim, ali

    @property
    def scp(self) -> Path:
        return self.data_dir / "feats.scp"

    def reader(self) -> UtteranceReader:
        return ArchiveReader(self)

    def texts(self) -> dict[str, str]:
        return dict(self.text or {})

    def assemble(self, indices: np.ndarray, feats: torch.Tensor) -> Batch:
        rows = indices.tolist()
        return batch_around(
            [self.ids[i] for i in rows],
            feats,
            self.lengths[indices],
            None if self.tokens is None else [self.tokens[i] for i in rows],
            None if self.ali is None else [self.ali[i] for i in rows],
        )

    def where(self, i: int) -> str:
        """``file.ark:offset`` (or the rxfilename) of utterance ``i``."""
        if self.ark_of[i] < 0:
            return self.others[i]
        return f"{self.arks[self.ark_of[i]]}:{self.offsets[i]}"

    def with_alignments(self, labels: dict[str, np.ndarray], *, step: int) -> StreamingSource:
        kept = [i for i, utt in enumerate(self.ids) if utt in labels]
        ali = Packed.of([labels[self.ids[i]][::step] for i in kept])
        source = self.subset(kept)
        source.ali = ali
        return source

    def subset(self, indices: Sequence[int]) -> StreamingSource:
        """The utterances at ``indices`` (metadata only; nothing is read)."""
        idx = np.asarray(indices, dtype=np.int64)
        others = {new: self.others[old] for new, old in enumerate(indices) if old in self.others}
        ids = [self.ids[i] for i in indices]
        return StreamingSource(
            data_dir=self.data_dir,
            ids=ids,
            lengths=self.lengths[idx],
            arks=self.arks,
            ark_of=self.ark_of[idx],
            offsets=self.offsets[idx],
            others=others,
            speakers=self.speakers,
            spk_of=self.spk_of[idx],
            tokens=None if self.tokens is None else self.tokens.take(indices),
            text=None if self.text is None else {u: self.text[u] for u in ids},
            normalize=self.normalize,
            speaker_stats=self.speaker_stats,
            dim=self.dim,
            ali=None if self.ali is None else self.ali.take(indices),
        )


class ArchiveReader(UtteranceReader):
    """Reads a :class:`StreamingSource`'s matrices, keeping each archive open once."""

    source: StreamingSource

    def __init__(self, source: StreamingSource) -> None:
        self.source = source
        self.handles: dict[int, IO[bytes]] = {}

    def read(self, indices: Indices) -> list[Utterance]:
        return [self._utterance(int(i)) for i in indices]

    def _utterance(self, i: int) -> Utterance:
        src = self.source
        utt = src.ids[i]
        feats = src.normalize(self._checked(i), self._speaker_stats(i))
        check_values(feats[None], src, [i], [feats.shape[0]])
        tokens = np.zeros(0, dtype=np.int64) if src.tokens is None else src.tokens[i].astype(np.int64)
        ali = None if src.ali is None else src.ali[i].astype(np.int64)
        return Utterance(utt, feats, tokens, src.text.get(utt, "") if src.text else "", ali)

    def fill(self, indices: Indices, out: np.ndarray) -> None:
        # Float matrices are read straight into the padded batch, one system call each, and
        # normalised there while still in the cache; anything else is read utterance by
        # utterance. Either way the result equals collate(read(indices)).feats.
        src = self.source
        idx = np.asarray(indices, dtype=np.int64)
        lengths = src.lengths[idx]
        if not self._read_floats(idx, lengths, out):
            for k, i in enumerate(idx.tolist()):
                rows = out[k, : lengths[k]]
                src.normalize(self._checked(i, out=rows), self._speaker_stats(i), out=rows)
                check_values(rows[None], src, [i], [lengths[k]])
        longest = out.shape[1]
        for k, n in enumerate(lengths.tolist()):
            if n < longest:
                out[k, n:] = 0.0  # padding

    def _read_floats(self, idx: np.ndarray, lengths: np.ndarray, feats: np.ndarray) -> bool:
        """Read and normalise every utterance of ``idx`` into its rows of ``feats``
        ``(B, T, D)`` with one ``preadv`` (header and data) each, when all are ``FM``
        matrices of the promised shape at archive offsets; False when any is not (the
        caller then reads them one by one, through the checks that name what is wrong)."""
        src = self.source
        if src.ark_of[idx].min() < 0:  # an entry that is not an archive offset
            return False
        norm = src.normalize
        scale, offset = norm.global_transform() if norm.mode == "global" else (None, None)
        head = bytearray(15)
        dim = struct.pack("<bi", 4, src.dim)
        for k, (i, n, at) in enumerate(
            zip(idx.tolist(), lengths.tolist(), src.offsets[idx].tolist(), strict=True)
        ):
            rows = feats[k, :n]
            got = os.preadv(self.handle(i).fileno(), [head, rows.data], at)
            # The header must be \0B "FM " \4 rows \4 dim (little-endian int32s).
            if got != 15 + rows.nbytes or head != b"\0BFM " + struct.pack("<bi", 4, n) + dim:
                return False
            if scale is not None:  # apply_transform's arithmetic, on rows still in the cache
                np.multiply(rows, scale, out=rows)
                rows += offset
            elif norm.mode == "speaker":
                norm(rows, self._speaker_stats(i), out=rows)
            flat = rows.reshape(-1)  # checked while still in the cache (check_values)
            if not np.dot(flat, flat) <= _LIMIT_SQUARED:
                check_values(rows[None], src, [i], [n])
        return True

    def _speaker_stats(self, i: int) -> np.ndarray | None:
        src = self.source
        return src.speaker_stats.get(src.speakers[src.spk_of[i]]) if src.speaker_stats else None

    def _checked(self, i: int, *, out: np.ndarray | None = None) -> np.ndarray:
        """Utterance ``i``'s matrix, of the frames and dimension the index promises (a float
        matrix is read into ``out`` when given)."""
        src = self.source
        rows, ark = int(src.lengths[i]), int(src.ark_of[i])
        if ark >= 0 and ark in self.handles:  # the fast path for float matrices
            mat = read_float_matrix_at(
                self.handles[ark], int(src.offsets[i]), rows=rows, cols=src.dim, out=out
            )
            if mat is not None:
                return mat
        mat = self._matrix(i)
        if mat.shape != (rows, src.dim):
            raise DataError(
                f"{src.scp}: utterance '{src.ids[i]}' at {src.where(i)}: holds a "
                f"{mat.shape[0]}x{mat.shape[1]} matrix, but utt2num_frames says "
                f"{rows} frames and the set has {src.dim}-dim features; the data "
                f"dir is stale — {RERUN_FEATURES}"
            )
        return mat

    def _matrix(self, i: int) -> np.ndarray:
        src = self.source
        ark = int(src.ark_of[i])
        if ark < 0:
            try:
                return read_matrix(src.others[i])
            except DataError as err:
                raise unreadable(src, i, err) from None
        try:
            return read_matrix_at(self.handle(i), int(src.offsets[i]), where=src.where(i))
        except DataError as err:  # names the archive and the offset
            raise unreadable(src, i, err) from None

    def handle(self, i: int) -> IO[bytes]:
        """The open archive of utterance ``i`` (an ``ark:offset`` entry), opened once."""
        src = self.source
        ark = int(src.ark_of[i])
        handle = self.handles.get(ark)
        if handle is None:
            path = src.arks[ark]
            try:
                handle = self.handles[ark] = open(path, "rb")  # noqa: SIM115 (closed in close())
            except OSError as err:
                raise DataError(
                    f"{src.scp}: utterance '{src.ids[i]}': cannot open {path} "
                    f"({err.strerror}); {RERUN_FEATURES}"
                ) from None
        return handle

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()
        self.handles.clear()


def unreadable(source: StreamingSource, i: int, err: DataError) -> DataError:
    return DataError(
        f"{source.scp}: utterance '{source.ids[i]}': cannot read features ({err}); {RERUN_FEATURES}"
    )


def matrix_rows(source: StreamingSource) -> list[int]:
    """Rows of every matrix, from its header (binary data is skipped, not read)."""
    rows = []
    reader = ArchiveReader(source)
    try:
        for i in range(len(source.ids)):
            try:
                if source.ark_of[i] < 0:
                    rows.append(read_matrix(source.others[i]).shape[0])
                    continue
                handle = reader.handle(i)
                handle.seek(int(source.offsets[i]))
                table = TableReader(handle, source.where(i))
                with table.low_level_errors():
                    rows.append(table.matrix_rows(None, handle.read(1)))
            except DataError as err:
                raise unreadable(source, i, err) from None
    finally:
        reader.close()
    return rows


def feature_dim(source: StreamingSource, input_dim: int | None) -> int:
    """The feature dimension, from the first matrix (the only one read to open a set)."""
    reader = ArchiveReader(source)
    try:
        mat = reader._matrix(0)
    finally:
        reader.close()
    if input_dim is not None and mat.shape[1] != input_dim:
        raise DataError(
            f"{source.scp}: utterance '{source.ids[0]}' has {mat.shape[1]}-dim "
            f"features but the model expects {input_dim}; they were computed with "
            f"other settings ({source.data_dir / 'feats.yaml'}) — recompute them "
            "(stage 2) with the model's feature settings"
        )
    return int(mat.shape[1])


# --- planned batches --------------------------------------------------------------------------
