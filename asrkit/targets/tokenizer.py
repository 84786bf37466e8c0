"""Sentencepiece tokenizers (char, unigram, bpe) for CTC output units.

Token ids used by the models are sentencepiece ids shifted by one: id 0 is the
CTC blank. A trained tokenizer is a directory holding ``sp.model``,
``units.txt`` (Kaldi-style ``unit id`` lines, ``<blank> 0`` first) and
``words.txt`` (the training vocabulary, one word per line, sorted), so a
Kaldi user can read the output inventory without sentencepiece.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from asrkit.data.io import atomic_write
from asrkit.errors import ConfigError, DataError

log = logging.getLogger(__name__)

BLANK = "<blank>"
KINDS = ("char", "unigram", "bpe")


@dataclass
class TokenizerConfig:
    """Settings of the ``tokenizer`` config group.

    Attributes:
        kind: ``char``, ``unigram`` or ``bpe`` (sentencepiece model types).
        vocab_size: pieces for unigram/bpe (ignored for char, which takes every
            character of the training text).
        character_coverage: fraction of characters the model must cover.
    """

    kind: str = "char"
    vocab_size: int = 100
    character_coverage: float = 1.0

    def check(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"tokenizer.kind={self.kind!r} is unknown; choose one of {list(KINDS)}")
        if self.kind != "char" and self.vocab_size < 4:
            raise ConfigError(f"tokenizer.vocab_size={self.vocab_size} is too small; use at least 4")


class Tokenizer:
    """A trained sentencepiece model with the CTC blank at id 0.

    Args:
        model_dir: a directory written by :func:`train_tokenizer`.
    """

    def __init__(self, model_dir: str | Path) -> None:
        self.model_dir = Path(model_dir)
        path = self.model_dir / "sp.model"
        if not path.is_file():
            raise DataError(f"{path}: tokenizer model not found; run the tokenizer stage first")
        self._sp = spm.SentencePieceProcessor(model_file=str(path))

    @property
    def num_tokens(self) -> int:
        """Output units, not counting the blank."""
        return self._sp.get_piece_size()

    def units(self) -> list[str]:
        """Unit strings by model id (index 0 is the blank)."""
        return [BLANK, *(self._sp.id_to_piece(i) for i in range(self.num_tokens))]

    def encode(self, text: str) -> list[int]:
        """Model ids (1-based; 0 is blank) of a transcript."""
        return [i + 1 for i in self._sp.encode(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """Transcript of model ids; blanks (0) are skipped."""
        text = self._sp.decode([int(i) - 1 for i in ids if int(i) > 0])
        return " ".join(text.split())  # one space between words, as in Kaldi text files


def train_tokenizer(texts: dict[str, str], out_dir: str | Path, cfg: TokenizerConfig, *,
                    seed: int = 1) -> Tokenizer:
    """Train a sentencepiece model on ``texts`` (utterance id -> transcript).

    Writes ``sp.model``, ``sp.vocab``, ``units.txt`` and ``words.txt`` into
    ``out_dir``; files appear only when training succeeded.

    Raises:
        ConfigError: bad settings, or a vocabulary size the text cannot support.
    """
    cfg.check()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".sp.") as tmp:
        corpus = Path(tmp) / "text"
        corpus.write_text("".join(f"{line}\n" for line in texts.values()), encoding="utf-8")
        options = dict(
            input=str(corpus), model_prefix=str(Path(tmp) / "sp"), model_type=cfg.kind,
            character_coverage=cfg.character_coverage, bos_id=-1, eos_id=-1, unk_id=0,
            # Deterministic: no sampling or shuffling of the input, one thread.
            input_sentence_size=0, shuffle_input_sentence=False, num_threads=1,
            minloglevel=2, unk_surface=" <unk> ",
        )
        if cfg.kind != "char":
            options["vocab_size"] = cfg.vocab_size
            # Let a vocab_size above what the text supports shrink to what it supports.
            options["hard_vocab_limit"] = False
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                spm.SentencePieceTrainer.train(**options)
        except RuntimeError as err:
            raise ConfigError(f"tokenizer training failed: {' '.join(str(err).split())}; "
                              "change tokenizer.vocab_size or tokenizer.kind") from None
        for name in ("sp.model", "sp.vocab"):
            os.replace(Path(tmp) / name, out_dir / name)
    tokenizer = Tokenizer(out_dir)
    atomic_write(out_dir / "units.txt",
                 "".join(f"{unit} {i}\n" for i, unit in enumerate(tokenizer.units())))
    words = sorted({w for line in texts.values() for w in line.split()})
    atomic_write(out_dir / "words.txt", "".join(f"{w}\n" for w in words))
    log.info("tokenizer (%s): %d units + blank, %d training words", cfg.kind,
             tokenizer.num_tokens, len(words))
    return tokenizer
