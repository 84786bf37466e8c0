"""CTC beam search with a lexicon and a word n-gram LM (flashlight-text via torchaudio).

flashlight's lexicon decoder expects every word's spelling to *end* with the word
separator (its silence token) — a word is emitted when its last token is reached, and
only the separator may then repeat over frames. Sentencepiece puts its boundary piece
``▁`` *before* each word (``▁ H E L L O ▁ W O R L D``). So the lexicon spells a word as
its pieces without the leading ``▁`` followed by ``▁`` (``HELLO H E L L O ▁``): the
boundary that starts the next word ends this one, a leading ``▁`` is silence, and one
frame that emits only ``▁`` is appended to every utterance to close its last word.
(Spelling words as ``▁ H E L L O`` instead makes the decoder split repeated frames of a
word's last letter into extra one-letter words: measured on AN4 train_dev, 34
insertions against greedy's 5.) Units that merge the boundary into a piece (``▁HE`` in
unigram/bpe models) keep it. Without a lexicon the search runs over units alone (no
word LM) and the best unit sequence is detokenised.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from asrkit.data.io import atomic_write, note_read
from asrkit.errors import ConfigError, DataError
from asrkit.targets.phones import base_word
from asrkit.targets.tokenizer import BLANK, Tokenizer

#: The sentencepiece word-boundary piece, used as the decoder's word separator.
BOUNDARY = "\u2581"
UNK_WORD = "<unk>"


def spell(tokenizer: Tokenizer, word: str) -> list[list[str]]:
    """``word``'s spellings in the tokenizer's units as the lexicon lists them: without a
    leading stand-alone boundary piece, each ending with the boundary (a phone tokenizer
    gives one per pronunciation)."""
    spellings = []
    for pieces in tokenizer.spellings(word):
        if pieces and pieces[0] == BOUNDARY:
            pieces = pieces[1:]
        if not pieces or "<unk>" in pieces:
            raise ConfigError(
                f"word {word!r} cannot be spelled with the tokenizer's units "
                f"({pieces}); the lexicon needs words made of known characters"
            )
        spellings.append([*pieces, BOUNDARY])
    if not spellings:
        raise ConfigError(
            f"word {word!r} has no pronunciation in the tokenizer's lexicon "
            f"({tokenizer.model_dir}); add it to tokenizer.lexicon"
        )
    return spellings


def write_lexicon(path: str | Path, words: Iterable[str], tokenizer: Tokenizer) -> int:
    """Write a flashlight/Kaldi-style lexicon (``WORD u1 u2 ...`` per line, a word on one
    line per spelling); returns the number of words. ``<unk>`` and ``<s>``/``</s>`` are
    left out (the LM has them)."""
    kept = [w for w in sorted(set(words)) if w not in (UNK_WORD, "<s>", "</s>")]
    lines = [f"{w} {' '.join(units)}\n" for w in kept for units in spell(tokenizer, w)]
    atomic_write(path, "".join(lines))
    return len(kept)


def lexicon_words(path: str | Path) -> set[str]:
    """The words of a lexicon or word list: the first column of each non-empty line (a
    word is listed once per spelling; CMU Sphinx alternatives ``WORD(2)`` are ``WORD``)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(
            f"{path}: cannot read the word list ({err}); give a word list or a lexicon (WORD ... per line)"
        ) from None
    return {base_word(line.split()[0]) for line in lines if line.split()}


class BeamSearch:
    """Beam search over CTC log-probabilities ``(T', V)``.

    Args:
        tokenizer: the model's tokenizer (its units are the decoder's tokens).
        lexicon: a lexicon file, or None for lexicon-free search over units.
        lm: an ARPA (or KenLM binary) word LM used with the lexicon, or None.
        beam_size, beam_threshold: hypotheses kept, and the score window they must be in.
        lm_weight, word_score: LM scale and the score added per word (insertion penalty
            when negative).
        nbest: hypotheses :meth:`hypotheses` returns (the best first).
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        lexicon: str | Path | None,
        lm: str | Path | None,
        beam_size: int = 50,
        beam_threshold: float = 25.0,
        lm_weight: float = 0.5,
        word_score: float = 0.0,
        nbest: int = 1,
    ) -> None:
        from torchaudio.models.decoder import ctc_decoder

        if lm is not None and lexicon is None:
            raise ConfigError(
                "a word LM needs a lexicon; lexicon-free search (decode=beam) runs without an LM"
            )
        for path in (lexicon, lm):
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{path}: not found; run stage 3 (lang) first")
        if beam_size < 1:
            raise ConfigError(f"decode.beam_size={beam_size} must be >= 1")
        if nbest < 1:
            raise ConfigError(f"nbest={nbest} must be >= 1")
        self.tokenizer = tokenizer
        self.lexicon = lexicon
        units = tokenizer.units()
        if BOUNDARY not in units:
            raise ConfigError(
                f"the tokenizer has no word-boundary unit {BOUNDARY!r}; lexicon "
                "decoding needs sentencepiece's boundary piece"
            )
        self._boundary = units.index(BOUNDARY)
        for path in (lexicon, lm):
            if path is not None:
                note_read(path)  # read by flashlight's C++ decoder
        with _silenced():  # KenLM prints a loading banner and progress bar on stdout/stderr
            self._decoder = ctc_decoder(
                lexicon=None if lexicon is None else str(lexicon),
                tokens=tokenizer.units(),
                lm=None if lm is None else str(lm),
                nbest=nbest,
                beam_size=beam_size,
                beam_threshold=beam_threshold,
                lm_weight=lm_weight if lm is not None else 0.0,
                word_score=word_score,
                blank_token=BLANK,
                sil_token=BOUNDARY,
                unk_word=UNK_WORD,
                sil_score=0.0,
                log_add=False,
            )

    def __call__(self, log_probs: torch.Tensor) -> str:
        """The best transcript of one utterance's ``(T', V)`` CTC log-probabilities."""
        hyps = self.hypotheses(log_probs)
        return " ".join(hyps[0]) if hyps else ""

    def hypotheses(self, log_probs: torch.Tensor) -> list[list[str]]:
        """Up to ``nbest`` distinct transcripts (word lists) of one utterance's ``(T', V)``
        CTC log-probabilities, the best first (lexicon search leaves ``<unk>`` out)."""
        emissions = log_probs.detach().float().cpu()
        if self.lexicon is not None:  # one frame of boundary closes the last word
            close = torch.full((1, emissions.shape[1]), -1e4)
            close[0, self._boundary] = 0.0
            emissions = torch.cat([emissions, close])
        emissions = emissions.contiguous()[None]
        hyps = self._decoder(emissions, torch.tensor([emissions.shape[1]], dtype=torch.int32))[0]
        out: list[list[str]] = []
        for hyp in hyps:
            if self.lexicon is not None:
                words = [w for w in hyp.words if w != UNK_WORD]
            else:
                words = self.tokenizer.decode(int(t) for t in hyp.tokens).split()
            if words not in out:  # two unit paths can spell the same words
                out.append(words)
        return out


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """Send file descriptors 1 and 2 to /dev/null (C++ libraries write there directly)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)
