"""Feature extractors: log-mel filterbank and MFCC, Kaldi-compatible.

Both wrap ``torchaudio.compliance.kaldi``, which reproduces Kaldi's
``compute-fbank-feats``/``compute-mfcc-feats``. Two of its defaults differ
from Kaldi's binaries, so asrkit always passes them explicitly: ``dither``
(Kaldi 1.0; asrkit 0.0 so features are deterministic) and ``energy_floor``
(torchaudio 1.0; Kaldi 0.0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torchaudio.compliance.kaldi as kaldi
import torchaudio.functional

from asrkit.choices import CMVN_MODES, unknown
from asrkit.errors import DataError, raise_all


@dataclass
class FeatureConfig:
    """Settings of the ``features`` config group (defaults: 80-bin fbank, 16 kHz).

    Attributes:
        kind: extractor name in :data:`EXTRACTORS` (``fbank`` or ``mfcc``).
        sample_rate: the rate features are computed at, in Hz.
        resample: audio at another rate is resampled when true; when false (the
            default) it is rejected with an error naming the utterance, because a
            silent resample usually hides a corpus preparation mistake.
        num_mel_bins: mel filters (fbank dimension).
        num_ceps: cepstra kept by MFCC.
        frame_length_ms / frame_shift_ms: analysis window and hop.
        dither: Gaussian dither added to samples (0 = deterministic).
        energy_floor: floor on the raw log-energy (Kaldi's default 0).
        preemphasis: pre-emphasis coefficient.
        low_freq / high_freq: mel filterbank edges in Hz (high <= 0 is an offset from Nyquist).
        window_type: ``povey``, ``hamming``, ``hanning``, ...
        use_energy: append log-energy (fbank) / use it as C0 (MFCC).
        cmvn: normalisation applied when features are used: ``global`` (training
            set stats), ``speaker`` (per-speaker stats) or ``none``.
        norm_vars: also normalise variances.
        nj: parallel feature-extraction jobs.
    """

    kind: str = "fbank"
    sample_rate: int = 16000
    resample: bool = False
    num_mel_bins: int = 80
    num_ceps: int = 13
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    dither: float = 0.0
    energy_floor: float = 0.0
    preemphasis: float = 0.97
    low_freq: float = 20.0
    high_freq: float = 0.0
    window_type: str = "povey"
    use_energy: bool = False
    cmvn: str = "global"
    norm_vars: bool = True
    nj: int = 2

    def check(self) -> None:
        """Raise one :class:`ConfigError` listing every value no extractor can use."""
        problems = unknown("features.kind", self.kind, sorted(EXTRACTORS))
        problems += unknown("features.cmvn", self.cmvn, CMVN_MODES)
        for name in ("sample_rate", "num_mel_bins", "nj", "frame_length_ms", "frame_shift_ms"):
            if getattr(self, name) <= 0:
                problems.append(f"features.{name}={getattr(self, name)} must be positive")
        if self.kind == "mfcc" and self.num_ceps > self.num_mel_bins:
            problems.append(
                f"features.num_ceps={self.num_ceps} exceeds num_mel_bins={self.num_mel_bins}; "
                "lower num_ceps or raise num_mel_bins"
            )
        if self.dither < 0:
            problems.append(f"features.dither={self.dither} must be >= 0")
        raise_all(problems)

    @property
    def dim(self) -> int:
        base = self.num_ceps if self.kind == "mfcc" else self.num_mel_bins
        return base + (1 if self.use_energy and self.kind == "fbank" else 0)


Extractor = Callable[[torch.Tensor, FeatureConfig], torch.Tensor]
EXTRACTORS: dict[str, Extractor] = {}


def register_extractor(name: str) -> Callable[[Extractor], Extractor]:
    """Register ``func(waveform (1, T) int16-range, cfg) -> (frames, dim)`` under ``name``."""

    def add(func: Extractor) -> Extractor:
        EXTRACTORS[name] = func
        return func

    return add


def _common(cfg: FeatureConfig) -> dict:
    return {
        "sample_frequency": float(cfg.sample_rate),
        "frame_length": cfg.frame_length_ms,
        "frame_shift": cfg.frame_shift_ms,
        "dither": cfg.dither,
        "energy_floor": cfg.energy_floor,
        "preemphasis_coefficient": cfg.preemphasis,
        "low_freq": cfg.low_freq,
        "high_freq": cfg.high_freq,
        "window_type": cfg.window_type,
        "num_mel_bins": cfg.num_mel_bins,
        "use_energy": cfg.use_energy,
        "snip_edges": True,
    }


@register_extractor("fbank")
def _fbank(waveform: torch.Tensor, cfg: FeatureConfig) -> torch.Tensor:
    return kaldi.fbank(waveform, **_common(cfg))


@register_extractor("mfcc")
def _mfcc(waveform: torch.Tensor, cfg: FeatureConfig) -> torch.Tensor:
    return kaldi.mfcc(waveform, num_ceps=cfg.num_ceps, **_common(cfg))


def extract(
    samples: np.ndarray, sample_rate: int, cfg: FeatureConfig, *, utt: str = "?", where: str = "?"
) -> np.ndarray:
    """Features of one utterance.

    Args:
        samples: ``(T,)`` int16-range samples (see :func:`asrkit.data.load_audio`).
        sample_rate: their rate in Hz.
        cfg: feature settings.
        utt, where: utterance id and audio source, for error messages.

    Returns:
        ``(frames, cfg.dim)`` float32 features.

    Raises:
        DataError: wrong sample rate (when ``cfg.resample`` is false) or audio
            shorter than one analysis window.
    """
    waveform = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32)).unsqueeze(0)
    if sample_rate != cfg.sample_rate:
        if not cfg.resample:
            raise DataError(
                f"utterance '{utt}': audio {where} is {sample_rate} Hz but "
                f"features.sample_rate={cfg.sample_rate}; set features.resample=true to "
                "resample it, or set features.sample_rate to match the corpus"
            )
        waveform = torchaudio.functional.resample(waveform, sample_rate, cfg.sample_rate)
    window = int(cfg.sample_rate * cfg.frame_length_ms / 1000)
    if waveform.shape[1] < window:
        raise DataError(
            f"utterance '{utt}': audio {where} has {waveform.shape[1]} samples, fewer than "
            f"one {cfg.frame_length_ms} ms frame; remove the utterance from the data dir"
        )
    with torch.no_grad():
        feats = EXTRACTORS[cfg.kind](waveform, cfg)
    return feats.numpy().astype(np.float32, copy=False)
