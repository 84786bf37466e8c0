"""Streaming training data: batches planned from metadata, features read when they are used.

A set of utterances is an :class:`UtteranceSource`: the frame count of each utterance
(all that batch planning needs) and a way to read utterances by index.

- :class:`StreamingSource` holds metadata only — ids, frame counts from
  ``utt2num_frames``, where each matrix lies (``feats.scp``: archive and byte offset),
  speakers and token targets, packed into arrays. A learner's memory therefore grows with
  the corpus only by a few bytes per utterance; features are read (plain or compressed
  matrices), normalised and collated one planned batch at a time.
- :class:`InMemorySource` holds utterances already read (a small set, a test).

:class:`BucketBatches` plans the batches of each epoch and reads them ahead of the
training step through :mod:`asrkit.loader.prefetch` (worker processes filling shared memory,
or threads), each worker through its own reader (one open handle per archive).
"""

from __future__ import annotations

import array
import dataclasses
import logging
import os
import random
import struct
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import torch

from asrkit.data.datadir import iter_kaldi_map, read_kaldi_map
from asrkit.data.kaldi_table import TableReader, read_float_matrix_at, read_matrix, read_matrix_at
from asrkit.errors import ConfigError, DataError
from asrkit.features.cmvn import read_cmvn
from asrkit.loader.batch import Batch, CmvnNormalizer, Utterance, batch_around, plan_buckets
from asrkit.loader.prefetch import Prefetcher, ReaderPool, can_fork
from asrkit.targets.tokenizer import Tokenizer

log = logging.getLogger(__name__)

#: Utterance positions in a source.
Indices = Sequence[int] | np.ndarray


class UtteranceReader(ABC):
    """Reads utterances of one source; one per thread or process (it may hold open files).

    Attributes:
        source: the set it reads.
    """

    source: UtteranceSource

    @abstractmethod
    def read(self, indices: Indices) -> list[Utterance]:
        """The utterances at ``indices`` of the source, in that order."""

    def fill(self, indices: Indices, out: np.ndarray) -> None:
        """Write the normalised features of ``indices`` into ``out`` ``(B, T, D)`` float32,
        ``T`` the longest of them, zeros past each utterance's end (numpy only: this runs
        in the read-ahead workers)."""
        for k, u in enumerate(self.read(indices)):
            n = u.feats.shape[0]
            out[k, :n] = u.feats
            out[k, n:] = 0.0

    def read_batch(self, indices: Indices) -> Batch:
        """The utterances at ``indices`` as a padded batch (equal to ``collate(read(indices))``)."""
        idx = np.asarray(indices, dtype=np.int64)
        feats = np.empty(self.source.batch_shape(idx), dtype=np.float32)
        self.fill(idx, feats)
        return self.source.assemble(idx, torch.from_numpy(feats))

    def close(self) -> None:  # noqa: B027  a reader that holds no files has nothing to close
        """Release open files."""


class UtteranceSource(ABC):
    """A set of utterances: lengths for planning, utterances on demand.

    Attributes:
        ids: utterance ids, in data dir order.
        lengths: ``(N,)`` feature frames of each utterance.
        dim: the feature dimension.
    """

    ids: list[str]
    lengths: np.ndarray
    dim: int

    def __len__(self) -> int:
        return len(self.ids)

    def batch_shape(self, indices: np.ndarray) -> tuple[int, int, int]:
        """``(B, T, D)`` of the padded features of ``indices``."""
        return len(indices), int(self.lengths[indices].max()), self.dim

    @abstractmethod
    def assemble(self, indices: np.ndarray, feats: torch.Tensor) -> Batch:
        """The batch of ``indices`` around its padded features ``feats`` (read by
        :meth:`UtteranceReader.fill`): ids, lengths, token and frame targets."""

    @abstractmethod
    def reader(self) -> UtteranceReader:
        """A new reader (each thread that reads needs its own)."""

    @abstractmethod
    def texts(self) -> dict[str, str]:
        """Utterance id -> reference transcript (for the dev WER)."""

    @abstractmethod
    def with_alignments(self, labels: dict[str, np.ndarray], *, step: int) -> UtteranceSource:
        """The utterances that have frame targets, each given ``labels[utt][::step]``."""

    def read_all(self) -> list[Utterance]:
        """Every utterance (reads the whole set into memory)."""
        reader = self.reader()
        try:
            return reader.read(range(len(self)))
        finally:
            reader.close()


class InMemorySource(UtteranceSource):
    """Utterances already in memory."""

    def __init__(self, utts: Sequence[Utterance]) -> None:
        self.utts = list(utts)
        self.ids = [u.utt for u in self.utts]
        self.lengths = np.array([u.feats.shape[0] for u in self.utts], dtype=np.int64)
        self.dim = int(self.utts[0].feats.shape[1]) if self.utts else 0

    def reader(self) -> UtteranceReader:
        return _ListReader(self)

    def assemble(self, indices: np.ndarray, feats: torch.Tensor) -> Batch:
        utts = [self.utts[i] for i in indices.tolist()]
        return batch_around(
            [u.utt for u in utts],
            feats,
            self.lengths[indices],
            [u.tokens for u in utts],
            [u.ali for u in utts],
        )

    def texts(self) -> dict[str, str]:
        return {u.utt: u.text for u in self.utts}

    def with_alignments(self, labels: dict[str, np.ndarray], *, step: int) -> InMemorySource:
        return InMemorySource(
            [
                dataclasses.replace(u, ali=np.ascontiguousarray(labels[u.utt][::step], dtype=np.int64))
                for u in self.utts
                if u.utt in labels
            ]
        )


class _ListReader(UtteranceReader):
    source: InMemorySource

    def __init__(self, source: InMemorySource) -> None:
        self.source = source

    def read(self, indices: Indices) -> list[Utterance]:
        return [self.source.utts[i] for i in indices]


def as_source(data: UtteranceSource | Sequence[Utterance]) -> UtteranceSource:
    """``data`` as a source (a list of utterances is wrapped)."""
    return data if isinstance(data, UtteranceSource) else InMemorySource(data)


@dataclass
class _Packed:
    """Variable-length int sequences packed into one array: item ``i`` is
    ``values[starts[i]:starts[i + 1]]``."""

    values: np.ndarray
    starts: np.ndarray

    @classmethod
    def of(cls, items: Sequence[Indices], dtype: type = np.int32) -> _Packed:
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

    def take(self, indices: Sequence[int]) -> _Packed:
        return _Packed.of([self[i] for i in indices], dtype=self.values.dtype.type)


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
        tokens: _Packed | None,
        text: dict[str, str] | None,
        normalize: CmvnNormalizer,
        speaker_stats: dict[str, np.ndarray],
        dim: int,
        ali: _Packed | None = None,
    ) -> None:
        self.data_dir, self.ids, self.lengths = data_dir, ids, lengths
        self.arks, self.ark_of, self.offsets, self.others = arks, ark_of, offsets, others
        self.speakers, self.spk_of, self.tokens, self.text = speakers, spk_of, tokens, text
        self.normalize, self.speaker_stats, self.dim, self.ali = normalize, speaker_stats, dim, ali

    @property
    def scp(self) -> Path:
        return self.data_dir / "feats.scp"

    def reader(self) -> UtteranceReader:
        return _ArkReader(self)

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
        ali = _Packed.of([labels[self.ids[i]][::step] for i in kept])
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


class _ArkReader(UtteranceReader):
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
                "dir is stale — rerun the feature stage"
            )
        return mat

    def _matrix(self, i: int) -> np.ndarray:
        src = self.source
        ark = int(src.ark_of[i])
        if ark < 0:
            try:
                return read_matrix(src.others[i])
            except DataError as err:
                raise _unreadable(src, i, err) from None
        try:
            return read_matrix_at(self.handle(i), int(src.offsets[i]), where=src.where(i))
        except DataError as err:  # names the archive and the offset
            raise _unreadable(src, i, err) from None

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
                    f"({err.strerror}); rerun the feature stage"
                ) from None
        return handle

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()
        self.handles.clear()


def open_data_dir(
    data_dir: str | Path,
    normalize: CmvnNormalizer,
    *,
    tokenizer: Tokenizer | None = None,
    input_dim: int | None = None,
    keep_text: bool = False,
) -> StreamingSource:
    """Index a data dir's features for streaming: reads its metadata, no feature data.

    Checks what can be checked cheaply before training starts: every utterance of
    ``feats.scp`` has a speaker, a frame count (and a transcript that encodes to tokens
    when ``tokenizer`` is given); every archive exists and is longer than its largest
    offset (one ``stat`` per archive); the first matrix has ``input_dim`` columns.

    Args:
        data_dir: a Kaldi data dir with ``feats.scp`` and ``utt2spk`` (``utt2num_frames``
            is read when present, otherwise the matrix headers are).
        normalize: the CMVN applied to every utterance as it is read.
        tokenizer: encodes ``text`` into token targets.
        input_dim: the feature dimension the model expects.
        keep_text: keep the transcripts (a dev set: its WER needs them).

    Raises:
        DataError: naming the file, the utterance (and the offset) and the fix.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"{data_dir}: data directory not found; run the data preparation stage first")
    scp = data_dir / "feats.scp"
    if not scp.is_file():
        raise DataError(f"{scp}: not found; run the feature stage (stage 2) for {data_dir}")
    # Every file is read line by line and joined on the sorted ids, so opening a corpus of
    # millions of utterances never holds its text files in memory.
    ids: list[str] = []
    arks: list[str] = []
    ark_number: dict[str, int] = {}
    ark_of, offsets = array.array("i"), array.array("q")
    others: dict[int, str] = {}
    for _, utt, rx in iter_kaldi_map(scp):
        path, sep, offset = rx.rpartition(":")
        if sep and offset.isdigit() and not rx.endswith("|"):
            number = ark_number.get(path)
            if number is None:
                number = ark_number[path] = len(arks)
                arks.append(path)
            ark_of.append(number)
            offsets.append(int(offset))
        else:
            others[len(ids)] = rx
            ark_of.append(-1)
            offsets.append(0)
        ids.append(utt)
    if not ids:
        raise DataError(f"{scp}: empty; rerun the feature stage (stage 2) for {data_dir}")
    spk_number: dict[str, int] = {}
    spk_of = array.array("i")
    for spk in _joined(ids, data_dir / "utt2spk", "a speaker"):
        spk_of.append(spk_number.setdefault(spk, len(spk_number)))
    speakers = list(spk_number)
    tokens, text = None, None
    if tokenizer is not None or keep_text:
        values, starts, kept = array.array("i"), array.array("q", [0]), {}
        for utt, transcript in zip(
            ids, _joined(ids, data_dir / "text", "a transcript", allow_empty=True), strict=True
        ):
            if keep_text:
                kept[utt] = transcript
            if tokenizer is not None:
                encoded = tokenizer.encode(transcript)
                if not encoded:
                    raise DataError(
                        f"{data_dir}/text: utterance '{utt}' encodes to no tokens; check its transcript"
                    )
                values.extend(encoded)
                starts.append(len(values))
        if tokenizer is not None:
            tokens = _Packed(np.frombuffer(values, dtype=np.int32), np.frombuffer(starts, dtype=np.int64))
        text = kept if keep_text else None
    source = StreamingSource(
        data_dir=data_dir,
        ids=ids,
        lengths=np.zeros(len(ids), dtype=np.int64),
        arks=arks,
        ark_of=np.frombuffer(ark_of, dtype=np.int32),
        offsets=np.frombuffer(offsets, dtype=np.int64),
        others=others,
        speakers=speakers,
        spk_of=np.frombuffer(spk_of, dtype=np.int32),
        tokens=tokens,
        text=text,
        normalize=normalize,
        speaker_stats={},
        dim=0,
    )
    _check_arks(scp, ids, arks, source.ark_of, source.offsets)
    source.speaker_stats = _speaker_stats(data_dir, normalize, speakers)
    source.lengths = _frame_counts(data_dir, source)
    source.dim = _first_dim(source, input_dim)
    return source


def _joined(ids: list[str], path: Path, what: str, *, allow_empty: bool = False) -> Iterator[str]:
    """The value of each of ``ids`` (sorted) in the sorted map file ``path``; the file may
    list more utterances (they are skipped), not fewer."""
    entries = iter_kaldi_map(path, allow_empty_value=allow_empty)
    key: str | None = None
    value = ""
    for utt in ids:
        while key is None or key < utt:
            try:
                _, key, value = next(entries)
            except StopIteration:
                key = None
                break
        if key != utt:
            raise DataError(
                f"{path}: utterance '{utt}' of feats.scp has no {what}; fix the data "
                "dir (Kaldi: utils/fix_data_dir.sh)"
            )
        yield value


def _check_arks(scp: Path, ids: list[str], arks: list[str], ark_of: np.ndarray, offsets: np.ndarray) -> None:
    """Every archive exists and extends past its largest offset (one stat per archive)."""
    if not arks:
        return
    first = np.full(len(arks), -1, dtype=np.int64)  # each archive's first utterance
    last = np.full(len(arks), -1, dtype=np.int64)  # the utterance at its largest offset
    for i in np.flatnonzero(ark_of >= 0).tolist():
        a = int(ark_of[i])
        if first[a] < 0:
            first[a] = i
        if last[a] < 0 or offsets[i] > offsets[last[a]]:
            last[a] = i
    for a, path in enumerate(arks):
        i = int(last[a])
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise DataError(
                f"{scp}: utterance '{ids[first[a]]}': {path}: file not found; rerun "
                "the feature stage (or fix the paths in feats.scp)"
            ) from None
        except OSError as err:
            raise DataError(
                f"{scp}: utterance '{ids[first[a]]}': {path}: cannot stat "
                f"({err.strerror}); check its permissions"
            ) from None
        if offsets[i] >= size:
            raise DataError(
                f"{scp}: utterance '{ids[i]}': offset {offsets[i]} is past the end "
                f"of {path} ({size} bytes); the archive was cut short or the scp is "
                "stale — regenerate both (rerun the feature stage)"
            )


def _speaker_stats(data_dir: Path, normalize: CmvnNormalizer, speakers: list[str]) -> dict[str, np.ndarray]:
    if normalize.mode != "speaker":
        return {}
    cmvn_scp = data_dir / "cmvn.scp"
    if not cmvn_scp.is_file():
        raise DataError(
            f"{cmvn_scp}: not found; features.cmvn=speaker needs the per-speaker "
            f"stats that the feature stage (stage 2) writes for {data_dir}"
        )
    entries = read_kaldi_map(cmvn_scp)
    missing = [spk for spk in speakers if spk not in entries]
    if missing:
        raise DataError(
            f"{cmvn_scp}: no stats for speaker '{missing[0]}' ({len(missing)} "
            "speaker(s) missing); rerun the feature stage"
        )
    return {spk: read_cmvn(entries[spk]) for spk in speakers}


def _frame_counts(data_dir: Path, source: StreamingSource) -> np.ndarray:
    """Frames per utterance from ``utt2num_frames``, else from the matrix headers."""
    path = data_dir / "utt2num_frames"
    if path.is_file():
        lengths = np.zeros(len(source.ids), dtype=np.int64)
        for i, (utt, value) in enumerate(
            zip(source.ids, _joined(source.ids, path, "frame count"), strict=True)
        ):
            if not value.isdigit():
                raise DataError(
                    f"{path}: utterance '{utt}' has frame count {value!r}, expected "
                    "an integer >= 0; regenerate it (feat-to-len scp:feats.scp ark,t:-)"
                )
            lengths[i] = int(value)
        return lengths
    log.info(
        "%s: no utt2num_frames; reading the %d matrix headers instead (write it once with "
        "feat-to-len scp:feats.scp ark,t:%s)",
        data_dir,
        len(source.ids),
        path,
    )
    return np.array(_header_rows(source), dtype=np.int64)


def _unreadable(source: StreamingSource, i: int, err: DataError) -> DataError:
    return DataError(
        f"{source.scp}: utterance '{source.ids[i]}': cannot read features ({err}); rerun the feature stage"
    )


def _header_rows(source: StreamingSource) -> list[int]:
    """Rows of every matrix, from its header (binary data is skipped, not read)."""
    rows = []
    reader = _ArkReader(source)
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
                raise _unreadable(source, i, err) from None
    finally:
        reader.close()
    return rows


def _first_dim(source: StreamingSource, input_dim: int | None) -> int:
    """The feature dimension, from the first matrix (the only one read to open a set)."""
    reader = _ArkReader(source)
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


class BucketBatches:
    """Epoch-by-epoch batches: fixed length buckets planned from frame counts alone, their
    order reshuffled per epoch from ``seed``; features are read as the batches are used.

    With ``world > 1`` the buckets are *global* batches (at least ``world`` utterances
    each) and this learner reads utterances ``rank::world`` of each, so ``world`` learners
    together take the same steps as one process would; every learner sees the same
    number of batches in the same order.

    Reading ahead in worker processes (``loader="process"``) starts a
    :class:`~asrkit.loader.prefetch.ReaderPool` on first use (or :meth:`start`) that
    lives until :meth:`close`; use the object as a context manager.

    Args:
        source: the set (a list of utterances is taken as an in-memory set).
        max_frames, max_batch: see :func:`~asrkit.loader.batch.make_buckets` (global,
            across learners).
        shuffle: reshuffle the batch order every epoch.
        seed: base seed; epoch ``e`` uses ``seed + e``.
        rank, world: this learner's share of each batch.
        indices: the utterances of ``source`` to batch (default all; a learner's shard).
        bucket_share: ``(k, n)``: this learner takes whole buckets ``k::n`` of each epoch's
            order (sharded validation) instead of a share of every bucket.
        prefetch: batches read ahead by background workers (0: read when asked for).
        workers: reading workers.
        loader: ``process`` (forked worker processes, where ``fork`` is available) or
            ``thread`` (see :mod:`asrkit.loader.prefetch`).
    """

    def __init__(
        self,
        source: UtteranceSource | Sequence[Utterance],
        *,
        max_frames: int,
        max_batch: int,
        shuffle: bool = True,
        seed: int = 1,
        rank: int = 0,
        world: int = 1,
        indices: Sequence[int] | None = None,
        bucket_share: tuple[int, int] = (0, 1),
        prefetch: int = 4,
        workers: int = 1,
        loader: str = "process",
    ) -> None:
        self.source = as_source(source)
        chosen = np.arange(len(self.source)) if indices is None else np.asarray(indices, np.int64)
        self.buckets = [
            chosen[b]
            for b in plan_buckets(
                self.source.lengths[chosen], max_frames=max_frames, max_batch=max_batch, min_batch=world
            )
        ]
        self.shuffle, self.seed, self.rank, self.world = shuffle, seed, rank, world
        self.bucket_share = bucket_share
        self.prefetch, self.workers = prefetch, workers
        self.pool = (
            ReaderPool(self, depth=prefetch, workers=workers)
            if prefetch > 0 and loader == "process" and can_fork()
            else None
        )
        #: Put batches in page-locked memory as they are read (for CUDA).
        self.pin_memory = False
        self._largest: int | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(range(self.bucket_share[0], len(self.buckets), self.bucket_share[1]))

    def __enter__(self) -> BucketBatches:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the reading workers now (processes: forking before the training step has
        filled the learner's memory makes the fork cheaper)."""
        if self.pool is not None:
            self.pool.start()

    def close(self) -> None:
        """Stop the reading workers."""
        if self.pool is not None:
            self.pool.close()

    def plan(self, epoch: int, *, start: int = 0) -> Iterator[np.ndarray]:
        """Epoch ``epoch``'s buckets in order, from its ``start``-th on (nothing is read)."""
        order = list(range(len(self.buckets)))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        k, n = self.bucket_share
        for b in order[k::n][start:]:
            yield self.buckets[b]

    def epoch(self, epoch: int, *, start: int = 0) -> Generator[Batch, None, None]:
        """Epoch ``epoch``'s batches from its ``start``-th on (a resumed run reads none of
        the ones before)."""
        if self.pool is not None:
            yield from self.pool.run(epoch, start=start)
            return
        with self.loader(self.plan(epoch, start=start)) as batches:
            yield from batches

    def loader(self, plan: Iterator[np.ndarray]) -> Prefetcher[Batch]:
        """The batches of ``plan``'s buckets read by threads (or, with ``prefetch == 0``,
        when asked for)."""
        return Prefetcher(plan, self._read, self.source, depth=self.prefetch, threads=self.workers)

    def share(self, bucket: np.ndarray) -> np.ndarray:
        """The utterances of ``bucket`` that this learner reads."""
        return bucket[self.rank :: self.world]

    def finish(self, batch: Batch, bucket: np.ndarray) -> Batch:
        """``batch`` (this learner's share of ``bucket``) with its loss normaliser."""
        batch.norm = len(bucket) / self.world
        batch.global_utts = len(bucket)
        return batch.pin_memory() if self.pin_memory else batch

    def _read(self, reader: UtteranceReader, bucket: np.ndarray) -> Batch:
        return self.finish(reader.read_batch(self.share(bucket)), bucket)

    def largest_batch(self) -> int:
        """Floats in the largest padded feature block of any bucket's share (the size of
        a read-ahead slot)."""
        if self._largest is None:
            self._largest = 0
            for bucket in self.buckets:
                share = self.share(bucket)
                if len(share):
                    b, t, d = self.source.batch_shape(share)
                    self._largest = max(self._largest, b * t * d)
        return self._largest


def attach_alignments(
    data: UtteranceSource | Sequence[Utterance],
    alignments: dict[str, np.ndarray],
    *,
    factor: int,
    model_subsample: int,
    source: str,
) -> UtteranceSource:
    """Give each utterance its frame targets at the model's output rate.

    Args:
        data: the set whose frame counts the alignments were checked against.
        alignments: labels per utterance, ``ceil(T / factor)`` of them (as
            :func:`asrkit.targets.check_alignments` returns them).
        factor: feature frames per alignment frame.
        model_subsample: feature frames per model output frame; a multiple of ``factor``
            (every ``model_subsample / factor``-th label is kept, as Kaldi subsamples).
        source: where the alignments came from (for messages).

    Returns:
        The utterances that have alignments (the checker reported the others).
    """
    if model_subsample % factor:
        raise ConfigError(
            f"{source}: alignments have one label per {factor} feature frames but "
            f"the model outputs one per {model_subsample}; use a model.subsample "
            f"that is a multiple of {factor}"
        )
    return as_source(data).with_alignments(alignments, step=model_subsample // factor)


def load_utterances(
    data_dir: str | Path,
    normalize: CmvnNormalizer,
    *,
    tokenizer: Tokenizer | None = None,
    input_dim: int | None = None,
) -> list[Utterance]:
    """Read a data dir's features into memory (and token targets when ``tokenizer`` is given).

    Raises:
        DataError: as :func:`open_data_dir`, and for a matrix that cannot be read.
    """
    return open_data_dir(
        data_dir,
        normalize,
        tokenizer=tokenizer,
        input_dim=input_dim,
        keep_text=(Path(data_dir) / "text").is_file(),
    ).read_all()
