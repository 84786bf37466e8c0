"""Decoding: greedy CTC and a trained experiment as a recognizer.

Public API:
    - :class:`DecodeConfig` — the ``decode`` settings.
    - :func:`greedy_ctc` — best path, repeats merged, blanks dropped.
    - :class:`Recognizer` — model, features, CMVN and tokenizer of an experiment dir:
      its network's outputs for a data dir or audio.
    - :class:`Decoder` (:mod:`asrkit.decoding.decoder`) — the one decoding interface:
      prepare a set once, hypotheses at any (LM weight, word score) point, a saved
      :class:`DecodingRecord`; :func:`load_decoder` — an experiment's tuned decoder
      (CTC greedy / beam / beam + LM, GMM or hybrid through HCLG, or a combination).
    - :class:`WfstDecoder` (:mod:`asrkit.decoding.wfst`) — pdf log-likelihoods through an
      HCLG graph: best path, or a :class:`WordLattice` rescored at every LM weight and word
      penalty; :func:`pdf_log_likelihoods` — a hybrid network's log-posteriors minus
      log-priors.
"""

from asrkit.decoding.config import DecodeConfig
from asrkit.decoding.greedy import greedy_ctc

__all__ = [
    "DecodeConfig",
    "Decoder",
    "DecodingRecord",
    "Recognizer",
    "WfstDecoder",
    "WfstResult",
    "WordLattice",
    "greedy_ctc",
    "load_decoder",
    "pdf_log_likelihoods",
]

_WFST = ("WfstDecoder", "WfstResult", "WordLattice", "pdf_log_likelihoods")


def __getattr__(name: str):
    # The recognizer pulls in torch, the model and the feature and data modules; load it
    # only when asked for, so that importing the settings (asrkit.config does) stays light.
    if name == "Recognizer":
        from asrkit.decoding.recognizer import Recognizer

        return Recognizer
    if name in ("Decoder", "DecodingRecord", "load_decoder"):
        from asrkit.decoding import decoder

        return getattr(decoder, name)
    if name in _WFST:
        # The Kaldi bindings, likewise only when asked for.
        from asrkit.decoding import wfst

        return getattr(wfst, name)
    raise AttributeError(name)
