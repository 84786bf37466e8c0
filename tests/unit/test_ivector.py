"""The i-vector extractor on synthetic speakers whose offsets lie in a known subspace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from asrkit.errors import DataError
from asrkit.gmm.ivector import IvectorExtractor, Ubm, train_extractor, train_ubm


def _world(seed: int = 0, gauss: int = 6, dim: int = 4, rank: int = 2):
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=4.0, size=(gauss, dim))
    variances = rng.uniform(0.5, 1.5, size=(gauss, dim))
    t = rng.normal(size=(gauss, dim, rank))
    return rng, means, variances, t


def _speaker(rng, means, variances, t, w, frames: int) -> np.ndarray:
    labels = rng.integers(len(means), size=frames)
    shift = np.einsum("cdr,r->cd", t, w)
    return (
        means[labels] + shift[labels] + rng.normal(size=(frames, means.shape[1])) * np.sqrt(variances[labels])
    )


def test_ubm_em_raises_the_likelihood_and_finds_the_components() -> None:
    rng, means, variances, _ = _world()
    frames = _speaker(rng, means, variances, np.zeros((6, 4, 1)), np.zeros(1), 6000)
    ubm, history = train_ubm(frames, 6, iterations=30, seed=1)
    assert len(ubm.weights) == 6
    grown = history[15:]  # after the Gaussians stopped splitting, EM alone
    assert all(b >= a - 1e-9 for a, b in zip(grown, grown[1:], strict=False))
    # Every true mean has a UBM mean near it.
    nearest = np.linalg.norm(means[:, None] - ubm.means[None], axis=2).min(axis=1)
    assert nearest.max() < 0.5
    with pytest.raises(DataError, match="frames for a UBM of 6 Gaussians"):
        train_ubm(frames[:20], 6)


def test_extractor_em_raises_its_objective_and_recovers_the_speakers_offsets(tmp_path: Path) -> None:
    rng, means, variances, t = _world(seed=2)
    truth = rng.normal(size=(60, 2))
    speakers = [_speaker(rng, means, variances, t, w, 400) for w in truth]
    ubm = Ubm(np.full(6, 1 / 6), means, variances)  # the speaker-independent model
    units = [_stats(ubm, x) for x in speakers]
    extractor, history = train_extractor(ubm, units, 2, iterations=8, seed=3)
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(history, history[1:], strict=False))
    assert history[-1] > history[0]
    ivectors = np.stack([extractor.extract([x]) for x in speakers])
    # The i-vectors span the true offsets' subspace: a linear map predicts the truth.
    design = np.hstack([ivectors, np.ones((60, 1))])
    fit, *_ = np.linalg.lstsq(design, truth, rcond=None)
    residual = truth - design @ fit
    assert 1 - residual.var() / truth.var() > 0.95
    # Standardised over the training speakers.
    np.testing.assert_allclose(ivectors.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(ivectors.std(axis=0), 1, atol=1e-3)
    # Saved and read back, the same i-vectors.
    extractor.save(tmp_path / "extractor.npz")
    again = IvectorExtractor.load(tmp_path / "extractor.npz")
    np.testing.assert_array_equal(again.extract([speakers[0]]), ivectors[0])
    (tmp_path / "bad.npz").write_bytes(b"not numpy")
    with pytest.raises(DataError, match="bad.npz: not an i-vector extractor"):
        IvectorExtractor.load(tmp_path / "bad.npz")
    with pytest.raises(DataError, match="give more units than dimensions"):
        train_extractor(ubm, units[:2], 2)


def _stats(ubm: Ubm, x: np.ndarray):
    return IvectorExtractor(ubm, np.zeros((6, 4, 1)), np.zeros(1), np.ones(1)).stats([x])


def test_ivector_units_cut_each_speaker_into_runs_of_at_most_n_utterances() -> None:
    from asrkit.gmm.nnet_input import ivector_units

    utt2spk = {f"a{i}": "a" for i in range(5)} | {"b0": "b"} | {f"c{i}": "c" for i in range(4)}
    assert ivector_units(utt2spk, 0) == utt2spk  # one i-vector a speaker
    units = ivector_units(utt2spk, 2)
    assert set(units) == set(utt2spk)
    members: dict[str, list[str]] = {}
    for utt, unit in units.items():
        members.setdefault(unit, []).append(utt)
    assert all(
        1 <= len(m) <= 2 and {utt2spk[u] for u in m} == {unit.rsplit("-", 1)[0]}
        for unit, m in members.items()
    )
    assert sorted(len(m) for m in members.values()) == [1, 1, 2, 2, 2, 2]  # a: 2+2+1, b: 1, c: 2+2
    assert ivector_units(dict(reversed(list(utt2spk.items()))), 2) == units  # by id, not by listing


def test_a_negative_ivector_max_utts_is_refused_with_the_setting_named() -> None:
    from asrkit.errors import ConfigError
    from asrkit.targets.align_config import AlignConfig

    with pytest.raises(ConfigError, match="align.ivector_max_utts=-1"):
        AlignConfig(fmllr=True, ivector_dim=4, ivector_max_utts=-1).check()
