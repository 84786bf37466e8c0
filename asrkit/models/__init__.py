"""Acoustic models.

Public API:
    - :class:`LSTMAcousticModel` — (B)LSTM encoder with frame stacking/subsampling,
      a CTC head over tokens (+blank) and an optional frame-classification head.
    - :data:`MODEL_SIZES` and the builders :func:`blstm_tiny`, :func:`blstm_demo`,
      :func:`blstm_large`, :func:`blstm_paper`; :func:`build_model` by size name.
    - :mod:`asrkit.models.checkpoint` — model bundles and training checkpoints
      (:func:`~asrkit.models.checkpoint.load_model_bundle`, used by training and decoding).
"""

from asrkit.models.lstm import (
    MODEL_SIZES,
    LSTMAcousticModel,
    ModelConfig,
    blstm_demo,
    blstm_large,
    blstm_paper,
    blstm_tiny,
    build_model,
)

__all__ = [
    "MODEL_SIZES",
    "LSTMAcousticModel",
    "ModelConfig",
    "blstm_demo",
    "blstm_large",
    "blstm_paper",
    "blstm_tiny",
    "build_model",
]
