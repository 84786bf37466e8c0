"""A confidence interval on a WER by bootstrap resampling over utterances.

Bisani and Ney (ICASSP 2004, "Bootstrap estimates for confidence intervals in ASR
performance evaluation"): the test set is one draw of utterances from a population, so a
replica set drawn from it with replacement, of the same size, and its WER (the sum of its
errors over the sum of its reference words) show how much the WER would move on another
draw. The 2.5th and 97.5th percentiles of many replicas give the 95% interval, and their
standard deviation the bootstrap standard error. Errors within an utterance stay together,
which is what makes the interval honest about correlated errors (a whole utterance
misrecognised).
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
#: Utterance draws held in memory at once (int64: 32 MiB); replicas are drawn in blocks of
#: this many draws, so a 100k-utterance set does not need a (replicas, U) array.
_DRAWS_PER_BLOCK = 1 << 22


@dataclass(frozen=True)
class BootstrapInterval:
    """A WER with its bootstrap interval (rates in percent).

    Attributes:
        wer: the WER of the whole set.
        low: the interval's lower end (the ``(1 - level) / 2`` quantile of the replicas).
        high: its upper end (the ``(1 + level) / 2`` quantile).
        std_error: the replicas' standard deviation, the bootstrap standard error.
        level: the interval's coverage, e.g. 0.95.
        replicas: replica sets drawn.
        utterances: utterances in the set (and in each replica).
        seed: the generator's seed.
        errors: the set's errors (substitutions + deletions + insertions).
        words: the set's reference words.
    """

    wer: float
    low: float
    high: float
    std_error: float
    level: float
    replicas: int
    utterances: int
    seed: int
    errors: int
    words: int

    def line(self) -> str:
        """The line ``asrkit score --bootstrap`` prints, e.g. ``%WER 6.73 [ 52 / 773 ], 95%
        interval 4.9 .. 8.7, standard error 1.0 (bootstrap over 130 utterances, 1000
        replicas, seed 0)``. The interval's ends carry one decimal: with 1000 replicas they
        move by about a tenth of a point from seed to seed."""
        return (
            f"%WER {self.wer:.2f} [ {self.errors} / {self.words} ], {100 * self.level:g}% interval "
            f"{self.low:.1f} .. {self.high:.1f}, standard error {self.std_error:.1f} (bootstrap over "
            f"{self.utterances} utterances, {self.replicas} replicas, seed {self.seed})"
        )


def check_bootstrap(replicas: int, seed: int) -> None:
    """Refuse a replica count too small for stable percentiles, or a negative seed (the
    command checks them before it scores, so that a mistake prints nothing else).

    Raises:
        UserError: ``replicas`` below :data:`MIN_REPLICAS` or ``seed`` below 0 (the value and
            the fix named).
    """
    if replicas < MIN_REPLICAS:
        raise UserError(
            f"--bootstrap {replicas}: too few replicas for stable percentiles; use at least "
            f"{MIN_REPLICAS} (the default, 1000, when --bootstrap is given without a number)"
        )
    if seed < 0:
        raise UserError(f"--seed {seed}: the bootstrap's seed must be 0 or more")


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
        replicas: replica sets to draw, each of U utterances drawn with replacement.
        seed: the generator's seed (the same seed and counts give the same interval).
        level: the interval's coverage, e.g. 0.95.

    Returns:
        The set's WER, the interval and the standard error.

    Raises:
        UserError: too few replicas, a level outside (0, 1), a negative seed, or no
            reference words.
        ValueError: ``errors`` and ``words`` are not two arrays of one shape (U,).
    """
    check_bootstrap(replicas, seed)
    if not 0 < level < 1:
        raise UserError(f"bootstrap level {level}: must lie between 0 and 1, e.g. 0.95")
    err = np.asarray(errors, dtype=np.int64)
    ref = np.asarray(words, dtype=np.int64)
    if err.shape != ref.shape or err.ndim != 1:
        raise ValueError(f"errors {err.shape} and words {ref.shape} must be two (U,) arrays")
    if ref.sum() == 0:
        raise UserError(
            f"the reference has no words ({len(ref)} utterance(s), all empty): a WER and its "
            "interval are undefined; score against a reference text with transcripts"
        )
    rng = np.random.default_rng(seed)
    utts = len(err)
    block = max(1, _DRAWS_PER_BLOCK // utts)
    rates = np.empty(replicas)
    for start in range(0, replicas, block):
        stop = min(start + block, replicas)
        draws = rng.integers(0, utts, size=(stop - start, utts))  # (R', U) utterance indices
        # A replica may draw only empty references: its rate counts its errors per word.
        rates[start:stop] = 100.0 * err[draws].sum(axis=1) / np.maximum(ref[draws].sum(axis=1), 1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(rates, [tail, 100 - tail])
    return BootstrapInterval(
        wer=100.0 * float(err.sum()) / float(ref.sum()),
        low=float(low),
        high=float(high),
        std_error=float(rates.std(ddof=1)),
        level=level,
        replicas=replicas,
        utterances=utts,
        seed=seed,
        errors=int(err.sum()),
        words=int(ref.sum()),
    )


def bootstrap_wer(
    result: ScoreResult, *, replicas: int = 1000, seed: int = 0, level: float = 0.95
) -> BootstrapInterval:
    """The interval of ``result``'s WER from its per-utterance counts.

    The counts are those of the alignment ``result`` was scored with
    (``result.utt_counts``, which sum to ``result.words``), so the interval's centre is the
    summary's ``%WER``; utterances missing from the hypotheses count, all deleted.

    Args:
        result: a :func:`~asrkit.scoring.score_texts` or :func:`~asrkit.scoring.score_files`
            result.
        replicas: replica sets to draw.
        seed: the generator's seed.
        level: the interval's coverage.

    Raises:
        UserError: too few replicas, a bad level or seed, or a reference without words.
    """
    counts = list(result.utt_counts.values())
    return bootstrap_counts(
        [c.errors for c in counts],
        [c.ref_words for c in counts],
        replicas=replicas,
        seed=seed,
        level=level,
    )
