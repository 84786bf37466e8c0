"""A phone-unit model trained and decoded through the recipe stages.

The in-process tests of the same code are in :mod:`tests.unit.test_phones`.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import tiny_recipe


def test_a_phone_model_trains_and_decodes_with_the_lexicon_and_lm(tmp_path: Path) -> None:
    lexicon = tmp_path / "lexicon.txt"
    # make_data_dir's transcripts are "WORD<i> HELLO"; spell the words with a few phones.
    phones = ["W ER D", "HH AH L OW", "W AH N", "T UW", "TH R IY", "F AO R", "F AY V"]
    lexicon.write_text(
        "HELLO HH AH0 L OW1\nHELLO HH EH0 L OW1\n"
        + "".join(f"WORD{i} {phones[i % len(phones)]} {phones[(i + 2) % len(phones)]}\n" for i in range(6))
    )
    result = tiny_recipe(
        tmp_path, "tokenizer=phone", f"tokenizer.lexicon={lexicon}", f"lm.extra_words={lexicon}"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    exp = tmp_path / "exp"
    assert (exp / "tokenizer" / "lexicon.txt").is_file()
    assert "HELLO HH AH L OW \u2581" in (exp / "lang" / "lexicon.txt").read_text()
    for folder in ("decode_test", "decode_beam_lm_test"):
        assert (exp / folder / "scoring" / "wer").read_text().startswith("%WER")
