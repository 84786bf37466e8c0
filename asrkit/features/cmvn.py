"""Cepstral mean and variance normalisation with Kaldi-format statistics.

Stats are a ``(2, D+1)`` float64 matrix, exactly what Kaldi's
``compute-cmvn-stats`` writes: row 0 holds the feature sums and the frame
count in its last column, row 1 the sums of squares (last column 0). Kaldi's
``apply-cmvn`` can therefore use the stats asrkit writes, and the other way round.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from asrkit.data.kaldi_table import read_matrix
from asrkit.errors import DataError


def cmvn_stats(feats: np.ndarray) -> np.ndarray:
    """Accumulate Kaldi CMVN stats of ``feats`` ``(T, D)`` into a ``(2, D+1)`` matrix."""
    feats = feats.astype(np.float64, copy=False)
    stats = np.zeros((2, feats.shape[1] + 1), dtype=np.float64)
    stats[0, :-1] = feats.sum(axis=0)
    stats[1, :-1] = np.square(feats).sum(axis=0)
    stats[0, -1] = feats.shape[0]
    return stats


def cmvn_transform(stats: np.ndarray, *, norm_vars: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension float32 ``(scale, offset)`` with ``normalised = feats * scale + offset``,
    computed in float64 from Kaldi stats ``(2, D+1)`` as Kaldi's ``apply-cmvn`` does."""
    count = stats[0, -1]
    if count < 1:
        raise DataError("CMVN stats have a frame count below 1; recompute them")
    mean = stats[0, :-1] / count
    scale = np.ones_like(mean)
    if norm_vars:
        var = stats[1, :-1] / count - np.square(mean)
        # Same floor as Kaldi's apply-cmvn, so a constant dimension does not blow up.
        scale = 1.0 / np.sqrt(np.maximum(var, 1.0e-20))
    return scale.astype(np.float32), (-mean * scale).astype(np.float32)


def apply_cmvn(
    feats: np.ndarray, stats: np.ndarray, *, norm_vars: bool = True, out: np.ndarray | None = None
) -> np.ndarray:
    """Normalise ``feats`` ``(T, D)`` with Kaldi stats ``(2, D+1)``; returns float32.

    As Kaldi's ``apply-cmvn``: scale and offset computed in double, applied to float
    features (``feats * scale + offset``, each step rounded to float). ``out`` (float32,
    ``(T, D)``) receives the result.
    """
    scale, offset = cmvn_transform(stats, norm_vars=norm_vars)
    return apply_transform(feats, scale, offset, out=out)


def apply_transform(
    feats: np.ndarray, scale: np.ndarray, offset: np.ndarray, *, out: np.ndarray | None = None
) -> np.ndarray:
    """``feats * scale + offset`` in float32, as Kaldi computes it (into ``out`` when given).

    numpy, not torch: this runs in the data loader's reading threads, and a torch operator
    there starts a second OpenMP team that competes with the training step's for the cores
    (measured: demo training steps twice as slow on 2 cores).
    """
    if out is None:
        out = np.empty(feats.shape, dtype=np.float32)
    np.multiply(feats, scale, out=out, casting="unsafe")
    out += offset
    return out


def read_cmvn(rxfile: str | Path) -> np.ndarray:
    """Read one CMVN stats matrix as float64 ``(2, D+1)``.

    Args:
        rxfile: a file holding one matrix (``cmvn_global.ark``) or an entry of ``cmvn.scp``
            (``file.ark:offset``); any Kaldi matrix kind is accepted.
    """
    try:
        return read_matrix(rxfile).astype(np.float64, copy=False)
    except DataError as err:  # names rxfile and what is wrong with it
        raise DataError(f"{rxfile}: cannot read CMVN stats ({err}); recompute the features") from None
