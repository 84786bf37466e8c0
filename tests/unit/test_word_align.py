"""Word times for CTM output: phones split into the hypothesis's words, and the words
placed by those times when scoring against an STM."""

from __future__ import annotations

from pathlib import Path

import pytest

from asrkit.decoding.word_align import read_pronunciations, split_words
from asrkit.errors import DataError
from asrkit.scoring.nist import words_from_text

PRONS = {
    "a": [("ah",), ("ey",)],
    "the": [("dh", "ah"), ("dh", "iy")],
    "cat": [("k", "ae", "t")],
    "<unk>": [("spn",)],
}
SIL = frozenset({"sil", "spn_sil"})


def _phones(*names: str) -> list[tuple[str, int, int]]:
    """Phones of 3 frames each, back to back."""
    return [(name, 3 * k, 3 * k + 2) for k, name in enumerate(names)]


def test_phones_are_split_into_the_words_with_silence_left_out() -> None:
    phones = _phones("sil", "dh", "iy", "sil", "k", "ae", "t", "sil")
    assert split_words(["the", "cat"], phones, PRONS, silence=SIL) == [("the", 3, 8), ("cat", 12, 20)]


def test_a_word_takes_the_pronunciation_its_phones_spell() -> None:
    phones = _phones("ey", "dh", "ah", "ah")
    assert split_words(["a", "the", "a"], phones, PRONS, silence=SIL) == [
        ("a", 0, 2),
        ("the", 3, 8),
        ("a", 9, 11),
    ]


def test_an_unknown_word_is_spelled_as_the_oov_word() -> None:
    phones = _phones("spn", "k", "ae", "t")
    assert split_words(["zyx", "cat"], phones, PRONS, silence=SIL, oov="<unk>") == [
        ("zyx", 0, 2),
        ("cat", 3, 11),
    ]


@pytest.mark.parametrize(
    "words, names",
    [
        (["the", "cat"], ("dh", "ah", "k", "ae")),  # the last word is cut short
        (["cat"], ("k", "ae", "t", "ah")),  # a phone left over that is not silence
        (["cat", "the"], ("dh", "ah", "k", "ae", "t")),  # the words in another order
        (["dog"], ("d", "ao", "g")),  # not in the lexicon, no oov word
    ],
)
def test_phones_that_do_not_spell_the_words_give_none(words: list[str], names: tuple[str, ...]) -> None:
    assert split_words(words, _phones(*names), PRONS, silence=SIL) is None


def test_pronunciations_are_read_in_file_order_and_a_bad_line_is_named(tmp_path: Path) -> None:
    lexicon = tmp_path / "lexicon.txt"
    lexicon.write_text("the dh ah\nthe dh iy\ncat k ae t\n\n")
    assert read_pronunciations(lexicon) == {"the": [("dh", "ah"), ("dh", "iy")], "cat": [("k", "ae", "t")]}
    lexicon.write_text("the dh ah\ncat\n")
    with pytest.raises(DataError, match=r"lexicon.txt:2: word 'cat' has no phones"):
        read_pronunciations(lexicon)


def _segmented(tmp_path: Path) -> tuple[Path, Path]:
    text = tmp_path / "text"
    text.write_text("u1 the cat\nu2 a\n")
    segments = tmp_path / "segments"
    segments.write_text("u1 conv 10.0 14.0\nu2 conv 20.0 21.0\n")
    return text, segments


def test_timed_words_are_placed_from_their_segments_start(tmp_path: Path) -> None:
    text, segments = _segmented(tmp_path)
    words = words_from_text(text, segments, times={"u1": [("the", 0.5, 0.3), ("cat", 2.9, 0.6)]})
    placed = [(w.file, w.channel, round(w.start, 2), round(w.duration, 2), w.text) for w in words]
    assert placed == [
        ("conv", "1", 10.5, 0.3, "the"),
        ("conv", "1", 12.9, 0.6, "cat"),
        # u2 has no times: its word spread over its segment, as before.
        ("conv", "1", 20.0, 1.0, "a"),
    ]


def test_times_that_do_not_spell_the_hypothesis_are_not_used(tmp_path: Path) -> None:
    text, segments = _segmented(tmp_path)
    words = words_from_text(text, segments, times={"u1": [("cat", 0.5, 0.3)], "u2": None})
    assert [(round(w.start, 2), w.text) for w in words] == [(10.0, "the"), (12.0, "cat"), (20.0, "a")]
