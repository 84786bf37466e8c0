"""Training data: normalised features and token targets, bucketed into batches.

Features are read once from ``feats.scp`` into memory (AN4's whole training set
is ~80 MB of float32 at 80 dims) and normalised with Kaldi CMVN stats. Batches
group utterances of similar length and are capped by padded frames, so a batch
of short utterances holds more of them than a batch of long ones.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from asrkit.data.datadir import read_data_dir, read_kaldi_map
from asrkit.data.kaldi_table import read_matrix
from asrkit.errors import ConfigError, DataError
from asrkit.features.cmvn import apply_cmvn, cmvn_stats, read_cmvn
from asrkit.targets.tokenizer import Tokenizer


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

    def __post_init__(self) -> None:
        if not self.norm:
            self.norm = float(len(self.utts))

    @property
    def frames(self) -> int:
        return int(self.lengths.sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(self.utts, self.feats.to(device), self.lengths.to(device),
                     self.targets.to(device), self.target_lengths.to(device), self.norm,
                     None if self.frame_targets is None else self.frame_targets.to(device))


class CmvnNormalizer:
    """Applies ``global`` (one stats matrix), ``speaker`` (a data dir's ``cmvn.scp``)
    or ``none`` normalisation to an utterance's features."""

    def __init__(self, mode: str, *, global_stats: np.ndarray | None = None,
                 norm_vars: bool = True) -> None:
        if mode not in ("global", "speaker", "none"):
            raise ConfigError(f"features.cmvn={mode!r} is unknown; choose global, speaker or none")
        if mode == "global" and global_stats is None:
            raise ConfigError("global CMVN needs the training set's cmvn_global.ark")
        self.mode, self.global_stats, self.norm_vars = mode, global_stats, norm_vars

    def __call__(self, feats: np.ndarray, speaker_stats: np.ndarray | None = None) -> np.ndarray:
        if self.mode == "none":
            return feats.astype(np.float32, copy=False)
        if self.mode == "speaker":
            # Without per-speaker stats (a lone audio file) the utterance is its own speaker.
            stats = speaker_stats if speaker_stats is not None else cmvn_stats(feats)
        else:
            stats = self.global_stats
        return apply_cmvn(feats, stats, norm_vars=self.norm_vars)


def load_utterances(data_dir: str | Path, normalize: CmvnNormalizer, *,
                    tokenizer: Tokenizer | None = None, input_dim: int | None = None) -> list[Utterance]:
    """Read a data dir's features (and token targets when ``tokenizer`` is given).

    Raises:
        DataError: no ``feats.scp``, unreadable arks, wrong feature dimension, or a
            transcript that encodes to no tokens; names the file and utterance.
    """
    data_dir = Path(data_dir)
    data = read_data_dir(data_dir, require_text=tokenizer is not None)
    scp = data_dir / "feats.scp"
    if not scp.is_file():
        raise DataError(f"{scp}: not found; run the feature stage (stage 2) for {data_dir}")
    speaker_stats: dict[str, np.ndarray] = {}
    if normalize.mode == "speaker":
        cmvn_scp = data_dir / "cmvn.scp"
        if not cmvn_scp.is_file():
            raise DataError(f"{cmvn_scp}: not found; features.cmvn=speaker needs the per-speaker "
                            f"stats that the feature stage (stage 2) writes for {data_dir}")
        speaker_stats = {spk: read_cmvn(rx) for spk, rx in read_kaldi_map(cmvn_scp).items()}
    feats_map = read_kaldi_map(scp)
    utts: list[Utterance] = []
    for utt, rxfile in feats_map.items():
        try:
            mat = read_matrix(rxfile)
        except DataError as err:  # names rxfile and what is wrong with it
            raise DataError(f"{scp}: utterance '{utt}': cannot read features ({err}); rerun the "
                            "feature stage") from None
        if input_dim is not None and mat.shape[1] != input_dim:
            raise DataError(f"{scp}: utterance '{utt}' has {mat.shape[1]}-dim features but the "
                            f"model expects {input_dim}; they were computed with other settings "
                            f"({data_dir / 'feats.yaml'}) — recompute them (stage 2) with the "
                            "model's feature settings")
        spk = data.utt2spk[utt]
        if normalize.mode == "speaker" and spk not in speaker_stats:
            raise DataError(f"{data_dir}/cmvn.scp: no stats for speaker '{spk}' (utterance "
                            f"'{utt}'); rerun the feature stage")
        feats = normalize(mat, speaker_stats.get(spk))
        text = data.text.get(utt, "") if data.text is not None else ""
        tokens = np.asarray(tokenizer.encode(text) if tokenizer is not None else [], dtype=np.int64)
        if tokenizer is not None and tokens.size == 0:
            raise DataError(f"{data_dir}/text: utterance '{utt}' encodes to no tokens; check "
                            "its transcript")
        utts.append(Utterance(utt, feats, tokens, text))
    return utts


def collate(utts: Sequence[Utterance]) -> Batch:
    """Pad ``utts`` into a :class:`Batch`."""
    lengths = torch.tensor([u.feats.shape[0] for u in utts], dtype=torch.long)
    feats = torch.zeros(len(utts), int(lengths.max()), utts[0].feats.shape[1])
    for i, u in enumerate(utts):
        feats[i, : u.feats.shape[0]] = torch.from_numpy(u.feats)
    targets = torch.from_numpy(np.concatenate([u.tokens for u in utts]))
    target_lengths = torch.tensor([u.tokens.size for u in utts], dtype=torch.long)
    frame_targets = None
    if all(u.ali is not None for u in utts):
        frame_targets = torch.full((len(utts), max(u.ali.size for u in utts)), -1, dtype=torch.long)
        for i, u in enumerate(utts):
            frame_targets[i, : u.ali.size] = torch.from_numpy(u.ali)
    return Batch([u.utt for u in utts], feats, lengths, targets, target_lengths,
                 frame_targets=frame_targets)


def make_buckets(lengths: Sequence[int], *, max_frames: int, max_batch: int,
                 min_batch: int = 1) -> list[list[int]]:
    """Group indices into batches of similar length.

    Indices are sorted by length (longest first) and cut greedily so that
    ``batch size x longest length <= max_frames`` and ``batch size <= max_batch``,
    but never below ``min_batch`` utterances (a global batch needs one per learner);
    an utterance longer than ``max_frames`` gets a batch of its own when ``min_batch`` is 1.
    The last batch may be short; with ``min_batch`` > 1 it is merged into the one before.
    """
    if max_frames < 1 or max_batch < 1:
        raise ConfigError(f"train.max_frames={max_frames} and train.max_batch={max_batch} must "
                          "be positive")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        full = (len(current) + 1) * longest > max_frames or len(current) >= max(max_batch, min_batch)
        if current and len(current) >= min_batch and full:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        if len(current) < min_batch and batches:
            batches[-1].extend(current)
        else:
            batches.append(current)
    return batches


class BucketBatches:
    """Epoch-by-epoch batches: fixed buckets, order reshuffled per epoch from ``seed``.

    With ``world > 1`` the buckets are *global* batches (at least ``world``
    utterances each) and this learner gets utterances ``rank::world`` of each, so
    ``world`` learners together take the same steps as one process would; every
    learner sees the same number of batches in the same order.

    Args:
        utts: the training utterances (the same list on every learner).
        max_frames, max_batch: see :func:`make_buckets` (global, across learners).
        shuffle: reshuffle the batch order every epoch.
        seed: base seed; epoch ``e`` uses ``seed + e``.
        rank, world: this learner's shard.
    """

    def __init__(self, utts: Sequence[Utterance], *, max_frames: int, max_batch: int,
                 shuffle: bool = True, seed: int = 1, rank: int = 0, world: int = 1) -> None:
        self.utts = list(utts)
        self.buckets = make_buckets([u.feats.shape[0] for u in self.utts], max_frames=max_frames,
                                    max_batch=max_batch, min_batch=world)
        self.shuffle, self.seed, self.rank, self.world = shuffle, seed, rank, world

    def __len__(self) -> int:
        return len(self.buckets)

    def epoch(self, epoch: int, *, start: int = 0) -> Iterator[Batch]:
        """Epoch ``epoch``'s batches from its ``start``-th on (a resumed run skips the rest)."""
        order = list(range(len(self.buckets)))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        for b in order[start:]:
            yield self._collate(self.buckets[b])

    def _collate(self, bucket: list[int]) -> Batch:
        batch = collate([self.utts[i] for i in bucket[self.rank::self.world]])
        batch.norm = len(bucket) / self.world
        return batch


def attach_alignments(utts: list[Utterance], alignments: dict[str, np.ndarray], *, factor: int,
                      model_subsample: int, source: str) -> list[Utterance]:
    """Give each utterance its frame targets at the model's output rate.

    Args:
        utts: utterances whose features the alignments were checked against.
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
        raise ConfigError(f"{source}: alignments have one label per {factor} feature frames but "
                          f"the model outputs one per {model_subsample}; use a model.subsample "
                          f"that is a multiple of {factor}")
    step = model_subsample // factor
    kept = []
    for u in utts:
        labels = alignments.get(u.utt)
        if labels is not None:
            u.ali = np.ascontiguousarray(labels[::step], dtype=np.int64)
            kept.append(u)
    return kept
