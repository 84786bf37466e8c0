"""Every setting that takes one of a fixed set of words, declared once.

The config sections check their values against these tuples when a recipe config is
composed (:func:`asrkit.config.validate`, every problem reported together); the code that
acts on a value imports the same tuple, so a new choice is added in one place. (Hydra's
structured configs do not accept ``Literal`` types, so each choice is a constant here.)
Choices that come with a registry of implementations (``features.kind``,
``tokenizer.kind``, ``strategy.name``) are the registry's keys instead.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

#: ``pipeline``: CTC acoustic models, or GMM-HMM systems and a hybrid BLSTM.
PIPELINES = ("ctc", "hybrid")
#: ``objective``: CTC on token sequences, or frame cross-entropy on alignments.
OBJECTIVES = ("ctc", "ce")
#: ``resume``: continue when a matching checkpoint exists, require one, or start over.
RESUME_MODES = ("auto", "true", "false")
#: ``optim.name``.
OPTIMIZERS = ("adam", "sgd")
#: ``optim.lr_scaling``: how the learning rate follows the global batch (``optim.base_batch``).
LR_SCALINGS = ("linear", "sqrt")
#: ``schedule.anneal``.
ANNEALING = ("none", "cosine", "exponential")
#: ``features.cmvn`` (and the ``cmvn`` a trained model records).
CMVN_MODES = ("global", "speaker", "none")
#: ``train.device``.
DEVICES = ("auto", "cpu", "cuda")
#: ``train.best_metric``.
BEST_METRICS = ("wer", "loss")
#: ``train.loader``: read-ahead in worker processes or in threads.
LOADERS = ("process", "thread")
#: ``train.precision``: the training step's arithmetic (weights and updates stay float32).
PRECISIONS = ("fp32", "bf16")
#: ``strategy.backend``.
BACKENDS = ("auto", "gloo", "nccl")
#: ``strategy.straggler.mode``.
STRAGGLER_MODES = ("none", "one", "random", "delay", "exponential")
#: ``strategy.pattern``: how weight-averaging learners pick partners.
PARTNER_PATTERNS = ("fixed", "random")
#: ``strategy.staleness`` of delay-by-one.
STALENESS = (0, 1)


def resume_mode(mode: str | bool) -> str:
    """``resume`` spelled as in :data:`RESUME_MODES` (YAML may give a bool)."""
    return str(mode).lower()


def unknown(key: str, value: object, choices: Sequence[object]) -> list[str]:
    """``[the problem]`` when ``value`` is not one of ``choices``, else ``[]``."""
    if value in choices:
        return []
    names = [str(c) for c in choices]
    close = did_you_mean(str(value), names)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return [f"{key}={value!r} is unknown; {hint}choose one of {', '.join(names)}"]


def did_you_mean(word: str, choices: Iterable[str], *, most: int = 3) -> list[str]:
    """The choices spelt close to ``word``, best first: close as a whole, then by the last
    dotted part (``lr`` finds ``optim.lr``, ``epoch`` finds ``train.epochs``)."""
    choices = list(dict.fromkeys(choices))
    found = difflib.get_close_matches(word, choices, n=most, cutoff=0.75)
    tail = word.rsplit(".", 1)[-1]
    by_tail = [
        (difflib.SequenceMatcher(None, tail, c.rsplit(".", 1)[-1]).ratio(), c)
        for c in choices
        if c not in found
    ]
    found += [c for ratio, c in sorted(by_tail, key=lambda rc: -rc[0]) if ratio >= 0.8]
    return found[:most]


def suggestion(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean a or b?"`` (empty when nothing is close)."""
    close = did_you_mean(word, choices)
    return f"; did you mean {' or '.join(close)}?" if close else ""
