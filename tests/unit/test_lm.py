"""Kneser-Ney n-gram estimation and ARPA files, against hand-computed probabilities."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from asrkit.errors import DataError
from asrkit.lm.ngram import (
    BOS,
    EOS,
    FALLBACK_DISCOUNTS,
    UNK,
    estimate_kneser_ney,
    modified_discounts,
    read_arpa,
    write_arpa,
)

TOY = [["a", "b"], ["a", "c"], ["a", "b"]]
HALF = [(0.5, 0.5, 0.5)] * 2


def test_bigram_probabilities_by_hand(tmp_path: Path) -> None:
    """<s> a b </s>, <s> a c </s>, <s> a b </s>, bigram, every discount 1/2.

    Unigram continuation counts: a 1 (after <s>), b 1, c 1, </s> 2 (after b and c); S = 5,
    gamma = (3 x 0.5 + 0.5) / 5 = 0.4 spread over 5 words (a b c </s> <unk>): 0.08 each.
    p(a) = 0.5/5 + 0.08 = 0.18 = p(b) = p(c); p(</s>) = 1.5/5 + 0.08 = 0.38; p(<unk>) = 0.08.
    Context a: b 2, c 1, S = 3, gamma = (0.5 + 0.5) / 3 = 1/3.
    p(b|a) = 1.5/3 + 0.18/3 = 0.56; p(c|a) = 0.5/3 + 0.06; p(</s>|a) = 0.38/3 (back-off).
    Context <s>: a 3 (raw: nothing precedes <s>), gamma = 0.5/3; p(a|<s>) = 2.5/3 + 0.18/6.
    """
    lm = estimate_kneser_ney(TOY, order=2, discounts=HALF)
    expected = {
        ("a", ()): 0.18,
        ("b", ()): 0.18,
        (EOS, ()): 0.38,
        (UNK, ()): 0.08,
        ("b", ("a",)): 0.56,
        ("c", ("a",)): 0.5 / 3 + 0.06,
        (EOS, ("a",)): 0.38 / 3,
        ("a", ("a",)): 0.06,
        ("a", (BOS,)): 2.5 / 3 + 0.03,
        ("zzz", ("a",)): 0.08 / 3,
    }
    for (word, context), p in expected.items():
        assert lm.prob(word, context) == pytest.approx(p, abs=1e-9), (word, context)
    # Through an ARPA file (log10, 7 decimals) the same numbers come back.
    write_arpa(lm, tmp_path / "lm.arpa")
    back = read_arpa(tmp_path / "lm.arpa")
    for (word, context), p in expected.items():
        assert back.prob(word, context) == pytest.approx(p, rel=1e-6), (word, context)
    text = (tmp_path / "lm.arpa").read_text()
    assert "\\data\\\nngram 1=6\nngram 2=5\n" in text and text.rstrip().endswith("\\end\\")
    assert "-99.0000000\t<s>\t" in text  # <s> is never predicted, but has a back-off


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_context_is_a_distribution(tmp_path: Path, order: int) -> None:
    rng = random.Random(order)
    words = ["A", "B", "C", "D", "E", "ONE", "TWO", "GO"]
    text = [[rng.choice(words) for _ in range(rng.randint(1, 7))] for _ in range(300)]
    lm = estimate_kneser_ney(text, order=order)
    write_arpa(lm, tmp_path / "lm.arpa")
    back = read_arpa(tmp_path / "lm.arpa")
    predicted = [*words, EOS, UNK]
    contexts = [()] + [
        c for n in range(1, order) for c in itertools.product([BOS, *words], repeat=n) if BOS not in c[1:]
    ][:200]
    for context in contexts:
        for model in (lm, back):
            total = sum(model.prob(w, context) for w in predicted)
            assert total == pytest.approx(1.0, abs=1e-5), context


def test_discounts_from_count_of_counts() -> None:
    # t1..t4 = 10, 4, 2, 1: Y = 10/18; D1 = 1 - 2Y 4/10; D2 = 2 - 3Y 2/4; D3 = 3 - 4Y 1/2.
    y = 10 / 18
    assert modified_discounts({1: 10, 2: 4, 3: 2, 4: 1}) == pytest.approx(
        (1 - 2 * y * 0.4, 2 - 3 * y * 0.5, 3 - 4 * y * 0.5)
    )
    assert modified_discounts({1: 3, 2: 1, 3: 0, 4: 0}) is None
    # AN4-like: a handful of words, each seen after many others: unigram discounts fall back.
    lm = estimate_kneser_ney([["A", "B"], ["B", "A"], ["A", "A"], ["B", "B"]] * 5, order=2)
    assert lm.discounts[0] == FALLBACK_DISCOUNTS


def test_bad_text_and_bad_arpa_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="contains <s>"):
        estimate_kneser_ney([["a", "</s>"]], order=2, discounts=HALF)
    with pytest.raises(DataError, match="no sentences"):
        estimate_kneser_ney([], order=2, discounts=HALF)
    write_arpa(estimate_kneser_ney(TOY, order=2, discounts=HALF), tmp_path / "lm.arpa")
    lines = (tmp_path / "lm.arpa").read_text().splitlines()
    (tmp_path / "cut.arpa").write_text("\n".join(lines[:9]) + "\n")
    with pytest.raises(DataError, match="truncated"):
        read_arpa(tmp_path / "cut.arpa")
    with pytest.raises(DataError, match="cannot read"):
        read_arpa(tmp_path / "missing.arpa")
