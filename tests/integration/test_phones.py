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


def test_an_open_vocabulary_joins_general_words_and_never_reads_a_test_split(tmp_path: Path) -> None:
    """Stage 3 with ``lm.general_words``: CMUdict words pronounceable in the corpus lexicon's
    phones join the lexicon and the LM; the test set's transcripts are never read (the
    same files come out when they are replaced by bytes no reader could take)."""
    import json

    lexicon = tmp_path / "lexicon.txt"
    phones = ["W ER D", "HH AH L OW", "W AH N", "T UW", "TH R IY", "F AO R", "F AY V"]
    lexicon.write_text(
        "HELLO HH AH0 L OW1\n" + "".join(f"WORD{i} {phones[i % len(phones)]}\n" for i in range(6))
    )
    args = ("tokenizer=phone", f"tokenizer.lexicon={lexicon}", "lm.general_words=3000")
    outputs = ("lexicon_open.txt", "lexicon.txt", "lm.arpa", "open_vocabulary.json")
    first = tiny_recipe(tmp_path, *args, stage=3, stop_stage=3, exp="exp_a")
    assert first.returncode == 0, first.stderr[-2000:]
    lang = tmp_path / "exp_a" / "lang"
    record = json.loads((lang / "open_vocabulary.json").read_text())
    assert 20 < record["new"] < 3000 and record["kept"] >= record["new"]
    # Dev holds only training words: the smallest mixture weight has the lowest perplexity.
    assert record["weight"] == 0.02
    lexicon_open = (lang / "lexicon_open.txt").read_text().splitlines()
    assert "WORLD W ER L D" in lexicon_open and "HELLO HH AH L OW" in lexicon_open
    used = {p for line in lexicon_open for p in line.split()[1:]}
    assert used <= {p for pron in phones for p in pron.split()} | {"HH", "AH", "L", "OW"}
    assert "\tWORLD\n" in (lang / "lm.arpa").read_text() or "\tWORLD\t" in (lang / "lm.arpa").read_text()
    assert any(line.startswith("WORLD ") for line in (lang / "lexicon.txt").read_text().splitlines())
    test_text = tmp_path / "data" / "test" / "text"
    test_text.write_bytes(b"\xff\xfe\x00 not text at all \xc3\x28\n")
    second = tiny_recipe(tmp_path, *args, stage=3, stop_stage=3, exp="exp_b")
    assert second.returncode == 0, second.stderr[-2000:]
    for name in outputs:
        assert (tmp_path / "exp_b" / "lang" / name).read_bytes() == (lang / name).read_bytes(), name
