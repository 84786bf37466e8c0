"""Feature extraction: Kaldi compatibility, CMVN, parallel jobs, bad audio."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
import torchaudio.compliance.kaldi as kaldi

from asrkit.data import load_audio
from asrkit.data.kaldi_ark import kaldi_io
from asrkit.errors import ConfigError, DataError
from asrkit.features import (
    FeatureConfig,
    apply_cmvn,
    cmvn_stats,
    compute_features_for_dir,
    extract,
    read_cmvn,
)
from tests.helpers import make_data_dir, tone


def test_fbank_matches_torchaudio_kaldi_with_explicit_settings() -> None:
    audio = tone(3).astype(np.float32)
    ours = extract(audio, 16000, FeatureConfig())
    theirs = kaldi.fbank(
        torch.from_numpy(audio)[None], num_mel_bins=80, dither=0.0, energy_floor=0.0, sample_frequency=16000
    ).numpy()
    assert ours.shape == (38, 80)
    np.testing.assert_array_equal(ours, theirs)


def test_mfcc_dimension_and_frames() -> None:
    cfg = FeatureConfig(kind="mfcc", num_mel_bins=23, num_ceps=13, use_energy=True)
    feats = extract(tone(1).astype(np.float32), 16000, cfg)
    assert feats.shape == (38, 13) == (38, cfg.dim)


def test_wrong_sample_rate_is_rejected_or_resampled() -> None:
    audio = tone(2, rate=8000).astype(np.float32)
    with pytest.raises(DataError, match=r"utterance 'u1': audio a.wav is 8000 Hz .*resample=true"):
        extract(audio, 8000, FeatureConfig(), utt="u1", where="a.wav")
    feats = extract(audio, 8000, FeatureConfig(resample=True))
    assert feats.shape == (38, 80)


def test_too_short_audio_is_an_error() -> None:
    with pytest.raises(DataError, match="fewer than one 25.0 ms frame"):
        extract(np.zeros(100, np.float32), 16000, FeatureConfig(), utt="u")


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="features.kind='plp' is unknown"):
        FeatureConfig(kind="plp").check()
    with pytest.raises(ConfigError, match="features.cmvn='utt'"):
        FeatureConfig(cmvn="utt").check()


def test_cmvn_stats_normalise_to_zero_mean_unit_variance() -> None:
    rng = np.random.default_rng(0)
    feats = rng.normal(3.0, 2.0, size=(500, 4)).astype(np.float32)
    stats = cmvn_stats(feats)
    assert stats.shape == (2, 5) and stats[0, -1] == 500
    out = apply_cmvn(feats, stats)
    np.testing.assert_allclose(out.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.std(axis=0), 1.0, atol=1e-4)
    np.testing.assert_allclose(
        apply_cmvn(feats, stats, norm_vars=False).std(axis=0), feats.std(axis=0), rtol=1e-5
    )


def test_compute_features_writes_kaldi_outputs(tmp_path: Path) -> None:
    data_dir = tmp_path / "data" / "train"
    make_data_dir(data_dir, utts=5)
    frames = compute_features_for_dir(data_dir, tmp_path / "fbank", FeatureConfig(nj=2))
    feats = dict(kaldi_io.read_mat_scp(str(data_dir / "feats.scp")))
    assert sorted(feats) == sorted(frames) and len(feats) == 5
    num_frames = dict(line.split() for line in (data_dir / "utt2num_frames").read_text().splitlines())
    assert all(int(num_frames[u]) == feats[u].shape[0] for u in feats)
    assert (data_dir / "frame_shift").read_text() == "0.01\n"
    # Parallel jobs give exactly what one job gives.
    one = tmp_path / "one" / "train"
    make_data_dir(one, utts=5)
    compute_features_for_dir(one, tmp_path / "fbank1", FeatureConfig(nj=1))
    for utt, mat in kaldi_io.read_mat_scp(str(one / "feats.scp")):
        np.testing.assert_array_equal(mat, feats[utt])
    # CMVN: per-speaker stats add up to the global stats.
    spk = dict(kaldi_io.read_mat_scp(str(data_dir / "cmvn.scp")))
    assert sorted(spk) == ["spk1", "spk2"]
    np.testing.assert_allclose(spk["spk1"] + spk["spk2"], read_cmvn(data_dir / "cmvn_global.ark"))
    assert sum(int(n) for n in num_frames.values()) == spk["spk1"][0, -1] + spk["spk2"][0, -1]


def _assert_nothing_written(data_dir: Path, feats_dir: Path) -> None:
    assert not (data_dir / "feats.scp").exists()
    assert not (data_dir / "cmvn.scp").exists()
    assert not list(feats_dir.glob("*.ark")) and not list(feats_dir.glob("*.tmp"))


@pytest.mark.parametrize("nj", [1, 2])
def test_missing_audio_leaves_no_partial_output(tmp_path: Path, nj: int) -> None:
    data_dir = tmp_path / "train"
    make_data_dir(data_dir, utts=4)
    (data_dir / "audio" / "spk2-utt3.wav").unlink()
    with pytest.raises(DataError, match=r"utterance 'spk2-utt3': audio file .*spk2-utt3.wav not found"):
        compute_features_for_dir(data_dir, tmp_path / "fbank", FeatureConfig(nj=nj))
    _assert_nothing_written(data_dir, tmp_path / "fbank")


def test_truncated_audio_is_named(tmp_path: Path) -> None:
    data_dir = tmp_path / "train"
    make_data_dir(data_dir, utts=4)
    wav = data_dir / "audio" / "spk1-utt1.wav"
    wav.write_bytes(wav.read_bytes()[:30])
    with pytest.raises(DataError, match=r"utterance 'spk1-utt1': cannot read audio .*spk1-utt1.wav"):
        compute_features_for_dir(data_dir, tmp_path / "fbank", FeatureConfig(nj=2))
    _assert_nothing_written(data_dir, tmp_path / "fbank")


def test_pipe_entries_and_failed_pipes(tmp_path: Path) -> None:
    wav = tmp_path / "a.wav"
    soundfile.write(wav, tone(5), 16000, subtype="PCM_16")
    samples, rate = load_audio(f"cat {wav} |", utt="u")
    assert rate == 16000 and samples.shape == (6400,)
    np.testing.assert_array_equal(samples, tone(5).astype(np.float32))
    with pytest.raises(DataError, match="utterance 'u': wav.scp command failed"):
        load_audio(f"cat {tmp_path / 'missing.wav'} |", utt="u")


def test_stereo_audio_is_rejected(tmp_path: Path) -> None:
    wav = tmp_path / "st.wav"
    soundfile.write(wav, np.stack([tone(1), tone(2)], axis=1), 16000, subtype="PCM_16")
    with pytest.raises(DataError, match="has 2 channels"):
        load_audio(str(wav), utt="u")


def test_feature_settings_are_recorded(tmp_path: Path) -> None:
    data_dir = tmp_path / "train"
    make_data_dir(data_dir, utts=2)
    cfg = FeatureConfig(num_mel_bins=40, nj=1)
    compute_features_for_dir(data_dir, tmp_path / "fbank", cfg)
    import yaml

    assert yaml.safe_load((data_dir / "feats.yaml").read_text()) == dataclasses.asdict(cfg)


def test_feature_benchmark_agrees_with_its_baseline(tmp_path: Path) -> None:
    from asrkit.bench import bench_features

    make_data_dir(tmp_path / "test", utts=3)
    result = bench_features(tmp_path / "test", repeats=1)
    assert result["utterances"] == 3 and result["loop_max_abs_diff"] == 0.0
    assert result["ratio_vs_loop"] > 0 and result["audio_seconds"] == pytest.approx(1.2)
    # kaldi-native-fbank is an independent port of Kaldi's fbank: it must agree to float precision.
    assert result["knf_max_rel_diff"] < 1e-2 and result["ratio_vs_knf"] > 0
