"""The open vocabulary: the general word list, its CMUdict pronunciations in a corpus's
phones, and the LM mixed with a unigram over it."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from asrkit.errors import ConfigError
from asrkit.lm.ngram import BOS, EOS, UNK, estimate_kneser_ney, read_arpa, write_arpa
from asrkit.lm.vocab import cmu_pronunciations, general_words, log_perplexity, mix_unigram, pick_weight

WORDS = ["ONE", "TWO", "THREE", "GO", "STOP"]


def _lm(order: int, seed: int = 0):
    rng = random.Random(seed)
    text = [[rng.choice(WORDS) for _ in range(rng.randint(1, 6))] for _ in range(200)]
    return estimate_kneser_ney(text, order=order)


@pytest.mark.parametrize("order", [2, 3])
def test_the_mixture_is_exact_on_explicit_ngrams_and_every_context_sums_to_one(
    tmp_path: Path, order: int
) -> None:
    lm = _lm(order)
    unigram = {"THE": 5.0, "GO": 2.0, "HOUSE": 1.0, "TWO": 2.0}
    weight = 0.2
    mixed = mix_unigram(lm, unigram, weight)
    u = {w: p / 10.0 for w, p in unigram.items()}
    for n in range(1, order + 1):
        for ngram, p in lm.probs[n - 1].items():
            expected = (1 - weight) * p + weight * u.get(ngram[-1], 0.0)
            assert mixed.probs[n - 1][ngram] == pytest.approx(expected, rel=1e-12), ngram
    # A word the training text lacks: the unigram's share only; <unk> keeps (1 - weight) of its.
    assert mixed.prob("HOUSE") == pytest.approx(weight * 0.1)
    assert mixed.prob(UNK) == pytest.approx((1 - weight) * lm.prob(UNK))
    write_arpa(mixed, tmp_path / "mixed.arpa")
    back = read_arpa(tmp_path / "mixed.arpa")
    predicted = [*WORDS, "THE", "HOUSE", EOS, UNK]
    contexts = [()] + [
        c
        for n in range(1, order)
        for c in itertools.product([BOS, *WORDS, "HOUSE"], repeat=n)
        if BOS not in c[1:]
    ]
    for context in contexts:
        for model in (mixed, back):
            assert sum(model.prob(w, context) for w in predicted) == pytest.approx(1.0, abs=1e-5), context


def test_the_weight_with_the_lowest_dev_perplexity_is_picked() -> None:
    lm = _lm(3)
    unigram = {"THE": 10.0, "HOUSE": 1.0, "GO": 3.0}
    weights = [0.01, 0.1, 0.5, 0.9]
    vocabulary = {*WORDS, "THE", "HOUSE"}
    # Dev speech full of the general words wants a large weight; speech of the training
    # words alone, the smallest.
    for dev, expected in (([["THE", "HOUSE", "THE"]] * 5, 0.9), ([["ONE", "TWO", "GO"]] * 5, 0.01)):
        weight, mixed, table = pick_weight(lm, unigram, weights, dev, vocabulary)
        assert weight == expected and set(table) == set(weights)
        assert table[weight] == min(table.values())
        assert log_perplexity(mixed, dev, vocabulary) == pytest.approx(
            log_perplexity(mix_unigram(lm, unigram, weight), dev, vocabulary)
        )
    with pytest.raises(ConfigError, match="general_weights"):
        mix_unigram(lm, unigram, 1.0)


def test_general_words_are_upper_case_words_in_frequency_order() -> None:
    words = general_words(300)
    assert 250 <= len(words) <= 300
    listed = list(words)
    assert listed[:3] == ["THE", "TO", "AND"]
    assert all(w.replace("'", "").isalpha() and w.isupper() for w in listed)
    frequencies = list(words.values())
    assert frequencies == sorted(frequencies, reverse=True) and frequencies[-1] > 0
    with pytest.raises(ConfigError, match="general_words"):
        general_words(0)


def test_cmudict_pronunciations_in_the_corpus_phones() -> None:
    stressless = {"HH", "AH", "EH", "L", "OW", "W", "ER", "D", "DH"}
    prons = cmu_pronunciations(["HELLO", "WORLD", "THE", "ZEBRA", "QQQX"], stressless, keep_stress=False)
    assert ("HH", "AH", "L", "OW") in prons["HELLO"] and ("W", "ER", "L", "D") in prons["WORLD"]
    assert "ZEBRA" not in prons  # Z, IY, B, R are not corpus phones
    assert "QQQX" not in prons  # not in CMUdict
    # THE: DH AH0 and DH IY0 in CMUdict; IY is not a corpus phone.
    assert prons["THE"] == [("DH", "AH")]
    stressed = cmu_pronunciations(["HELLO"], {"HH", "AH0", "EH0", "L", "OW1"}, keep_stress=True)
    assert set(stressed["HELLO"]) == {("HH", "AH0", "L", "OW1"), ("HH", "EH0", "L", "OW1")}
