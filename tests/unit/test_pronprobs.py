"""Pronunciation probabilities: the counts from spelled alignments, the max-normalised
probabilities, and L's costs (Kaldi's get_prons.sh / dict_dir_add_pronprobs.sh)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import kaldifst
import numpy as np
import pytest

from asrkit.decoding.word_align import spell_words
from asrkit.errors import DataError
from asrkit.gmm.lang import prepare_lang
from asrkit.gmm.pronprobs import count_pronunciations, pron_probs, read_pron_counts

# KAY has two pronunciations; HI one.
LEXICON = {"HI": [["h", "ay"]], "KAY": [["k", "ay"], ["k", "ey"]], "<unk>": [["sil"]]}
PRONS = {w: [tuple(p) for p in ps] for w, ps in LEXICON.items()}


def _phones(*names: str) -> list[tuple[str, int, int]]:
    return [(name, 2 * i, 2 * i + 1) for i, name in enumerate(names)]


def test_spelled_words_name_the_pronunciation_each_took() -> None:
    spelled = spell_words(
        ["HI", "KAY"], _phones("SIL", "h", "ay", "k", "ey", "SIL"), PRONS, silence=frozenset({"SIL"})
    )
    assert spelled == [("HI", ("h", "ay"), 2, 5), ("KAY", ("k", "ey"), 6, 9)]


class _Aligner:
    """What counting needs of a WordAligner: phones per frame spans and the lexicon (each
    test alignment's "transition-ids" index a phone name here)."""

    names = ["SIL", "h", "ay", "k", "ey"]
    prons = PRONS
    silence = frozenset({"SIL"})

    def phone_spans(self, alignment: np.ndarray) -> list[tuple[str, int, int]]:
        return [(self.names[int(p)], t, t) for t, p in enumerate(alignment)]


def test_counts_are_the_pronunciations_the_alignments_chose_and_bad_ones_are_left_out() -> None:
    ali = {
        "u1": np.array([0, 1, 2, 3, 4, 0]),  # HI KAY(k ey)
        "u2": np.array([3, 2, 0, 3, 2]),  # KAY(k ay) KAY(k ay)
        "u3": np.array([1, 1]),  # does not spell its words
    }
    texts = {"u1": ["HI", "KAY"], "u2": ["KAY", "KAY"], "u3": ["HI"], "u4": ["HI"]}  # u4: no alignment
    counts, missed = count_pronunciations(_Aligner(), ali, texts)  # type: ignore[arg-type]
    assert counts == Counter({("HI", ("h", "ay")): 1, ("KAY", ("k", "ey")): 1, ("KAY", ("k", "ay")): 2})
    assert missed == 2


def test_probabilities_are_add_one_counts_over_the_words_largest() -> None:
    counts = Counter({("KAY", ("k", "ay")): 3})
    probs = pron_probs(LEXICON, counts)
    assert probs[("KAY", ("k", "ay"))] == 1.0
    assert probs[("KAY", ("k", "ey"))] == pytest.approx(1 / 4)
    assert probs[("HI", ("h", "ay"))] == 1.0  # never seen: every pronunciation keeps 1
    with pytest.raises(DataError, match="smoothing"):
        pron_probs(LEXICON, counts, smoothing=0.0)


def _word_entry_costs(fst: kaldifst.StdVectorFst, word_id: int) -> list[float]:
    """The costs of the arcs that output ``word_id`` (each pronunciation's first arc)."""
    costs = []
    for state in range(fst.num_states):
        for arc in kaldifst.ArcIterator(fst, state):
            if arc.olabel == word_id:
                costs.append(round(arc.weight.value, 6))
    return sorted(costs)


def test_l_carries_each_pronunciation_cost_on_its_first_arc(tmp_path: Path) -> None:
    probs = {("KAY", ("k", "ey")): 0.25}
    lang = prepare_lang(LEXICON, tmp_path / "pp", pron_probs=probs)
    plain = prepare_lang(LEXICON, tmp_path / "plain")
    kay = lang.words["KAY"]
    for name in ("L.fst", "L_disambig.fst"):
        with_probs = kaldifst.StdVectorFst.read(str(tmp_path / "pp" / name))
        without = kaldifst.StdVectorFst.read(str(tmp_path / "plain" / name))
        assert _word_entry_costs(with_probs, kay) == [0.0, round(math.log(4), 6)]
        assert _word_entry_costs(without, plain.words["KAY"]) == [0.0, 0.0]
    lexiconp = (tmp_path / "pp" / "lexiconp.txt").read_text().splitlines()
    assert "KAY 1 k ay" in lexiconp and "KAY 0.25 k ey" in lexiconp
    # Probabilities of 1 leave L as a lexicon without them, byte for byte.
    ones = prepare_lang(LEXICON, tmp_path / "ones", pron_probs={("KAY", ("k", "ay")): 1.0})
    assert ones.words == plain.words
    for name in ("L.fst", "L_disambig.fst", "words.txt", "phones.txt"):
        assert (tmp_path / "ones" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()


@pytest.mark.parametrize("bad", [0.0, 1.5, -0.1])
def test_a_probability_outside_zero_one_is_an_error_naming_the_word(tmp_path: Path, bad: float) -> None:
    with pytest.raises(DataError, match=r"'KAY' \(k ey\)"):
        prepare_lang(LEXICON, tmp_path / "bad", pron_probs={("KAY", ("k", "ey")): bad})
    assert not (tmp_path / "bad").exists()


def test_pron_counts_read_back_and_a_bad_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "pron_counts.txt"
    path.write_text("3 KAY k ay\n1 KAY k ey\n")
    assert read_pron_counts(path) == Counter({("KAY", ("k", "ay")): 3, ("KAY", ("k", "ey")): 1})
    path.write_text("3 KAY k ay\nKAY k ey\n")
    with pytest.raises(DataError, match=r"pron_counts.txt:2"):
        read_pron_counts(path)
