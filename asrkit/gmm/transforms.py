"""Feature transforms of the speaker-adapted GMM systems, as dense linear algebra on
statistics: LDA, MLLT (a semi-tied covariance) and fMLLR (constrained MLLR, one affine
transform per speaker).

- :class:`LdaStats` / :func:`estimate_lda`: the ``k x D`` matrix that maximises between-class
  over within-class scatter of spliced frames labelled by tied state (Kaldi's
  ``acc-lda`` + ``est-lda``); the projected within-class covariance is the identity.
- :class:`MlltStats` / :func:`estimate_mllt`: a square ``A`` that makes diagonal
  covariances fit better (Gales' semi-tied covariances): it maximises
  ``Q(A) = beta log|det A| - 1/2 sum_i a_i G_i a_i'``, row by row, each row's update
  exact given the others, so ``Q`` never falls.
- :class:`FmllrStats` / :func:`estimate_fmllr`: ``W = [A b]`` (``D x (D + 1)``) for one
  speaker, maximising ``beta log|det A| + sum_i (w_i k_i' - 1/2 w_i G_i w_i')`` row by row.
- :func:`write_matrix` / :func:`read_matrix`: Kaldi's binary matrix files (``final.mat``,
  ``trans.*`` entries), byte for byte as Kaldi writes them.

Statistics are float64; shapes are given as ``(frames, dims)``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from asrkit.data.io import atomic_writer
from asrkit.data.kaldi_binary import BINARY_MARKER, BinaryReader, pack_float_matrix
from asrkit.errors import DataError

__all__ = [
    "FmllrStats",
    "GaussianMoments",
    "LdaStats",
    "MlltStats",
    "apply_affine",
    "compose",
    "estimate_fmllr",
    "estimate_lda",
    "estimate_mllt",
    "fmllr_objective",
    "mllt_objective",
    "read_matrix",
    "splice",
    "write_matrix",
]


def splice(feats: np.ndarray, context: int = 3) -> np.ndarray:
    """Each frame of ``feats`` ``(T, D)`` with its ``context`` neighbours either side,
    ``(T, (2 context + 1) D)``; the first and last frames repeat at the edges (Kaldi's
    ``splice-feats --left-context --right-context``)."""
    frames = feats.shape[0]
    index = np.clip(np.arange(frames)[:, None] + np.arange(-context, context + 1)[None, :], 0, frames - 1)
    return feats[index].reshape(frames, -1)


def apply_affine(transform: np.ndarray, feats: np.ndarray, *, where: str = "") -> np.ndarray:
    """``feats`` ``(T, D)`` through ``transform``: ``(k, D)`` linear, or ``(k, D + 1)`` with
    the offset in the last column (Kaldi's ``transform-feats``). ``where`` names the
    features and the transform in the error."""
    dims = feats.shape[1]
    if transform.shape[1] == dims:
        return feats @ transform.T
    if transform.shape[1] == dims + 1:
        return feats @ transform[:, :dims].T + transform[:, dims]
    raise DataError(
        f"{where + ': ' if where else ''}a {transform.shape[0]}x{transform.shape[1]} transform cannot "
        f"apply to {dims}-dim features; the transform comes from a system trained on other features "
        "(check gmm.splice_context and the features of the data dir against the system's)"
    )


# ---------------------------------------------------------------- LDA


@dataclass
class LdaStats:
    """Per-class zeroth and first order statistics and the total second order ones."""

    dim: int
    classes: int
    counts: np.ndarray = field(init=False)
    sums: np.ndarray = field(init=False)
    scatter: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.counts = np.zeros(self.classes)
        self.sums = np.zeros((self.classes, self.dim))
        self.scatter = np.zeros((self.dim, self.dim))

    def add(self, feats: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Frames ``(T, D)`` of classes ``labels`` ``(T,)``, each weighted (default 1; a
        silence frame weighted 0 adds nothing)."""
        w = np.ones(len(labels)) if weights is None else np.asarray(weights, dtype=np.float64)
        x = np.asarray(feats, dtype=np.float64)
        np.add.at(self.counts, labels, w)
        np.add.at(self.sums, labels, x * w[:, None])
        self.scatter += (x * w[:, None]).T @ x


def estimate_lda(stats: LdaStats, dim: int, *, floor: float = 1e-6) -> np.ndarray:
    """The ``(dim, D)`` LDA matrix: the directions of largest between-class over within-class
    variance, scaled so that the projected within-class covariance is the identity (the
    generalised eigenproblem ``B v = lambda W v`` through W's Cholesky factor).

    Raises:
        DataError: no frames, ``dim`` larger than the features, or a singular within-class
            covariance (too few frames for the dimension).
    """
    total = stats.counts.sum()
    if total <= 0:
        raise DataError("LDA: no frames with a non-zero weight; nothing to estimate from")
    if not 0 < dim <= stats.dim:
        raise DataError(f"LDA: cannot keep {dim} of {stats.dim} dimensions")
    mean = stats.sums.sum(axis=0) / total
    present = stats.counts > 0
    class_means = stats.sums[present] / stats.counts[present, None]
    centred = class_means - mean
    between = (centred * stats.counts[present, None]).T @ centred / total
    covariance = stats.scatter / total - np.outer(mean, mean)
    within = covariance - between
    within = (within + within.T) / 2 + floor * np.trace(within) / stats.dim * np.eye(stats.dim)
    try:
        lower = np.linalg.cholesky(within)
    except np.linalg.LinAlgError:
        raise DataError(
            f"LDA: the within-class covariance of {total:.0f} frames in {stats.dim} dimensions is "
            "singular; align more data or splice fewer frames"
        ) from None
    inverse = np.linalg.inv(lower)
    whitened = inverse @ between @ inverse.T
    values, vectors = np.linalg.eigh((whitened + whitened.T) / 2)
    order = np.argsort(values)[::-1][:dim]
    return vectors[:, order].T @ inverse


# ---------------------------------------------------------------- per-Gaussian moments


@dataclass
class GaussianMoments:
    """Frames' statistics per Gaussian, weighted by their posteriors: occupancy ``n``
    ``(M,)``, first order ``s`` ``(M, D)`` and second order ``ss`` ``(M, D, D)``. MLLT's
    and fMLLR's statistics are linear in them, so a system's frames are summed per
    Gaussian first (cheap) and turned into those statistics once."""

    n: np.ndarray
    s: np.ndarray
    ss: np.ndarray

    @classmethod
    def zeros(cls, gaussians: int, dim: int) -> GaussianMoments:
        return cls(np.zeros(gaussians), np.zeros((gaussians, dim)), np.zeros((gaussians, dim, dim)))

    @classmethod
    def of(cls, feats: np.ndarray, posteriors: np.ndarray) -> GaussianMoments:
        """The moments of frames ``(T, D)`` with posteriors ``(T, M)``."""
        out = cls.zeros(posteriors.shape[1], feats.shape[1])
        out.add(np.arange(posteriors.shape[1]), feats, posteriors)
        return out

    def add(self, gaussians: np.ndarray, feats: np.ndarray, posteriors: np.ndarray) -> None:
        """Frames ``(T, D)`` with posteriors ``(T, k)`` over the Gaussians numbered
        ``gaussians`` ``(k,)``."""
        x = np.asarray(feats, dtype=np.float64)
        post = np.asarray(posteriors, dtype=np.float64)
        self.n[gaussians] += post.sum(axis=0)
        self.s[gaussians] += post.T @ x
        for j, g in enumerate(gaussians):
            self.ss[g] += (x * post[:, j : j + 1]).T @ x


# ---------------------------------------------------------------- MLLT


@dataclass
class MlltStats:
    """Gales' semi-tied statistics: ``beta`` frames and, per dimension ``i``,
    ``G_i = sum_t sum_m gamma_tm (x_t - mu_m)(x_t - mu_m)' / var_mi``."""

    dim: int
    beta: float = 0.0
    g: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.g = np.zeros((self.dim, self.dim, self.dim))

    def add(
        self, feats: np.ndarray, means: np.ndarray, variances: np.ndarray, posteriors: np.ndarray
    ) -> None:
        """Frames ``(T, D)`` with their posteriors ``(T, M)`` over diagonal Gaussians of
        ``means`` and ``variances`` ``(M, D)``."""
        self.add_moments(GaussianMoments.of(feats, posteriors), means, variances)

    def add_moments(self, moments: GaussianMoments, means: np.ndarray, variances: np.ndarray) -> None:
        """Per-Gaussian moments (:class:`GaussianMoments`) of the frames around ``means``."""
        used = moments.n > 0
        n, s, mu = moments.n[used], moments.s[used], np.asarray(means, dtype=np.float64)[used]
        # sum_t gamma (x - mu)(x - mu)' = S - mu s' - s mu' + n mu mu'
        cross = mu[:, :, None] * s[:, None, :]
        centred = (
            moments.ss[used]
            - cross
            - cross.transpose(0, 2, 1)
            + n[:, None, None] * (mu[:, :, None] * mu[:, None, :])
        )
        self.g += np.einsum("mi,mjk->ijk", 1.0 / np.asarray(variances, dtype=np.float64)[used], centred)
        self.beta += float(n.sum())


def _cofactor_row(a: np.ndarray, i: int) -> np.ndarray:
    """Row ``i`` of ``A``'s cofactor matrix (``det(A) inv(A)'``)."""
    return np.linalg.det(a) * np.linalg.inv(a)[:, i]


def mllt_objective(a: np.ndarray, stats: MlltStats) -> float:
    """``beta log|det A| - 1/2 sum_i a_i G_i a_i'`` (the auxiliary function, per the stats)."""
    quad = sum(float(a[i] @ stats.g[i] @ a[i]) for i in range(stats.dim))
    return float(stats.beta * np.log(abs(np.linalg.det(a))) - 0.5 * quad)


def estimate_mllt(
    stats: MlltStats, *, start: np.ndarray | None = None, iterations: int = 10
) -> tuple[np.ndarray, list[float]]:
    """The MLLT matrix maximising :func:`mllt_objective` from ``start`` (the identity): each
    row in turn set to its exact maximum given the others. Returns the matrix and the
    objective after each iteration (never falling).

    Raises:
        DataError: no frames.
    """
    if stats.beta <= 0:
        raise DataError("MLLT: no frames; nothing to estimate from")
    a = np.eye(stats.dim) if start is None else np.array(start, dtype=np.float64)
    inverses = [np.linalg.inv(stats.g[i]) for i in range(stats.dim)]
    history = []
    for _ in range(iterations):
        for i in range(stats.dim):
            c = _cofactor_row(a, i)
            gc = inverses[i] @ c
            a[i] = gc * np.sqrt(stats.beta / float(c @ gc))
        history.append(mllt_objective(a, stats))
    return a, history


# ---------------------------------------------------------------- fMLLR


@dataclass
class FmllrStats:
    """One speaker's fMLLR statistics for diagonal Gaussians, with ``x+ = [x; 1]``:
    ``beta = sum gamma``, ``K[i] = sum_t sum_m gamma_tm mu_mi / var_mi x+_t'`` and
    ``G[i] = sum_t sum_m gamma_tm / var_mi x+_t x+_t'``."""

    dim: int
    beta: float = 0.0
    k: np.ndarray = field(init=False)
    g: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.k = np.zeros((self.dim, self.dim + 1))
        self.g = np.zeros((self.dim, self.dim + 1, self.dim + 1))

    def add(
        self, feats: np.ndarray, means: np.ndarray, variances: np.ndarray, posteriors: np.ndarray
    ) -> None:
        """Frames ``(T, D)`` (the features the transform will apply to) with posteriors
        ``(T, M)`` over diagonal Gaussians of ``means`` and ``variances`` ``(M, D)``."""
        self.add_moments(GaussianMoments.of(feats, posteriors), means, variances)

    def add_moments(self, moments: GaussianMoments, means: np.ndarray, variances: np.ndarray) -> None:
        """Per-Gaussian moments (:class:`GaussianMoments`) of the features the transform will
        apply to."""
        used = moments.n > 0
        n, s, ss = moments.n[used], moments.s[used], moments.ss[used]
        inv_var = 1.0 / np.asarray(variances, dtype=np.float64)[used]
        dim = self.dim
        # The moments of x+ = [x; 1]: [[S, s], [s', n]] and [s; n].
        first = np.hstack([s, n[:, None]])
        second = np.empty((len(n), dim + 1, dim + 1))
        second[:, :dim, :dim] = ss
        second[:, :dim, dim] = second[:, dim, :dim] = s
        second[:, dim, dim] = n
        self.k += (np.asarray(means, dtype=np.float64)[used] * inv_var).T @ first
        self.g += np.einsum("mi,mjk->ijk", inv_var, second)
        self.beta += float(n.sum())


def fmllr_objective(w: np.ndarray, stats: FmllrStats) -> float:
    """``beta log|det A| + sum_i (w_i k_i' - 1/2 w_i G_i w_i')`` for ``W = [A b]``."""
    a = w[:, : stats.dim]
    linear = float(np.sum(w * stats.k))
    quad = sum(float(w[i] @ stats.g[i] @ w[i]) for i in range(stats.dim))
    return float(stats.beta * np.log(abs(np.linalg.det(a))) + linear - 0.5 * quad)


def estimate_fmllr(
    stats: FmllrStats, *, start: np.ndarray | None = None, iterations: int = 10, min_count: float = 0.0
) -> tuple[np.ndarray, list[float]]:
    """The speaker's ``W = [A b]`` maximising :func:`fmllr_objective` from ``start`` (the
    identity, no offset), each row in turn set to its exact maximum given the others.
    Returns ``W`` and the objective after each iteration (never falling). A speaker with
    fewer than ``min_count`` frames keeps the identity.
    """
    dim = stats.dim
    w = np.hstack([np.eye(dim), np.zeros((dim, 1))]) if start is None else np.array(start, dtype=np.float64)
    if stats.beta <= max(min_count, 0.0):
        return w, []
    inverses = [np.linalg.inv(stats.g[i]) for i in range(dim)]
    history = []
    for _ in range(iterations):
        for i in range(dim):
            c = np.append(_cofactor_row(w[:, :dim], i), 0.0)
            ginv, k = inverses[i], stats.k[i]
            # w_i = G_i^-1 (alpha c + k_i), alpha a root of
            # alpha^2 (c G^-1 c') + alpha (c G^-1 k') - beta = 0 (maximum of the row's term).
            p, q = float(c @ ginv @ c), float(c @ ginv @ k)
            roots = [(-q + sign * np.sqrt(q * q + 4 * p * stats.beta)) / (2 * p) for sign in (1.0, -1.0)]

            gains = [_row_gain(ginv @ (r * c + k), c, k, stats.g[i], stats.beta) for r in roots]
            alpha = roots[int(np.argmax(gains))]
            w[i] = ginv @ (alpha * c + k)
        history.append(fmllr_objective(w, stats))
    return w, history


def _row_gain(row: np.ndarray, c: np.ndarray, k: np.ndarray, g: np.ndarray, beta: float) -> float:
    """Row ``i``'s terms of the fMLLR objective (``row @ c`` is det(A) with that row)."""
    return float(beta * np.log(abs(row @ c)) + row @ k - 0.5 * row @ g @ row)


# ---------------------------------------------------------------- Kaldi matrix files


def write_matrix(path: str | Path, matrix: np.ndarray) -> None:
    """A Kaldi binary matrix file (``copy-matrix --binary=true``), float32, atomically."""
    with atomic_writer(path, "wb") as out:
        out.write(BINARY_MARKER + pack_float_matrix(np.ascontiguousarray(matrix, dtype=np.float32)))


def read_matrix(path: str | Path) -> np.ndarray:
    """A Kaldi binary matrix file as float64 (``FM`` or ``DM``)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: not found; run the GMM stage that writes it")
    data = path.read_bytes()
    reader = BinaryReader(io.BytesIO(data[2:]), str(path), fix="rerun the GMM stage that writes it")
    if not data.startswith(BINARY_MARKER):
        raise reader.fail("not a Kaldi binary matrix file (no \\0B marker)")
    return np.asarray(reader.float_matrix(), dtype=np.float64)


def compose(transforms: Sequence[np.ndarray], dim: int) -> np.ndarray:
    """The one transform that applies ``transforms`` in order (first applied first) to
    ``dim``-dim features; each is ``(k, D)`` linear or ``(k, D + 1)`` with an offset column.
    The result has an offset column when any of them had one (Kaldi's
    ``compose-transforms``)."""
    if not transforms:
        raise ValueError("compose needs at least one transform")
    linear, offset, affine = np.eye(dim), np.zeros(dim), False
    for t in transforms:
        t = np.asarray(t, dtype=np.float64)
        rows_in = linear.shape[0]
        if t.shape[1] == rows_in + 1:
            t_linear, t_offset, affine = t[:, :rows_in], t[:, rows_in], True
        elif t.shape[1] == rows_in:
            t_linear, t_offset = t, np.zeros(t.shape[0])
        else:
            raise DataError(f"a {t.shape[0]}x{t.shape[1]} transform cannot follow one with {rows_in} outputs")
        linear, offset = t_linear @ linear, t_linear @ offset + t_offset
    return np.hstack([linear, offset[:, None]]) if affine else linear
