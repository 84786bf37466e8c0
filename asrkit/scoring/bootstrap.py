"""A confidence interval on a WER by bootstrap resampling over utterances.

Bisani and Ney (ICASSP 2004, "Bootstrap estimates for confidence intervals in ASR
performance evaluation"): the test set is one draw of utterances from a population, so a
replica set drawn from it with replacement, of the same size, and its WER (the sum of its
errors over the sum of its reference words) show how much the WER would move on another
draw. The 2.5th and 97.5th percentiles of many replicas give the 95% interval. Errors
within an utterance stay together, which is what makes the interval honest about
correlated errors (a whole utterance misrecognised).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from asrkit.errors import UserError
from asrkit.scoring.wer import ScoreResult

#: Fewer replicas than this give percentiles that move from seed to seed by more than the
#: interval's own precision.
MIN_REPLICAS = 100


@dataclass(frozen=True)
class BootstrapInterval:
    """A WER with its bootstrap interval, all in percent."""

    wer: float
    low: float
    high: float
    std_error: float
    level: float
    replicas: int
    utterances: int
    seed: int

    def line(self) -> str:
        """``95% interval 4.9 .. 8.7 (bootstrap over 130 utterances, 1000 replicas, seed 0)``."""
        return (
            f"{100 * self.level:g}% interval {self.low:.2f} .. {self.high:.2f}, standard error "
            f"{self.std_error:.2f} (bootstrap over {self.utterances} utterances, {self.replicas} "
            f"replicas, seed {self.seed})"
        )


def bootstrap_counts(
    errors: Sequence[int] | np.ndarray,
    words: Sequence[int] | np.ndarray,
    *,
    replicas: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> BootstrapInterval:
    """The interval of ``sum(errors) / sum(words)`` from per-utterance counts.

    Args:
        errors: each utterance's errors (substitutions + deletions + insertions), shape (U,).
        words: each utterance's reference words, shape (U,).
        replicas: resampled sets to draw.
        seed: the generator's seed (the same seed gives the same interval).
        level: the interval's coverage, e.g. 0.95.

    Raises:
        UserError: too few replicas, a level outside (0, 1), or no reference words.
    """
    if replicas < MIN_REPLICAS:
        raise UserError(
            f"--bootstrap {replicas}: too few replicas for stable percentiles; use at least {MIN_REPLICAS}"
        )
    if not 0 < level < 1:
        raise UserError(f"bootstrap level {level}: must lie between 0 and 1, e.g. 0.95")
    err = np.asarray(errors, dtype=np.int64)
    ref = np.asarray(words, dtype=np.int64)
    if err.shape != ref.shape or err.ndim != 1:
        raise ValueError(f"errors {err.shape} and words {ref.shape} must be two (U,) arrays")
    if ref.sum() == 0:
        raise UserError("the reference has no words: a WER and its interval are undefined")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(err), size=(replicas, len(err)))
    rates = 100.0 * err[draws].sum(axis=1) / np.maximum(ref[draws].sum(axis=1), 1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(rates, [tail, 100 - tail])
    return BootstrapInterval(
        wer=100.0 * err.sum() / ref.sum(),
        low=float(low),
        high=float(high),
        std_error=float(rates.std(ddof=1)),
        level=level,
        replicas=replicas,
        utterances=len(err),
        seed=seed,
    )


def bootstrap_wer(
    result: ScoreResult, *, replicas: int = 1000, seed: int = 0, level: float = 0.95
) -> BootstrapInterval:
    """The interval of ``result``'s WER, from the per-utterance counts of the alignment it
    was scored with (utterances missing from the hypotheses count, all deleted)."""
    utts = list(result.utt_counts)
    return bootstrap_counts(
        [result.utt_counts[u].errors for u in utts],
        [result.utt_counts[u].ref_words for u in utts],
        replicas=replicas,
        seed=seed,
        level=level,
    )
