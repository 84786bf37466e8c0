"""Feature extraction speed: asrkit's pipeline vs a minimal hand-written loop.

Both sides read the same audio and compute the same 80-bin fbank; asrkit's
side additionally goes through ``wav.scp`` parsing, validation, ark/scp
writing and CMVN stats. The ratio is the cost of all that on top of the
extraction itself; both run one job on one thread.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torchaudio.compliance.kaldi as kaldi

from asrkit.data import load_audio, read_data_dir, read_matrices
from asrkit.features import FeatureConfig, compute_features_for_dir


def bench_features(data_dir: str | Path, *, repeats: int = 3) -> dict:
    """Real-time factors of feature extraction over ``data_dir`` (best of ``repeats``).

    Returns:
        ``{"audio_seconds", "asrkit_s", "baseline_s", "asrkit_rtf", "baseline_rtf",
        "ratio", "max_abs_diff"}`` — ratio = asrkit time / baseline time.
    """
    torch.set_num_threads(1)
    data = read_data_dir(data_dir)
    audio = [load_audio(data.wav_scp[u], utt=u) for u in data.utt_ids]
    seconds = sum(len(samples) / rate for samples, rate in audio)

    def baseline() -> list[np.ndarray]:
        out = []
        for utt in data.utt_ids:
            samples, _ = load_audio(data.wav_scp[utt], utt=utt)
            wave = torch.from_numpy(samples)[None]
            out.append(kaldi.fbank(wave, num_mel_bins=80, dither=0.0, energy_floor=0.0).numpy())
        return out

    base_times, ours_times = [], []
    reference = baseline()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "data"
        copy.mkdir()
        for name in ("wav.scp", "utt2spk", "spk2utt", "text"):
            (copy / name).write_bytes((Path(data_dir) / name).read_bytes())
        for _ in range(repeats):
            began = time.perf_counter()
            baseline()
            base_times.append(time.perf_counter() - began)
            began = time.perf_counter()
            compute_features_for_dir(copy, Path(tmp) / "fbank", FeatureConfig(nj=1))
            ours_times.append(time.perf_counter() - began)
        ours = dict(read_matrices(f"scp:{copy / 'feats.scp'}"))
    diff = max(float(np.abs(ours[u] - ref).max()) for u, ref in zip(data.utt_ids, reference,
                                                                    strict=True))
    asrkit_s, baseline_s = min(ours_times), min(base_times)
    return {
        "utterances": len(data.utt_ids),
        "audio_seconds": round(seconds, 2),
        "asrkit_s": round(asrkit_s, 3),
        "baseline_s": round(baseline_s, 3),
        "asrkit_rtf": round(asrkit_s / seconds, 5),
        "baseline_rtf": round(baseline_s / seconds, 5),
        "ratio": round(asrkit_s / baseline_s, 3),
        "max_abs_diff": diff,
    }
