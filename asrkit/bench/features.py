"""Feature extraction speed: asrkit's pipeline against a second implementation.

Three timings over the same audio, each one job on one thread:

* ``asrkit`` — the stage-2 pipeline: ``wav.scp`` parsing, validation, fbank
  through ``torchaudio.compliance.kaldi``, ark/scp writing and CMVN stats.
* ``knf`` — kaldi-native-fbank, an independent C++ port of Kaldi's
  ``compute-fbank-feats``, given the same options. Its features are compared with
  asrkit's frame by frame (the agreement is reported, not assumed).
* ``loop`` — a minimal hand-written torchaudio loop (no I/O beyond reading the
  audio): the cost of the pipeline around the extractor.

Ratios are asrkit time / baseline time.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torchaudio.compliance.kaldi as kaldi

from asrkit.data import iter_utterance_audio, read_data_dir, read_matrices
from asrkit.features import FeatureConfig, compute_features_for_dir


def _knf_extractor(cfg: FeatureConfig):
    """A function ``samples -> (frames, bins)`` through kaldi-native-fbank, or None when absent."""
    try:
        import kaldi_native_fbank as knf
    except ImportError:
        return None
    opts = knf.FbankOptions()
    frame = opts.frame_opts
    frame.samp_freq = float(cfg.sample_rate)
    frame.frame_length_ms, frame.frame_shift_ms = cfg.frame_length_ms, cfg.frame_shift_ms
    frame.dither, frame.preemph_coeff = cfg.dither, cfg.preemphasis
    frame.window_type, frame.snip_edges = cfg.window_type, True
    opts.mel_opts.num_bins = cfg.num_mel_bins
    opts.mel_opts.low_freq, opts.mel_opts.high_freq = cfg.low_freq, cfg.high_freq
    opts.energy_floor, opts.use_energy = cfg.energy_floor, cfg.use_energy

    def extract(samples: np.ndarray) -> np.ndarray:
        fbank = knf.OnlineFbank(opts)
        fbank.accept_waveform(float(cfg.sample_rate), samples)
        fbank.input_finished()
        return np.stack([fbank.get_frame(i) for i in range(fbank.num_frames_ready)])

    return extract


def bench_features(data_dir: str | Path, *, repeats: int = 3) -> dict:
    """Real-time factors of feature extraction over ``data_dir`` (best of ``repeats``).

    Returns:
        ``{"utterances", "audio_seconds", "asrkit_rtf", "knf_rtf", "loop_rtf",
        "ratio_vs_knf", "ratio_vs_loop", "knf_max_abs_diff", "knf_max_rel_diff",
        "loop_max_abs_diff", ...}``. The ``knf_*`` entries are absent (with a
        ``knf`` note) when kaldi-native-fbank is not installed.
    """
    torch.set_num_threads(1)
    cfg = FeatureConfig(nj=1)
    data = read_data_dir(data_dir)
    seconds = sum(len(audio.samples) for audio in iter_utterance_audio(data)) / cfg.sample_rate
    knf_extract = _knf_extractor(cfg)

    def loop() -> list[np.ndarray]:
        out = {}
        for utt, samples, _, _ in iter_utterance_audio(data):
            wave = torch.from_numpy(np.ascontiguousarray(samples))[None]
            out[utt] = kaldi.fbank(wave, num_mel_bins=cfg.num_mel_bins, dither=0.0, energy_floor=0.0).numpy()
        return [out[u] for u in data.utt_ids]

    def knf() -> list[np.ndarray]:
        out = {audio.utt: knf_extract(audio.samples) for audio in iter_utterance_audio(data)}
        return [out[u] for u in data.utt_ids]

    times: dict[str, list[float]] = {"asrkit": [], "loop": [], "knf": []}
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "data"
        copy.mkdir()
        for name in ("wav.scp", "utt2spk", "spk2utt", "text", "segments", "reco2file_and_channel"):
            if (Path(data_dir) / name).is_file():
                (copy / name).write_bytes((Path(data_dir) / name).read_bytes())
        for _ in range(repeats):
            for name, run in (
                ("loop", loop),
                ("knf", knf if knf_extract else None),
                ("asrkit", lambda: compute_features_for_dir(copy, Path(tmp) / "fbank", cfg)),
            ):
                if run is None:
                    continue
                began = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - began)
        ours = [dict(read_matrices(f"scp:{copy / 'feats.scp'}"))[u] for u in data.utt_ids]

    best = {name: min(values) for name, values in times.items() if values}
    result: dict[str, object] = {
        "utterances": len(data.utt_ids),
        "audio_seconds": round(seconds, 2),
        **{f"{name}_s": round(value, 3) for name, value in best.items()},
        **{f"{name}_rtf": round(value / seconds, 5) for name, value in best.items()},
        "ratio_vs_loop": round(best["asrkit"] / best["loop"], 3),
        "loop_max_abs_diff": _max_abs(ours, loop()),
    }
    if knf_extract is None:
        result["knf"] = "kaldi-native-fbank is not installed (pip install kaldi-native-fbank)"
        return result
    theirs = knf()
    result["ratio_vs_knf"] = round(best["asrkit"] / best["knf"], 3)
    result["knf_max_abs_diff"] = knf_diff = _max_abs(ours, theirs)
    # Relative to the feature's magnitude: log-mel energies near the floor differ most.
    if np.isfinite(knf_diff):
        pairs = list(zip(ours, theirs, strict=True))
        result["knf_max_rel_diff"] = max(
            float((np.abs(a - b) / np.maximum(np.abs(b), 1.0)).max()) for a, b in pairs
        )
        result["knf_mean_abs_diff"] = float(np.mean([np.abs(a - b).mean() for a, b in pairs]))
    return result


def _max_abs(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    """Largest elementwise difference; a frame-count mismatch is reported as infinity."""
    return max(
        (float(np.abs(a - b).max()) if a.shape == b.shape else float("inf"))
        for a, b in zip(ours, theirs, strict=True)
    )
