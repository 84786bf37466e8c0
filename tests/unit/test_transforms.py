"""LDA, MLLT and fMLLR on synthetic statistics with known answers, and Kaldi's matrix files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from asrkit.errors import DataError
from asrkit.gmm.transforms import (
    FmllrStats,
    LdaStats,
    MlltStats,
    apply_affine,
    compose,
    estimate_fmllr,
    estimate_lda,
    estimate_mllt,
    fmllr_objective,
    mllt_objective,
    read_matrix,
    splice,
    write_matrix,
)


def test_splice_repeats_the_edge_frames() -> None:
    feats = np.arange(8, dtype=np.float64).reshape(4, 2)
    spliced = splice(feats, context=1)
    assert spliced.shape == (4, 6)
    np.testing.assert_array_equal(spliced[0], [0, 1, 0, 1, 2, 3])
    np.testing.assert_array_equal(spliced[3], [4, 5, 6, 7, 6, 7])


def test_lda_finds_the_separating_direction_and_whitens_within_class() -> None:
    # Three classes apart along (1, 1, 0) only, the same within-class covariance, which is
    # wider along (1, -1, 0) than the classes are apart: PCA would pick that, LDA must not.
    rng = np.random.default_rng(0)
    direction = np.array([1.0, 1.0, 0.0]) / np.sqrt(2)
    spread = np.diag([9.0, 9.0, 1.0])
    spread[0, 1] = spread[1, 0] = -8.0  # variance 17 along (1, -1), 1 along (1, 1)
    stats = LdaStats(dim=3, classes=3)
    for label, offset in enumerate((-2.0, 0.0, 2.0)):
        x = rng.multivariate_normal(offset * direction, spread, size=20000)
        stats.add(x, np.full(len(x), label))
    # Silence: frames of another class weighted 0 change nothing.
    before = estimate_lda(stats, 1)
    stats.add(rng.normal(size=(500, 3)) * 100, np.zeros(500, dtype=int), weights=np.zeros(500))
    np.testing.assert_allclose(estimate_lda(stats, 1), before)
    lda = estimate_lda(stats, 2)
    first = lda[0] / np.linalg.norm(lda[0])
    assert abs(first @ direction) > 0.999
    # The projected within-class covariance is the identity.
    total = stats.counts.sum()
    means = stats.sums / stats.counts[:, None]
    mean = stats.sums.sum(axis=0) / total
    between = sum(n * np.outer(m - mean, m - mean) for n, m in zip(stats.counts, means, strict=True)) / total
    within = stats.scatter / total - np.outer(mean, mean) - between
    np.testing.assert_allclose(lda @ within @ lda.T, np.eye(2), atol=1e-3)
    with pytest.raises(DataError, match="cannot keep 4 of 3"):
        estimate_lda(stats, 4)


def _semi_tied(rng: np.random.Generator, frames: int = 4000):
    """Four classes whose covariances are diagonal in a rotated space."""
    rotation, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    labels = rng.integers(0, 4, size=frames)
    z_means = rng.normal(scale=3.0, size=(4, 3))
    z_vars = rng.uniform(0.2, 4.0, size=(4, 3))
    z = z_means[labels] + rng.normal(size=(frames, 3)) * np.sqrt(z_vars[labels])
    return z @ rotation, labels, rotation


def test_mllt_raises_its_objective_at_every_iteration_and_finds_the_rotation() -> None:
    rng = np.random.default_rng(1)
    x, labels, rotation = _semi_tied(rng)
    posteriors = np.eye(4)[labels]
    # The diagonal model in the current (unrotated) space, as the GMM holds it.
    means = np.stack([x[labels == m].mean(axis=0) for m in range(4)])
    variances = np.stack([x[labels == m].var(axis=0) for m in range(4)])
    stats = MlltStats(dim=3)
    stats.add(x, means, variances, posteriors)
    a, history = estimate_mllt(stats, iterations=8)
    start = mllt_objective(np.eye(3), stats)
    assert history[0] > start and all(b >= a_ - 1e-9 for a_, b in zip(history, history[1:], strict=False))
    # Each row of A lies along one of the rotation's axes (up to scale and sign).
    cosines = np.abs((a / np.linalg.norm(a, axis=1, keepdims=True)) @ rotation.T)
    assert np.all(cosines.max(axis=1) > 0.98), cosines


def test_fmllr_recovers_a_known_affine_transform_and_never_lowers_its_objective() -> None:
    rng = np.random.default_rng(2)
    dim, gaussians, frames = 3, 6, 30000
    means = rng.normal(scale=3.0, size=(gaussians, dim))
    variances = rng.uniform(0.3, 2.0, size=(gaussians, dim))
    labels = rng.integers(0, gaussians, size=frames)
    y = means[labels] + rng.normal(size=(frames, dim)) * np.sqrt(variances[labels])
    true_a = np.eye(dim) + rng.normal(scale=0.2, size=(dim, dim))
    true_b = rng.normal(scale=0.5, size=dim)
    x = (y - true_b) @ np.linalg.inv(true_a).T  # the speaker's features; A x + b is the model's space
    stats = FmllrStats(dim=dim)
    stats.add(x, means, variances, np.eye(gaussians)[labels])
    w, history = estimate_fmllr(stats, iterations=10)
    identity = np.hstack([np.eye(dim), np.zeros((dim, 1))])
    assert history[0] > fmllr_objective(identity, stats)
    assert all(b >= a - 1e-6 * abs(a) for a, b in zip(history, history[1:], strict=False))
    np.testing.assert_allclose(w, np.hstack([true_a, true_b[:, None]]), atol=0.05)
    np.testing.assert_allclose(apply_affine(w, x), y, atol=0.3)
    # Too few frames: the identity.
    few = FmllrStats(dim=dim)
    few.add(x[:10], means, variances, np.eye(gaussians)[labels[:10]])
    kept, _ = estimate_fmllr(few, min_count=100.0)
    np.testing.assert_array_equal(kept, identity)


def test_composed_transforms_apply_as_the_chain(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 6))
    lda = rng.normal(size=(4, 6))
    mllt = rng.normal(size=(4, 4))
    fmllr = rng.normal(size=(4, 5))
    chained = apply_affine(fmllr, apply_affine(mllt, apply_affine(lda, x)))
    np.testing.assert_allclose(apply_affine(compose([lda, mllt, fmllr], 6), x), chained, atol=1e-10)
    assert compose([lda, mllt], 6).shape == (4, 6)  # linear in, linear out
    with pytest.raises(DataError, match=r"data/test: utterance u1 \(final.mat\): a 4x5 transform.*6-dim"):
        apply_affine(fmllr, x, where="data/test: utterance u1 (final.mat)")


def test_matrix_files_are_kaldis_binary_and_read_back_bitwise(tmp_path: Path) -> None:
    matrix = np.random.default_rng(4).normal(size=(3, 4))
    path = tmp_path / "final.mat"
    write_matrix(path, matrix)
    data = path.read_bytes()
    assert data[:5] == b"\0BFM " and data[5:15] == b"\x04\x03\x00\x00\x00\x04\x04\x00\x00\x00"
    assert len(data) == 15 + 12 * 4
    back = read_matrix(path)
    np.testing.assert_array_equal(back, matrix.astype(np.float32))
    write_matrix(tmp_path / "again.mat", back)
    assert (tmp_path / "again.mat").read_bytes() == data
    path.write_bytes(data[:20])
    with pytest.raises(DataError, match="final.mat"):
        read_matrix(path)
