"""Kaldi-compatible acoustic features.

Public API:
    - :class:`FeatureConfig` — typed feature settings (the ``features`` config group).
    - :data:`EXTRACTORS`, :func:`register_extractor`, :func:`extract` — fbank/MFCC
      through ``torchaudio.compliance.kaldi`` on int16-range samples.
    - :func:`compute_features_for_dir` — ``nj`` parallel jobs writing ``ark,scp``,
      ``utt2num_frames``, ``frame_shift`` and CMVN stats into a data dir.
    - :func:`cmvn_stats`, :func:`apply_cmvn`, :func:`read_cmvn` — Kaldi-format CMVN.
"""

from asrkit.features.cmvn import apply_cmvn, cmvn_stats, read_cmvn
from asrkit.features.compute import compute_features_for_dir
from asrkit.features.extractors import EXTRACTORS, FeatureConfig, extract, register_extractor

__all__ = [
    "EXTRACTORS",
    "FeatureConfig",
    "apply_cmvn",
    "cmvn_stats",
    "compute_features_for_dir",
    "extract",
    "read_cmvn",
    "register_extractor",
]
