"""Is system A better than system B on this test set? Two answers on the same utterances.

* **Matched pairs** (Gillick & Cox, ICASSP 1989; NIST ``sc_stats -t mapsswe``): the test set
  is cut into segments at stretches of at least ``min_good`` (2) reference words that both
  systems recognised correctly, with no insertion inside; a segment's errors by A and B
  are assumed independent of the other segments' (which whole utterances are not, when an
  error spreads to the next words). ``Z = mean(e_A - e_B) / (sd / sqrt(n))`` over the n
  segments is compared with the normal distribution, two-tailed.
* **Paired bootstrap** (Bisani & Ney, ICASSP 2004): replica test sets of utterances drawn
  with replacement, both systems scored on the same replicas; the 2.5th and 97.5th
  percentiles of ``WER_A - WER_B`` bound the difference, and the share of replicas where A
  has fewer errors is the "probability of improvement".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from asrkit.errors import DataError
from asrkit.scoring.align import Op


@dataclass(frozen=True)
class MatchedPairs:
    """The matched-pairs sentence-segment word error test's outcome.

    Attributes:
        segments: segments the test set was cut into.
        errors_a, errors_b: each system's errors over all segments.
        mean: mean of ``e_A - e_B`` per segment (negative: A makes fewer errors).
        std: its sample standard deviation.
        z: the test statistic.
        p: two-tailed p-value under the normal distribution.
        level: the significance level the verdict uses.
    """

    segments: int
    errors_a: int
    errors_b: int
    mean: float
    std: float
    z: float
    p: float
    level: float = 0.05

    @property
    def significant(self) -> bool:
        return self.p < self.level

    def line(self, name_a: str = "A", name_b: str = "B") -> str:
        if self.significant:
            better = name_a if self.mean < 0 else name_b
            verdict = f"{better} is better (p = {self.p:.3g} < {self.level:g})"
        else:
            verdict = f"no significant difference (p = {self.p:.3g} >= {self.level:g})"
        return (
            f"matched pairs: {self.segments} segments, errors {self.errors_a} ({name_a}) vs "
            f"{self.errors_b} ({name_b}), mean difference {self.mean:.3f}, sd {self.std:.3f}, "
            f"Z {self.z:.3f}: {verdict}"
        )


def _marks(ops: Sequence[Op]) -> tuple[list[bool], list[int], list[int]]:
    """Per reference word: correct?, errors (0/1); and insertions before each reference
    word and after the last (length n + 1)."""
    correct: list[bool] = []
    errors: list[int] = []
    inserted = [0]
    for op, _ref, _hyp in ops:
        if op == "I":
            inserted[-1] += 1
            continue
        correct.append(op == "C")
        errors.append(0 if op == "C" else 1)
        inserted.append(0)
    return correct, errors, inserted


def segment_errors(ops_a: Sequence[Op], ops_b: Sequence[Op], *, min_good: int = 2) -> list[tuple[int, int]]:
    """One utterance's segments as ``(errors of A, errors of B)`` (see the module docstring).

    Raises:
        ValueError: the two alignments have different reference lengths.
    """
    ca, ea, ia = _marks(ops_a)
    cb, eb, ib = _marks(ops_b)
    if len(ca) != len(cb):
        raise ValueError(f"alignments of {len(ca)} and {len(cb)} reference words")
    n = len(ca)
    good = [ca[i] and cb[i] for i in range(n)]
    # A word is inside a boundary when it and its neighbours in the run are good with no
    # insertion between them, in a run of at least min_good words.
    boundary = [False] * n
    i = 0
    while i < n:
        if not good[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and good[j + 1] and ia[j + 1] == 0 and ib[j + 1] == 0:
            j += 1
        if j - i + 1 >= min_good:
            for k in range(i, j + 1):
                boundary[k] = True
        i = j + 1
    segments: list[tuple[int, int]] = []
    a = b = 0
    open_segment = False
    for k in range(n):
        # insertions before word k belong to the segment around them
        if ia[k] or ib[k]:
            a, b, open_segment = a + ia[k], b + ib[k], True
        if boundary[k]:
            if open_segment:
                segments.append((a, b))
            a = b = 0
            open_segment = False
            continue
        a, b, open_segment = a + ea[k], b + eb[k], True
    if ia[n] or ib[n]:
        a, b, open_segment = a + ia[n], b + ib[n], True
    if open_segment:
        segments.append((a, b))
    # Stretches without an error by either system (e.g. a one-word utterance both got
    # right) are not segments: sc_stats leaves them out, and they carry no difference.
    return [pair for pair in segments if pair != (0, 0)]


def matched_pairs(
    ops_a: Mapping[str, Sequence[Op]],
    ops_b: Mapping[str, Sequence[Op]],
    *,
    min_good: int = 2,
    level: float = 0.05,
) -> MatchedPairs:
    """The matched-pairs test over utterances both alignments have.

    Raises:
        DataError: the systems were scored on different utterances or references.
    """
    if set(ops_a) != set(ops_b):
        only = sorted(set(ops_a) ^ set(ops_b))
        raise DataError(
            f"the two systems were scored on different utterances ({len(only)} in one only, first "
            f"{only[0]!r}); compare scorings of the same reference"
        )
    diffs: list[int] = []
    total_a = total_b = 0
    for utt in ops_a:
        try:
            pairs = segment_errors(ops_a[utt], ops_b[utt], min_good=min_good)
        except ValueError as err:
            raise DataError(f"utterance {utt}: {err}; compare scorings of the same reference") from None
        for a, b in pairs:
            diffs.append(a - b)
            total_a += a
            total_b += b
    n = len(diffs)
    if n < 2:
        return MatchedPairs(n, total_a, total_b, float(diffs[0]) if diffs else 0.0, 0.0, 0.0, 1.0, level)
    mean = sum(diffs) / n
    std = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    z = mean / (std / math.sqrt(n)) if std > 0 else (0.0 if mean == 0 else math.copysign(math.inf, mean))
    p = math.erfc(abs(z) / math.sqrt(2))
    return MatchedPairs(n, total_a, total_b, mean, std, z, p, level)


@dataclass(frozen=True)
class DifferenceInterval:
    """A paired bootstrap interval of ``WER_A - WER_B`` in points (percent)."""

    difference: float
    low: float
    high: float
    improvement: float
    replicas: int
    utterances: int
    seed: int
    level: float = 0.95

    def line(self, name_a: str = "A", name_b: str = "B") -> str:
        return (
            f"WER {name_a} - {name_b}: {self.difference:+.2f} points, {100 * self.level:g}% interval "
            f"{self.low:+.2f} .. {self.high:+.2f}; {name_a} better in {100 * self.improvement:.1f}% of "
            f"{self.replicas} replicas (paired bootstrap over {self.utterances} utterances, seed {self.seed})"
        )


def bootstrap_difference(
    errors_a: Sequence[int],
    errors_b: Sequence[int],
    words: Sequence[int],
    *,
    replicas: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> DifferenceInterval:
    """Paired bootstrap of the WER difference from per-utterance errors and reference words
    (the same utterances in the same order for both systems)."""
    ea, eb, w = (np.asarray(x, dtype=np.int64) for x in (errors_a, errors_b, words))
    if not (len(ea) == len(eb) == len(w)) or len(w) == 0:
        raise DataError("the two systems need the same, non-empty, list of scored utterances")
    if w.sum() == 0:
        raise DataError("the reference has no words; a WER difference needs reference words")
    rng = np.random.default_rng(seed)
    diffs = np.empty(replicas)
    better = 0
    for r in range(replicas):
        pick = rng.integers(0, len(w), len(w))
        words_r = max(int(w[pick].sum()), 1)
        da, db = int(ea[pick].sum()), int(eb[pick].sum())
        diffs[r] = 100.0 * (da - db) / words_r
        better += da < db
    tail = (1 - level) / 2
    low, high = np.quantile(diffs, [tail, 1 - tail])
    difference = 100.0 * (int(ea.sum()) - int(eb.sum())) / int(w.sum())
    return DifferenceInterval(
        difference, float(low), float(high), better / replicas, replicas, len(w), seed, level
    )
