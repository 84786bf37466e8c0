"""Phone units from a pronunciation lexicon: encoding, decoding back to words, the decoding
lexicon with alternative pronunciations, and a recipe trained and decoded on phones."""

from __future__ import annotations

from pathlib import Path

import pytest

from asrkit.decoding.beam import lexicon_words, spell, write_lexicon
from asrkit.errors import ConfigError, DataError
from asrkit.targets import Tokenizer, TokenizerConfig, train_tokenizer
from asrkit.targets.phones import read_pronunciations

LEXICON = """A\tAH0
A\tEY1
CAT\tK AE1 T
TWO\tT UW1
TO\tT UW1
TOO\tT UW1
SAT\tS AE1 T
"""


@pytest.fixture
def lexicon(tmp_path: Path) -> Path:
    path = tmp_path / "lexicon.txt"
    path.write_text(LEXICON)
    return path


def _train(tmp_path: Path, lexicon: Path, texts: dict[str, str], **kw: object) -> Tokenizer:
    cfg = TokenizerConfig(kind="phone", lexicon=str(lexicon), **kw)  # type: ignore[arg-type]
    return train_tokenizer(texts, tmp_path / "tok", cfg)


def test_pronunciations_lose_stress_and_keep_alternatives(lexicon: Path) -> None:
    prons = read_pronunciations(lexicon)
    assert prons["A"] == [("AH",), ("EY",)] and prons["CAT"] == [("K", "AE", "T")]
    assert read_pronunciations(lexicon, keep_stress=True)["CAT"] == [("K", "AE1", "T")]
    sphinx = lexicon.with_name("an4.dic")  # CMU Sphinx: alternatives as WORD(2)
    sphinx.write_text("A                    AH\nA(2)                 EY\nAND  AE N D\n")
    assert read_pronunciations(sphinx) == {"A": [("AH",), ("EY",)], "AND": [("AE", "N", "D")]}


def test_a_transcript_is_encoded_as_phones_and_decoded_back_to_words(tmp_path: Path, lexicon: Path) -> None:
    tok = _train(tmp_path, lexicon, {"u1": "A CAT SAT", "u2": "TO A CAT", "u3": "TO"})
    assert tok.kind == "phone"
    assert tok.units() == ["<blank>", "\u2581", "<unk>", "AE", "AH", "EY", "K", "S", "T", "UW"]
    ids = tok.encode("A CAT")
    assert [tok.units()[i] for i in ids] == ["\u2581", "AH", "\u2581", "K", "AE", "T"]
    assert tok.decode(ids) == "A CAT"
    # Blanks and CTC-collapsed output decode the same way; TWO/TO/TOO share T UW and the
    # word most frequent in training wins; a group no word has is <unk>.
    assert tok.decode([0, *tok.encode("TWO SAT"), 0]) == "TO SAT"
    u = {unit: i for i, unit in enumerate(tok.units())}
    assert tok.decode([u["\u2581"], u["K"], u["UW"]]) == "<unk>"
    assert Tokenizer(tmp_path / "tok").num_tokens == 9  # reloaded from its directory
    # A word the lexicon lacks (a dev word) is the <unk> unit, as Kaldi's spoken noise.
    assert [tok.units()[i] for i in tok.encode("A DOG")] == ["\u2581", "AH", "\u2581", "<unk>"]
    assert tok.decode(tok.encode("A DOG")) == "A <unk>"


def test_the_decoding_lexicon_lists_every_pronunciation(tmp_path: Path, lexicon: Path) -> None:
    tok = _train(tmp_path, lexicon, {"u1": "A CAT"})
    assert spell(tok, "A") == [["AH", "\u2581"], ["EY", "\u2581"]]
    assert write_lexicon(tmp_path / "lex", ["A", "CAT", "<unk>"], tok) == 2
    assert (tmp_path / "lex").read_text() == "A AH \u2581\nA EY \u2581\nCAT K AE T \u2581\n"
    with pytest.raises(ConfigError, match="no pronunciation"):
        spell(tok, "DOG")


def test_extra_words_from_a_cmu_dictionary_drop_the_alternative_marks(tmp_path: Path) -> None:
    # lm.extra_words=etc/an4.dic: A(2) and TWENTIETH(3) are pronunciations, not words.
    dic = tmp_path / "an4.dic"
    dic.write_text("A AH\nA(2) EY\nTWENTIETH T W EH N IY AH TH\nTWENTIETH(3) T W EH N T IY AH TH\n\n")
    assert lexicon_words(dic) == {"A", "TWENTIETH"}


def test_training_words_missing_from_the_lexicon_are_named(tmp_path: Path, lexicon: Path) -> None:
    with pytest.raises(DataError, match=r"2 training word\(s\) have no pronunciation, first DOG, MAT"):
        _train(tmp_path, lexicon, {"u1": "A DOG", "u2": "MAT"})
    with pytest.raises(ConfigError, match="tokenizer.lexicon"):
        train_tokenizer({"u1": "A"}, tmp_path / "t2", TokenizerConfig(kind="phone"))
    bad = tmp_path / "bad.txt"
    bad.write_text("A AH0\nCAT\n")
    with pytest.raises(DataError, match=r"bad.txt:2: word 'CAT' has no phones"):
        _train(tmp_path, bad, {"u1": "A"})


def test_phones_that_differ_only_in_case_are_warned_about(tmp_path, caplog) -> None:
    """Seen in the field: a lowercase phone in a lexicon became a new phone silently."""
    import logging

    lexicon = tmp_path / "lexicon.txt"
    lexicon.write_text("CAT K AE T\nHAT HH ae T\nMAT M AE T\n")
    with caplog.at_level(logging.WARNING, logger="asrkit.targets.phones"):
        prons = read_pronunciations(lexicon)
    assert prons["HAT"] == [("HH", "ae", "T")]  # kept as written: SAMPA means such pairs
    (warning,) = [r.getMessage() for r in caplog.records]
    assert f"{lexicon}:2" in warning and "'ae'" in warning and "'AE'" in warning and "line 1" in warning
