"""i-vectors: a speaker's deviation from a universal background model (UBM) in a
low-dimensional total-variability subspace (Dehak et al. 2011), as Kaldi's nnet recipes
append them to the network's input.

A diagonal-covariance UBM of ``C`` Gaussians models every speaker's frames; a speaker's
zeroth and first order statistics around it, ``N_c`` and ``F_c = sum_t g_tc (x_t - m_c)``,
are explained by ``F_c ~ N_c T_c w`` with ``w ~ N(0, I)``, a ``(D, R)`` block ``T_c`` per
Gaussian. The i-vector is the posterior mean of ``w``:

    L = I + sum_c N_c T_c' S_c^-1 T_c,    w = L^-1 sum_c T_c' S_c^-1 F_c.

``T`` is trained by EM over the training units' statistics (each unit's posterior of
``w`` given ``T``, then ``T_c`` from the accumulated moments), the UBM's variances fixed.
Kaldi's ``ivector-extractor.cc`` and ``train_ivector_extractor.sh`` describe the same model
with full-covariance UBMs and a prior offset; this one keeps the UBM diagonal (the features
are LDA+MLLT features, decorrelated by construction).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asrkit.data.io import atomic_writer
from asrkit.errors import DataError

__all__ = ["IvectorExtractor", "Ubm", "train_extractor", "train_ubm", "unit_stats"]

log = logging.getLogger(__name__)

_LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass
class Ubm:
    """A diagonal-covariance GMM: ``weights`` ``(C,)``, ``means`` and ``variances`` ``(C, D)``."""

    weights: np.ndarray
    means: np.ndarray
    variances: np.ndarray

    def log_likelihoods(self, feats: np.ndarray) -> np.ndarray:
        """``(T, C)`` log of each Gaussian's weighted density at each frame."""
        x = np.asarray(feats, dtype=np.float64)
        inv = 1.0 / self.variances
        const = (
            np.log(self.weights)
            - 0.5 * (self.means.shape[1] * _LOG_2PI + np.log(self.variances).sum(axis=1))
            - 0.5 * (self.means**2 * inv).sum(axis=1)
        )
        return const + x @ (self.means * inv).T - 0.5 * (x**2) @ inv.T

    def posteriors(self, feats: np.ndarray) -> tuple[np.ndarray, float]:
        """``(T, C)`` Gaussian posteriors of each frame and the frames' total log-likelihood."""
        ll = self.log_likelihoods(feats)
        top = ll.max(axis=1, keepdims=True)
        dens = np.exp(ll - top)
        total = dens.sum(axis=1, keepdims=True)
        return dens / total, float((np.log(total) + top).sum())


def train_ubm(
    frames: np.ndarray, num_gauss: int, *, iterations: int = 20, seed: int = 0, var_floor: float = 1e-3
) -> tuple[Ubm, list[float]]:
    """A diagonal UBM of ``num_gauss`` Gaussians on ``frames`` ``(T, D)`` by EM, grown as
    Kaldi's ``gmm-global-init-from-feats`` grows one: from a single Gaussian, the heaviest
    ones split (means moved 0.2 standard deviations apart) after each of the first half of
    the iterations until there are ``num_gauss``; variances floored at ``var_floor`` of the
    global ones. Returns the UBM and the average log-likelihood per frame of each iteration
    (it falls when Gaussians split and rises between splits)."""
    x = np.asarray(frames, dtype=np.float64)
    if len(x) < 10 * num_gauss:
        raise DataError(
            f"{len(x)} frames for a UBM of {num_gauss} Gaussians: give at least {10 * num_gauss} "
            "(fewer Gaussians, align.ivector_gauss, or more training speech)"
        )
    rng = np.random.default_rng(seed)
    global_var = x.var(axis=0)
    ubm = Ubm(np.ones(1), x.mean(axis=0, keepdims=True), global_var[None].copy())
    growing = max(1, iterations // 2)
    history = []
    for it in range(iterations):
        ubm, ll = _em_step(ubm, x, var_floor * global_var)
        history.append(ll)
        if it < growing and len(ubm.weights) < num_gauss:
            target = (
                num_gauss
                if it == growing - 1
                else max(len(ubm.weights) + 1, round(num_gauss ** ((it + 1) / growing)))
            )
            ubm = _split(ubm, min(target, num_gauss), rng)
    while len(ubm.weights) < num_gauss:  # too few iterations to grow within
        ubm = _split(ubm, num_gauss, rng)
        ubm, ll = _em_step(ubm, x, var_floor * global_var)
        history.append(ll)
    return ubm, history


def _em_step(ubm: Ubm, x: np.ndarray, floor: np.ndarray) -> tuple[Ubm, float]:
    count = len(ubm.weights)
    occ = np.zeros(count)
    first = np.zeros_like(ubm.means)
    second = np.zeros_like(ubm.means)
    total = 0.0
    for start in range(0, len(x), 50_000):
        chunk = x[start : start + 50_000]
        post, ll = ubm.posteriors(chunk)
        total += ll
        occ += post.sum(axis=0)
        first += post.T @ chunk
        second += post.T @ chunk**2
    keep = occ > 1e-3 * len(x) / count
    safe = np.maximum(occ, 1e-10)[:, None]
    means = np.where(keep[:, None], first / safe, ubm.means)
    variances = np.where(keep[:, None], second / safe - means**2, ubm.variances)
    return Ubm(
        np.maximum(occ, 1e-10) / max(occ.sum(), 1e-10), means, np.maximum(variances, floor)
    ), total / len(x)


def _split(ubm: Ubm, count: int, rng: np.random.Generator) -> Ubm:
    weights, means, variances = ubm.weights.copy(), ubm.means.copy(), ubm.variances.copy()
    while len(weights) < count:
        k = int(np.argmax(weights))
        step = 0.2 * np.sqrt(variances[k]) * rng.choice([-1.0, 1.0], size=means.shape[1])
        weights[k] /= 2
        means = np.vstack([means, means[k] + step])
        means[k] -= step
        weights = np.append(weights, weights[k])
        variances = np.vstack([variances, variances[k]])
    return Ubm(weights, means, variances)


@dataclass
class IvectorExtractor:
    """A UBM and its total-variability matrix ``t`` ``(C, D, R)`` in the UBM's whitened
    space (each Gaussian's standard deviations divided out), and the training speakers'
    i-vector mean and standard deviation (:meth:`extract` returns i-vectors standardised
    by them)."""

    ubm: Ubm
    t: np.ndarray
    mean: np.ndarray
    scale: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.t.shape[2])

    def stats(self, frames: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """A unit's (``N`` ``(C,)``, whitened centred ``F`` ``(C, D)``) over its ``frames``."""
        return unit_stats(self.ubm, frames)

    def posterior_means(self, occupancy: np.ndarray, first: np.ndarray) -> np.ndarray:
        """Units' raw i-vectors ``(S, R)`` from their stacked statistics."""
        return _e_step(self.t, occupancy, first)[0]

    def extract(self, frames: Iterable[np.ndarray]) -> np.ndarray:
        """One unit's (a speaker's) standardised i-vector ``(R,)``."""
        n, f = self.stats(frames)
        raw = self.posterior_means(n[None], f[None])[0]
        return ((raw - self.mean) / self.scale).astype(np.float32)

    def save(self, path: Path) -> None:
        with atomic_writer(Path(path), "wb") as out:
            np.savez(
                out,
                weights=self.ubm.weights,
                means=self.ubm.means,
                variances=self.ubm.variances,
                t=self.t,
                mean=self.mean,
                scale=self.scale,
            )

    @classmethod
    def load(cls, path: Path) -> IvectorExtractor:
        try:
            with np.load(Path(path)) as z:
                return cls(Ubm(z["weights"], z["means"], z["variances"]), z["t"], z["mean"], z["scale"])
        except (OSError, KeyError, ValueError) as e:
            raise DataError(f"{path}: not an i-vector extractor ({e}); run the training stage again") from e


def unit_stats(ubm: Ubm, frames: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A unit's (``N`` ``(C,)``, ``F`` ``(C, D)`` centred on the UBM's means and divided by
    its standard deviations) over its ``frames``."""
    occ = np.zeros(len(ubm.weights))
    first = np.zeros_like(ubm.means)
    for chunk in frames:
        x = np.asarray(chunk, dtype=np.float64)
        if not len(x):
            continue
        post, _ = ubm.posteriors(x)
        occ += post.sum(axis=0)
        first += post.T @ x
    centred = first - occ[:, None] * ubm.means
    return occ, centred / np.sqrt(ubm.variances)


def _e_step(t: np.ndarray, occupancy: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Each unit's posterior mean ``(S, R)`` and covariance ``(S, R, R)`` of ``w``, and the
    part of the units' log-likelihood that depends on ``t``."""
    c, _, r = t.shape
    gram = np.matmul(t.transpose(0, 2, 1), t).reshape(c, r * r)  # T_c' T_c per Gaussian
    precision = np.eye(r)[None] + (occupancy @ gram).reshape(-1, r, r)
    linear = first.reshape(len(first), -1) @ t.reshape(-1, r)
    chol = np.linalg.cholesky(precision)
    means = np.linalg.solve(precision, linear[..., None])[..., 0]
    covs = np.linalg.inv(precision)
    objective = float(
        0.5 * np.einsum("sr,sr->", linear, means) - np.log(np.diagonal(chol, axis1=1, axis2=2)).sum()
    )
    return means, covs, objective


def train_extractor(
    ubm: Ubm,
    units: list[tuple[np.ndarray, np.ndarray]],
    dim: int,
    *,
    iterations: int = 10,
    seed: int = 0,
) -> tuple[IvectorExtractor, list[float]]:
    """``T`` of rank ``dim`` by EM over ``units`` (each a (``N``, whitened ``F``) pair of
    :meth:`IvectorExtractor.stats`: utterances or speakers). Returns the extractor (its
    standardisation from the units' i-vectors) and the log-likelihood term that EM raises,
    per unit, before each iteration's update and after the last."""
    if len(units) <= dim:
        raise DataError(
            f"{len(units)} training units for {dim}-dim i-vectors: give more units than dimensions "
            "(a smaller align.ivector_dim)"
        )
    occupancy = np.stack([n for n, _ in units])
    first = np.stack([f for _, f in units])
    c, d = ubm.means.shape
    rng = np.random.default_rng(seed)
    t = rng.normal(scale=0.1, size=(c, d, dim))
    history = []
    for _ in range(iterations):
        means, covs, objective = _e_step(t, occupancy, first)
        history.append(objective / len(units))
        moments = covs + np.einsum("sr,sq->srq", means, means)  # E[w w'] per unit
        second = (occupancy.T @ moments.reshape(len(units), -1)).reshape(c, dim, dim)
        cross = (first.reshape(len(units), -1).T @ means).reshape(c, d, dim)
        t = np.linalg.solve(second, cross.transpose(0, 2, 1)).transpose(0, 2, 1)
    means, _, objective = _e_step(t, occupancy, first)
    history.append(objective / len(units))
    extractor = IvectorExtractor(ubm, t, means.mean(axis=0), np.maximum(means.std(axis=0), 1e-6))
    return extractor, history
