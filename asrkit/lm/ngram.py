"""Word n-gram language models: interpolated modified Kneser-Ney estimation, ARPA I/O.

:func:`estimate_kneser_ney` counts n-grams over sentences (each wrapped in ``<s>`` ...
``</s>``) and smooths them the way KenLM's ``lmplz`` does (Chen & Goodman's
interpolated modified Kneser-Ney):

* the highest order uses raw counts; a lower-order n-gram uses its *continuation*
  count (the number of different words seen before it), except one that starts with
  ``<s>``, which nothing can precede, and keeps its raw count;
* each order discounts counts of 1, 2 and 3+ by ``D1, D2, D3`` estimated from that
  order's count-of-counts ``t1..t4``: ``Y = t1 / (t1 + 2 t2)``, ``Dk = k - (k + 1) Y
  t(k+1) / tk`` (or given explicitly; where the counts cannot give them, KenLM's
  fallback ``0.5, 1, 1.5``);
* ``p(w | h) = (a(h w) - D(a(h w))) / S(h) + gamma(h) p(w | h')`` with ``h'`` the context
  without its first word, ``S(h)`` the sum of ``a(h .)`` and ``gamma(h) = (D1 N1(h) + D2
  N2(h) + D3 N3+(h)) / S(h)``; unigrams interpolate with the uniform distribution over
  the vocabulary (``<unk>`` included, ``<s>`` excluded).

Written as ARPA, ``gamma(h)`` is exactly the back-off weight of ``h``, so an ARPA reader
(:class:`ArpaLM`, KenLM, flashlight) reproduces the interpolated probabilities.
"""

from __future__ import annotations

import logging
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from asrkit.errors import ConfigError, DataError

log = logging.getLogger(__name__)

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
#: ARPA's stand-in for log10(0), used for ``<s>`` (never predicted).
LOG_ZERO = -99.0

NGram = tuple[str, ...]


@dataclass
class NGramLM:
    """An estimated model: per order, n-gram -> (probability, back-off weight).

    Attributes:
        order: the highest order.
        probs: ``probs[n - 1][ngram] = p(last word | the others)`` (natural probabilities).
        backoffs: ``backoffs[n - 1][ngram]`` = gamma of the n-gram as a context (absent = 1).
        discounts: per order, ``(D1, D2, D3)``.
    """

    order: int
    probs: list[dict[NGram, float]] = field(default_factory=list)
    backoffs: list[dict[NGram, float]] = field(default_factory=list)
    discounts: list[tuple[float, float, float]] = field(default_factory=list)

    def prob(self, word: str, context: Sequence[str] = ()) -> float:
        """``p(word | context)`` with back-off (the last ``order - 1`` context words count)."""
        context = tuple(context)[-(self.order - 1) :] if self.order > 1 else ()
        weight = 1.0
        while True:
            ngram = (*context, word)
            p = self.probs[len(ngram) - 1].get(ngram)
            if p is not None:
                return weight * p
            if not context:
                return weight * self.probs[0].get((UNK,), 0.0)
            weight *= self.backoffs[len(context) - 1].get(context, 1.0)
            context = context[1:]


#: Discounts used where an order's count-of-counts cannot give them (as KenLM's
#: ``--discount_fallback``): typical of tiny vocabularies such as AN4's 97 words, whose
#: unigrams all have large continuation counts.
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)


def modified_discounts(count_of_counts: dict[int, int]) -> tuple[float, float, float] | None:
    """``(D1, D2, D3)`` from the count-of-counts ``t1..t4`` of one order, or None when they
    cannot be estimated (some ``tk`` is zero, or a discount falls outside ``[0, k]``)."""
    t = [count_of_counts.get(k, 0) for k in range(1, 5)]
    if min(t) == 0:
        return None
    y = t[0] / (t[0] + 2 * t[1])
    d = tuple(k - (k + 1) * y * t[k] / t[k - 1] for k in (1, 2, 3))
    if not all(0.0 <= dk <= k for dk, k in zip(d, (1, 2, 3), strict=True)):
        return None
    return d  # type: ignore[return-value]


def estimate_kneser_ney(
    sentences: Iterable[Sequence[str]],
    *,
    order: int = 3,
    discounts: Sequence[Sequence[float]] | None = None,
    vocabulary: Iterable[str] = (),
) -> NGramLM:
    """Interpolated modified Kneser-Ney n-gram model of ``sentences`` (lists of words).

    Args:
        sentences: training text, one word list per sentence (no ``<s>``/``</s>``).
        order: highest n-gram order (>= 1).
        discounts: per order ``(D1, D2, D3)`` instead of estimating them.
        vocabulary: extra words that get unigram probability from the uniform share
            (e.g. a lexicon's words that the text lacks).
    """
    if order < 1:
        raise ConfigError(f"lm.order={order} must be >= 1")
    if discounts is not None and len(discounts) != order:
        raise ConfigError(
            f"lm.discounts has {len(discounts)} entries; give one (D1, D2, D3) per order ({order})"
        )
    # raw[n - 1]: raw counts of order-n n-grams (the highest order, and <s>-initial ones).
    raw: list[dict[NGram, int]] = [defaultdict(int) for _ in range(order)]
    vocab = {EOS, UNK, *vocabulary}
    sentences_seen = 0
    for words in sentences:
        if any(w in (BOS, EOS) for w in words):
            raise DataError(
                f"LM training sentence {' '.join(words)!r} contains {BOS} or {EOS}; pass the words only"
            )
        sentences_seen += 1
        vocab.update(words)
        padded = (BOS, *words, EOS)
        for i in range(1, len(padded)):
            # Every n-gram ending at word i, up to the highest order: the longest ones are
            # counted at the highest order; shorter ones only where they start with <s>.
            for n in range(1, order + 1):
                if i - n + 1 < 0:
                    break
                ngram = padded[i - n + 1 : i + 1]
                if n == order or ngram[0] == BOS:
                    raw[n - 1][ngram] += 1
    if not sentences_seen:
        raise DataError("no sentences to estimate the language model from")
    counts: list[dict[NGram, int]] = [dict(c) for c in raw]
    for n in range(order - 1, 0, -1):
        # Continuation counts: distinct left extensions in the order above.
        cont: dict[NGram, int] = defaultdict(int)
        for ngram in counts[n]:
            cont[ngram[1:]] += 1
        for ngram, c in cont.items():
            if ngram[0] != BOS:
                counts[n - 1][ngram] = c
    lm = NGramLM(order=order)
    for n in range(1, order + 1):
        d: tuple[float, ...] | None
        if discounts is not None:
            d = tuple(float(x) for x in discounts[n - 1])
        else:
            coc: dict[int, int] = defaultdict(int)  # t_k: n-grams whose count is exactly k
            for c in counts[n - 1].values():
                if c <= 4:
                    coc[c] += 1
            d = modified_discounts(coc)
            if d is None:
                log.info(
                    "order %d: count-of-counts t1..t4 = %s cannot give Kneser-Ney discounts; "
                    "using the fallback %s",
                    n,
                    [coc.get(k, 0) for k in range(1, 5)],
                    FALLBACK_DISCOUNTS,
                )
                d = FALLBACK_DISCOUNTS
        lm.discounts.append(d)  # type: ignore[arg-type]
    _smooth(lm, counts, vocab)
    return lm


def _discount(c: int, d: tuple[float, float, float]) -> float:
    return d[min(c, 3) - 1]


def _smooth(lm: NGramLM, counts: list[dict[NGram, int]], vocab: set[str]) -> None:
    for n in range(1, lm.order + 1):
        d = lm.discounts[n - 1]
        totals: dict[NGram, list[float]] = defaultdict(lambda: [0.0, 0.0])  # context -> [S, mass]
        for ngram, c in counts[n - 1].items():
            entry = totals[ngram[:-1]]
            entry[0] += c
            entry[1] += _discount(c, d)
        gammas = {h: mass / s for h, (s, mass) in totals.items()}
        probs: dict[NGram, float] = {}
        if n == 1:
            predicted = sorted(vocab)  # <s> is never predicted
            s, gamma = totals[()][0], gammas[()]
            for w in predicted:
                c = counts[0].get((w,), 0)
                probs[(w,)] = (max(c - _discount(c, d), 0.0) if c else 0.0) / s + gamma / len(predicted)
        else:
            lower = lm.probs[n - 2]
            for ngram, c in counts[n - 1].items():
                h = ngram[:-1]
                probs[ngram] = (c - _discount(c, d)) / totals[h][0] + gammas[h] * lower[ngram[1:]]
        lm.probs.append(probs)
        if n > 1:
            lm.backoffs.append(gammas)
    lm.backoffs.append({})  # the highest order backs off nowhere


def write_arpa(lm: NGramLM, path: str | Path) -> None:
    """Write ``lm`` as an ARPA file (log10 probabilities and back-off weights), atomically."""
    path = Path(path)
    lines = ["", "\\data\\"]
    tables = []
    for n in range(1, lm.order + 1):
        probs = dict(lm.probs[n - 1])
        if n == 1:
            probs[(BOS,)] = 0.0
        backoffs = lm.backoffs[n - 1] if n < lm.order else {}
        rows = []
        for ngram in sorted(probs):
            p = probs[ngram]
            logp = LOG_ZERO if ngram == (BOS,) else math.log10(p)
            row = f"{logp:.7f}\t{' '.join(ngram)}"
            if n < lm.order and ngram in backoffs:
                row += f"\t{math.log10(backoffs[ngram]) if backoffs[ngram] > 0 else LOG_ZERO:.7f}"
            rows.append(row)
        lines.append(f"ngram {n}={len(rows)}")
        tables.append((n, rows))
    for n, rows in tables:
        lines += ["", f"\\{n}-grams:", *rows]
    lines += ["", "\\end\\", ""]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    os.replace(tmp, path)


def read_arpa(path: str | Path) -> NGramLM:
    """Read an ARPA file into an :class:`NGramLM` (natural probabilities).

    Raises:
        DataError: not an ARPA file, or a section that disagrees with its header.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: cannot read the ARPA file ({err})") from None
    expected: dict[int, int] = {}
    probs: list[dict[NGram, float]] = []
    backoffs: list[dict[NGram, float]] = []
    section = 0
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line == "\\data\\":
            continue
        if line == "\\end\\":
            break
        if line.startswith("ngram "):
            n, _, count = line[6:].partition("=")
            expected[int(n)] = int(count)
            continue
        if line.startswith("\\") and line.endswith("-grams:"):
            section = int(line[1:].split("-")[0])
            probs.append({})
            backoffs.append({})
            continue
        fields = line.split()
        if section == 0 or len(fields) not in (section + 1, section + 2):
            raise DataError(f"{path}:{number}: not an ARPA line: {line[:80]!r}")
        ngram = tuple(fields[1 : section + 1])
        probs[-1][ngram] = 0.0 if float(fields[0]) <= LOG_ZERO else 10 ** float(fields[0])
        if len(fields) == section + 2:
            backoffs[-1][ngram] = 10 ** float(fields[-1])
    if not probs or any(len(probs[n - 1]) != c for n, c in expected.items()):
        raise DataError(
            f"{path}: the n-gram counts in \\data\\ ({expected}) do not match the "
            "sections; the file is truncated or not ARPA"
        )
    return NGramLM(order=len(probs), probs=probs, backoffs=backoffs)
