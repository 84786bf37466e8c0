"""Beam search with a lexicon and an n-gram LM; the lang stage; tuning on dev."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from asrkit.decoding.beam import BeamSearch, spell, write_lexicon
from asrkit.decoding.greedy import greedy_ctc
from asrkit.errors import ConfigError
from asrkit.lm.ngram import estimate_kneser_ney, write_arpa
from asrkit.scoring import score_texts
from asrkit.targets import Tokenizer, TokenizerConfig, train_tokenizer
from tests.helpers import ctc_emissions

TEXTS = {"a-1": "TWO THREE", "a-2": "ONE TWO", "b-1": "THREE ONE TWO", "b-2": "GO", "b-3": "NO GO"}


@pytest.fixture
def tokenizer(tmp_path: Path) -> Tokenizer:
    return train_tokenizer(TEXTS, tmp_path / "tok", TokenizerConfig(kind="char"))


def test_lexicon_spells_words_in_units(tmp_path: Path, tokenizer: Tokenizer) -> None:
    assert spell(tokenizer, "THREE") == [["T", "H", "R", "E", "E", "\u2581"]]
    count = write_lexicon(tmp_path / "lexicon.txt", ["TWO", "GO", "<unk>", "TWO"], tokenizer)
    assert count == 2
    assert (tmp_path / "lexicon.txt").read_text() == "GO G O \u2581\nTWO T W O \u2581\n"
    with pytest.raises(ConfigError, match="cannot be spelled"):
        spell(tokenizer, "ZEBRA")  # Z, B never seen by the tokenizer


def test_beam_with_lm_weight_0_is_never_worse_than_greedy(tmp_path: Path, tokenizer: Tokenizer) -> None:
    rng = np.random.default_rng(0)
    refs, greedy, beam, beam_lex = {}, {}, {}, {}
    search = BeamSearch(tokenizer, lexicon=None, lm=None, beam_size=200, beam_threshold=100.0)
    write_lexicon(tmp_path / "lexicon.txt", ["ONE", "TWO", "THREE", "GO", "NO"], tokenizer)
    write_arpa(estimate_kneser_ney([t.split() for t in TEXTS.values()], order=2), tmp_path / "lm.arpa")
    lexical = BeamSearch(
        tokenizer,
        lexicon=tmp_path / "lexicon.txt",
        lm=tmp_path / "lm.arpa",
        lm_weight=0.0,
        beam_size=200,
        beam_threshold=100.0,
    )
    for k in range(40):
        text = " ".join(rng.choice(["ONE", "TWO", "THREE", "GO", "NO"], size=int(rng.integers(1, 5))))
        lp = ctc_emissions(tokenizer, text, rng, noise=2.5)
        k = f"s-{k}"
        refs[k] = text.split()
        greedy[k] = tokenizer.decode(greedy_ctc(lp[None], torch.tensor([lp.shape[0]]))[0]).split()
        beam[k] = search(lp).split()
        beam_lex[k] = lexical(lp).split()
    g, b = score_texts(refs, greedy).words, score_texts(refs, beam).words
    lex = score_texts(refs, beam_lex).words
    assert g.errors > 0, "the fixture must be noisy enough for greedy to err"
    assert b.errors <= g.errors, (b.kaldi_line(), g.kaldi_line())
    assert lex.errors <= g.errors, (lex.kaldi_line(), g.kaldi_line())


def test_lm_fixes_what_the_acoustics_leave_ambiguous(tmp_path: Path, tokenizer: Tokenizer) -> None:
    # "TWO" vs "GO": the emissions are split between T W and G; the LM (trained on text where
    # only "NO GO" ends a sentence after NO) decides.
    write_lexicon(tmp_path / "lexicon.txt", {w for t in TEXTS.values() for w in t.split()}, tokenizer)
    write_arpa(estimate_kneser_ney([t.split() for t in TEXTS.values()] * 5, order=2), tmp_path / "lm.arpa")
    rng = np.random.default_rng(1)
    lp = ctc_emissions(tokenizer, "NO GO", rng, noise=0.0)
    plain = BeamSearch(tokenizer, lexicon=tmp_path / "lexicon.txt", lm=tmp_path / "lm.arpa", lm_weight=0.0)
    with_lm = BeamSearch(tokenizer, lexicon=tmp_path / "lexicon.txt", lm=tmp_path / "lm.arpa", lm_weight=2.0)
    assert plain(lp) == "NO GO" and with_lm(lp) == "NO GO"
    # Outputs are lexicon words only: an unknown spelling never comes out as <unk>.
    lp = ctc_emissions(tokenizer, "TWO OWT", rng, noise=0.0)
    assert "<unk>" not in with_lm(lp) and set(with_lm(lp).split()) <= set(" ".join(TEXTS.values()).split())
    with pytest.raises(ConfigError, match="needs a lexicon"):
        BeamSearch(tokenizer, lexicon=None, lm=tmp_path / "lm.arpa")
    with pytest.raises(ConfigError, match="not found"):
        BeamSearch(tokenizer, lexicon=tmp_path / "nope.txt", lm=None)


def test_lm_must_not_see_test_text() -> None:
    from asrkit.config import compose

    with pytest.raises(ConfigError, match="must not see dev or test"):
        compose(["lm.sets=[train,test]"])
    with pytest.raises(ConfigError, match="is a test set"):
        compose(["decode.tune_set=test"])


def test_repeated_frames_of_a_words_last_unit_are_one_word(tmp_path: Path, tokenizer: Tokenizer) -> None:
    """CTC emits a unit over several frames; the lexicon decoder must not split the
    frames of a word's last letter into extra one-letter words (``TWO O``)."""
    write_lexicon(tmp_path / "lexicon.txt", ["TWO", "O", "GO", "NO"], tokenizer)
    write_arpa(estimate_kneser_ney([["TWO", "O"], ["GO"], ["NO", "GO"]], order=2), tmp_path / "lm.arpa")
    units = tokenizer.units()
    frames = ["\u2581", "\u2581", "T", "W", "O", "O", "O", "\u2581", "G", "G", "O", "O"]
    lp = torch.full((len(frames), len(units)), -30.0)
    lp[torch.arange(len(frames)), torch.tensor([units.index(u) for u in frames])] = 0.0
    search = BeamSearch(tokenizer, lexicon=tmp_path / "lexicon.txt", lm=tmp_path / "lm.arpa", lm_weight=0.0)
    assert search(lp.log_softmax(-1)) == "TWO GO"
