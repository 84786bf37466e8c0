"""Decoding: greedy CTC and a trained experiment as a recognizer.

Public API:
    - :class:`DecodeConfig` — the ``decode`` settings.
    - :func:`greedy_ctc` — best path, repeats merged, blanks dropped.
    - :class:`Recognizer` — model, features, CMVN and tokenizer of an experiment
      dir; decodes data dirs (writing ``hyp`` and ``scoring/``) or audio.
"""

from asrkit.decoding.config import DecodeConfig
from asrkit.decoding.greedy import greedy_ctc

__all__ = ["DecodeConfig", "Recognizer", "greedy_ctc"]


def __getattr__(name: str):
    # The recognizer pulls in torch, the model and the feature and data modules; load it
    # only when asked for, so that importing the settings (asrkit.config does) stays light.
    if name == "Recognizer":
        from asrkit.decoding.recognizer import Recognizer

        return Recognizer
    raise AttributeError(name)
