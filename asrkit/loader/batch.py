"""Training data types: utterances, padded batches, CMVN, length bucketing.

Batches group utterances of similar length and are capped by padded frames, so a
batch of short utterances holds more of them than a batch of long ones. Where the
utterances come from (read on demand from the feature archives, or held in memory)
is :mod:`asrkit.loader.sources` and its kin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from asrkit.errors import ConfigError
from asrkit.features.cmvn import apply_transform, cmvn_stats, cmvn_transform


@dataclass
class Utterance:
    """One utterance ready for the model.

    Attributes:
        utt: utterance id.
        feats: ``(T, F)`` normalised float32 features.
        tokens: ``(L,)`` int64 model ids (empty when the set has no transcripts).
        text: the reference transcript (``""`` when absent).
        ali: ``(T',)`` int64 frame targets at the model's output frame rate (CE
            training), or None.
    """

    utt: str
    feats: np.ndarray
    tokens: np.ndarray
    text: str = ""
    ali: np.ndarray | None = None


@dataclass
class Batch:
    """A padded batch: ``feats (B, T, F)``, ``lengths (B,)``, concatenated
    ``targets (sum L,)`` with ``target_lengths (B,)``, the utterance ids, and for CE
    training ``frame_targets (B, T')`` padded with -1."""

    utts: list[str]
    feats: torch.Tensor
    lengths: torch.Tensor
    targets: torch.Tensor
    target_lengths: torch.Tensor
    #: What the summed loss is divided by: the utterance count, or for a learner's
    #: shard of a global batch, global size / learners (so averaged gradients equal
    #: those of the whole batch).
    norm: float = 0.0
    frame_targets: torch.Tensor | None = None
    #: Utterances in the planned batch across all learners that share it (this
    #: learner's ``utts`` are its share).
    global_utts: int = 0

    def __post_init__(self) -> None:
        if not self.norm:
            self.norm = float(len(self.utts))
        if not self.global_utts:
            self.global_utts = len(self.utts)

    @property
    def frames(self) -> int:
        return int(self.lengths.sum())

    def to(self, device: torch.device, *, non_blocking: bool = False) -> Batch:
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=non_blocking)

        return Batch(
            self.utts,
            move(self.feats),
            move(self.lengths),
            move(self.targets),
            move(self.target_lengths),
            self.norm,
            None if self.frame_targets is None else move(self.frame_targets),
            self.global_utts,
        )

    def pin_memory(self) -> Batch:
        """The batch in page-locked memory (so a CUDA copy can overlap computation)."""
        return Batch(
            self.utts,
            self.feats.pin_memory(),
            self.lengths.pin_memory(),
            self.targets.pin_memory(),
            self.target_lengths.pin_memory(),
            self.norm,
            None if self.frame_targets is None else self.frame_targets.pin_memory(),
            self.global_utts,
        )


class CmvnNormalizer:
    """Applies ``global`` (one stats matrix), ``speaker`` (a data dir's ``cmvn.scp``)
    or ``none`` normalisation to an utterance's features."""

    def __init__(self, mode: str, *, global_stats: np.ndarray | None = None, norm_vars: bool = True) -> None:
        if mode == "global" and global_stats is None:
            raise ConfigError("global CMVN needs the training set's cmvn_global.ark")
        self.mode, self.global_stats, self.norm_vars = mode, global_stats, norm_vars
        self._global = None if global_stats is None else cmvn_transform(global_stats, norm_vars=norm_vars)

    def global_transform(self) -> tuple[np.ndarray, np.ndarray]:
        """The ``(scale, offset)`` of ``global`` normalisation (``feats * scale + offset``)."""
        if self._global is None:
            raise ConfigError(f"features.cmvn={self.mode!r} has no global transform")
        return self._global

    def __call__(
        self, feats: np.ndarray, speaker_stats: np.ndarray | None = None, *, out: np.ndarray | None = None
    ) -> np.ndarray:
        """``feats`` ``(T, D)`` normalised, as float32 (written into ``out`` when given)."""
        if self.mode == "none":
            if out is None:
                return feats.astype(np.float32, copy=False)
            out[...] = feats
            return out
        if self.mode == "speaker":
            # Without per-speaker stats (a lone audio file) the utterance is its own speaker.
            stats = speaker_stats if speaker_stats is not None else cmvn_stats(feats)
            scale, offset = cmvn_transform(stats, norm_vars=self.norm_vars)
        else:
            assert self._global is not None
            scale, offset = self._global
        return apply_transform(feats, scale, offset, out=out)


def collate(utts: Sequence[Utterance]) -> Batch:
    """Pad ``utts`` into a :class:`Batch`.

    Built with numpy and handed to torch without a copy: it runs in the data loader's
    reading threads, where torch operators would compete with training for the cores
    (see :func:`asrkit.features.cmvn.apply_transform`).
    """
    lengths = np.array([u.feats.shape[0] for u in utts], dtype=np.int64)
    feats = np.zeros((len(utts), int(lengths.max()), utts[0].feats.shape[1]), dtype=np.float32)
    for i, u in enumerate(utts):
        feats[i, : u.feats.shape[0]] = u.feats
    return batch_around(
        [u.utt for u in utts],
        torch.from_numpy(feats),
        lengths,
        [u.tokens for u in utts],
        [u.ali for u in utts],
    )


def batch_around(
    utts: list[str],
    feats: torch.Tensor,
    lengths: np.ndarray,
    tokens: Sequence[np.ndarray] | None,
    alis: Sequence[np.ndarray | None] | None,
) -> Batch:
    """A :class:`Batch` around padded ``feats``: ids, lengths, concatenated token targets
    (none when ``tokens`` is None) and -1-padded frame targets (when every utterance has
    them). numpy only, then ``torch.from_numpy``: this may run in a reading thread."""
    if tokens is None:
        targets, target_lengths = np.zeros(0, dtype=np.int64), np.zeros(len(utts), np.int64)
    else:
        targets = np.concatenate(tokens).astype(np.int64)
        target_lengths = np.array([len(t) for t in tokens], dtype=np.int64)
    frame_targets = None
    labels = [a for a in alis if a is not None] if alis is not None else []
    if alis is not None and len(labels) == len(alis):
        padded = np.full((len(utts), max(a.size for a in labels)), -1, dtype=np.int64)
        for k, a in enumerate(labels):
            padded[k, : a.size] = a
        frame_targets = torch.from_numpy(padded)
    return Batch(
        utts,
        feats,
        torch.from_numpy(lengths.astype(np.int64)),
        torch.from_numpy(targets),
        torch.from_numpy(target_lengths),
        frame_targets=frame_targets,
    )


def plan_buckets(
    lengths: Sequence[int] | np.ndarray, *, max_frames: int, max_batch: int, min_batch: int = 1
) -> list[np.ndarray]:
    """Group indices into batches of similar length: the one batch planner (training,
    the strategies' sharding and decoding all cut their batches here).

    Indices are sorted by length (longest first) and cut greedily so that
    ``batch size x longest length <= max_frames`` and ``batch size <= max_batch``,
    but never below ``min_batch`` utterances (a global batch needs one per learner);
    an utterance longer than ``max_frames`` gets a batch of its own when ``min_batch`` is 1.
    The last batch may be short; with ``min_batch`` > 1 it is merged into the one before.
    Each batch is an index array (a corpus of millions of utterances is planned without a
    Python object per utterance).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")  # longest first, ties in index order
    ordered = lengths[order].tolist()
    cap = max(max_batch, min_batch)
    cuts: list[int] = []
    start = 0
    for pos in range(1, len(ordered)):
        size = pos - start
        full = (size + 1) * ordered[start] > max_frames or size >= cap
        if size >= min_batch and full:
            cuts.append(pos)
            start = pos
    if cuts and len(ordered) - start < min_batch:
        cuts.pop()  # the short last batch joins the one before
    return np.split(order, cuts) if len(ordered) else []


def chunk_batch(batch: Batch, width: int, *, context: int = 0, subsample: int = 1) -> Batch:
    """A frame-target batch cut into chunks of ``width`` input frames, each with up to
    ``context`` frames of its utterance on either side (Kaldi's BLSTM training: chunks
    with extra left and right context whose outputs are not scored).

    Chunk ``k`` of an utterance scores its frames ``[k * width, (k + 1) * width)``; the
    context frames' targets become -1 (ignored), so each frame is scored exactly once and
    the summed loss is over the same frames as the whole batch's. ``norm`` and
    ``global_utts`` are kept, so the gradient is normalised as the unchunked batch's.
    Chunks are padded to the longest, which is at most ``width + 2 * context``.

    Args:
        width / context: in input frames, multiples of ``subsample``.
        subsample: input frames per output frame (target) of the model.

    Raises:
        ConfigError: bad sizes, or a batch without frame targets (CTC cannot be chunked:
            a chunk's words are unknown).
    """
    if width <= 0 or context < 0 or width % subsample or context % subsample:
        raise ConfigError(
            f"chunks of {width} frames with {context} frames of context: need width > 0, "
            f"context >= 0, both multiples of the model's subsampling factor {subsample}"
        )
    if batch.frame_targets is None:
        raise ConfigError(
            "train.chunk_frames needs frame targets (objective=ce); CTC trains on whole utterances"
        )
    feats, targets = batch.feats.numpy(), batch.frame_targets.numpy()
    pieces: list[tuple[int, int, int, int, int]] = []  # utterance, first, last, first scored, last scored
    for b, n in enumerate(batch.lengths.tolist()):
        for start in range(0, n, width):
            stop = min(start + width, n)
            pieces.append((b, max(0, start - context), min(n, stop + context), start, stop))
    longest = max(last - first for _, first, last, _, _ in pieces)
    out_len = -(-longest // subsample)
    chunk_feats = np.zeros((len(pieces), longest, feats.shape[2]), dtype=feats.dtype)
    chunk_targets = np.full((len(pieces), out_len), -1, dtype=np.int64)
    lengths = np.zeros(len(pieces), dtype=np.int64)
    ids = []
    for k, (b, first, last, start, stop) in enumerate(pieces):
        chunk_feats[k, : last - first] = feats[b, first:last]
        lengths[k] = last - first
        lo, hi = (start - first) // subsample, -(-(stop - first) // subsample)
        src = start // subsample
        labels = targets[b, src : src + hi - lo]
        chunk_targets[k, lo : lo + labels.size] = labels
        ids.append(f"{batch.utts[b]}-{start}")
    return Batch(
        ids,
        torch.from_numpy(chunk_feats),
        torch.from_numpy(lengths),
        batch.targets,
        batch.target_lengths,
        batch.norm,
        torch.from_numpy(chunk_targets),
        batch.global_utts,
    )
