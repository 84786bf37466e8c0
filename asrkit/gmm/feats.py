"""The GMM's features: MFCC with per-speaker mean normalisation and deltas.

Kaldi's GMM recipes train on ``apply-cmvn --utt2spk ... | add-deltas``: 13 MFCCs, the
speaker's mean subtracted (variances left alone, Kaldi's default), then first and second
order deltas: 39 dimensions. The neural network keeps its own features (fbank); these
are computed into a data dir of their own (``<exp>/gmm/data/<set>``) by
:func:`make_gmm_data_dir`.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from asrkit.data.datadir import read_data_dir, read_kaldi_map
from asrkit.data.kaldi_table import read_matrix
from asrkit.errors import DataError
from asrkit.features.cmvn import apply_cmvn, read_cmvn
from asrkit.features.compute import compute_features_for_dir
from asrkit.features.extractors import FeatureConfig

#: The data dir files that describe utterances (copied); features are made anew.
_TEXT_FILES = ("wav.scp", "text", "utt2spk", "spk2utt", "segments", "reco2file_and_channel")


def add_deltas(feats: np.ndarray, *, order: int = 2, window: int = 2) -> np.ndarray:
    """Kaldi's ``add-deltas``: append ``order`` orders of regression deltas.

    Each order is the previous one filtered by ``d[t] = sum_n n (x[t+n] - x[t-n]) /
    (2 sum_n n^2)``, ``n = 1..window``, with the first and last frames repeated at the edges.

    Args:
        feats: ``(T, D)`` features.

    Returns:
        ``(T, D * (order + 1))`` float32.
    """
    x = np.asarray(feats, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"add_deltas: expected a (T, D) matrix, got shape {x.shape}")
    norm = 2.0 * sum(n * n for n in range(1, window + 1))
    parts = [x]
    current = x
    for _ in range(order):
        padded = np.concatenate(
            [np.repeat(current[:1], window, 0), current, np.repeat(current[-1:], window, 0)]
        )
        frames = current.shape[0]
        delta = np.zeros_like(current)
        for n in range(1, window + 1):
            delta += n * (padded[window + n : window + n + frames] - padded[window - n : window - n + frames])
        current = delta / norm
        parts.append(current)
    return np.concatenate(parts, axis=1).astype(np.float32, copy=False)


def make_gmm_data_dir(
    source: str | Path, target: str | Path, feats_dir: str | Path, cfg: FeatureConfig
) -> None:
    """Copy the data dir ``source``'s utterance files to ``target`` and compute the GMM's
    MFCCs there (``feats.scp``, ``cmvn.scp`` per speaker, ``utt2num_frames``), as Kaldi's
    ``make_mfcc.sh`` + ``compute_cmvn_stats.sh`` do; arks go to ``feats_dir``."""
    source, target = Path(source), Path(target)
    if cfg.kind != "mfcc":
        cfg = replace(cfg, kind="mfcc")
    # The dir is updated in place, not removed first: the feature computation replaces
    # feats.scp only once the new archives are whole, so a failure (a full disk) leaves the
    # previous features listed and readable, as its message says.
    target.mkdir(parents=True, exist_ok=True)
    for name in _TEXT_FILES:
        if (source / name).exists():
            shutil.copyfile(source / name, target / name)
        else:
            (target / name).unlink(missing_ok=True)
    # The GMM's MFCCs live in the experiment dir (exp_dir/gmm/mfcc), not under feats_root.
    compute_features_for_dir(target, feats_dir, cfg, where_set="exp_dir to a disk with room")


def gmm_mfcc(features: FeatureConfig, *, nj: int = 1) -> FeatureConfig:
    """The GMM systems' MFCC settings: 23 mel bins, 13 cepstra, the network's framing
    (so both feature streams have the same frames) and the rest of ``features``."""
    return replace(features, kind="mfcc", num_mel_bins=23, num_ceps=13, nj=nj)


class GmmFeatures:
    """A data dir's GMM features, utterance by utterance: MFCC, the speaker's mean
    subtracted, deltas added.

    Args:
        data_dir: a data dir with ``feats.scp``, ``cmvn.scp`` (per speaker) and ``utt2spk``
            (see :func:`make_gmm_data_dir`).
        delta_order: 2 for Kaldi's ``train_deltas.sh`` features (0: none).

    Each read opens the utterance's archive (training reads every utterance some 40 times
    a system); :meth:`in_memory` keeps the MFCCs in memory instead.
    """

    def __init__(self, data_dir: str | Path, *, delta_order: int = 2) -> None:
        self.data_dir = Path(data_dir)
        self._mfcc: dict[str, np.ndarray] | None = None
        self.data = read_data_dir(self.data_dir, require_text=False)
        self.scp = read_kaldi_map(self.data_dir / "feats.scp")
        cmvn = read_kaldi_map(self.data_dir / "cmvn.scp")
        self.delta_order = delta_order
        self._cmvn = {spk: read_cmvn(entry) for spk, entry in cmvn.items()}
        missing = [u for u in self.data.utt_ids if u not in self.scp]
        if missing:
            raise DataError(
                f"{self.data_dir}/feats.scp: no features for {len(missing)} utterance(s) (first: "
                f"{missing[0]}); rerun the GMM stage"
            )

    @property
    def utt_ids(self) -> list[str]:
        return self.data.utt_ids

    def in_memory(self) -> GmmFeatures:
        """Read every utterance's MFCCs now and keep them (13 floats a frame: 50 MB for 3
        hours of speech); later reads, in this process or in workers forked from it, take
        them from memory. Returns ``self``."""
        if self._mfcc is None:
            self._mfcc = {}
            for utt in self.utt_ids:
                mfcc = self._read(utt)
                mfcc.setflags(write=False)  # shared by every later read
                self._mfcc[utt] = mfcc
        return self

    def with_delta_order(self, delta_order: int) -> GmmFeatures:
        """The same features with ``delta_order`` deltas (the MFCCs kept in memory shared)."""
        view = copy.copy(self)
        view.delta_order = delta_order
        return view

    def _read(self, utt: str) -> np.ndarray:
        return read_matrix(self.scp[utt])

    def __call__(self, utt: str) -> np.ndarray:
        """``(T, 13 * (delta_order + 1))`` float32 features of ``utt``."""
        spk = self.data.utt2spk[utt]
        if spk not in self._cmvn:
            raise DataError(f"{self.data_dir}/cmvn.scp: no stats for speaker {spk} (utterance {utt})")
        mfcc = self._mfcc.get(utt) if self._mfcc is not None else None
        feats = apply_cmvn(self._read(utt) if mfcc is None else mfcc, self._cmvn[spk], norm_vars=False)
        return add_deltas(feats, order=self.delta_order) if self.delta_order else feats

    def __iter__(self) -> Iterator[tuple[str, np.ndarray]]:
        for utt in self.utt_ids:
            yield utt, self(utt)
