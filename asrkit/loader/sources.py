"""Utterance sources: a set of utterances as frame counts (all that batch planning needs)
and a way to read utterances by index.

- :class:`UtteranceSource` / :class:`UtteranceReader`: the interface every set offers (a
  reader per thread or process, since it may hold open files).
- :class:`InMemorySource`: utterances already read (a small set, a test, audio decoded
  on the fly).
- :func:`attach_alignments`: a set's utterances with their frame targets.

A data dir streamed from its feature archives is :class:`~asrkit.loader.archive.StreamingSource`.
"""

from __future__ import annotations

import dataclasses
import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch

from asrkit.errors import ConfigError
from asrkit.loader.batch import Batch, Utterance, batch_around

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
