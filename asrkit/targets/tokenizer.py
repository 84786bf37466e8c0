"""Tokenizers for CTC output units: sentencepiece (char, unigram, bpe) or lexicon phones.

Token ids used by the models are sentencepiece ids shifted by one: id 0 is the
CTC blank. A trained tokenizer is a directory holding ``sp.model``,
``units.txt`` (Kaldi-style ``unit id`` lines, ``<blank> 0`` first) and
``words.txt`` (the training vocabulary, one word per line, sorted), so a
Kaldi user can read the output inventory without sentencepiece. A phone tokenizer's
directory holds ``lexicon.txt`` instead of ``sp.model`` (:mod:`asrkit.targets.phones`).
"""

from __future__ import annotations

import contextlib
import hashlib
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
from asrkit.targets.phones import LEXICON, PhoneUnits, train_phone_units

log = logging.getLogger(__name__)

BLANK = "<blank>"
KINDS = ("char", "unigram", "bpe", "phone")


@dataclass
class TokenizerConfig:
    """Settings of the ``tokenizer`` config group.

    Attributes:
        kind: ``char``, ``unigram`` or ``bpe`` (sentencepiece model types), or ``phone``
            (the phones of ``lexicon``).
        vocab_size: pieces for unigram/bpe (ignored for char, which takes every
            character of the training text).
        character_coverage: fraction of characters the model must cover.
        lexicon: for ``phone``: a Kaldi/CMU lexicon (``WORD p1 p2 ...``) covering the
            training words; its words are also the ones the decoder can spell.
        keep_stress: for ``phone``: keep CMU stress digits (``AH0`` and ``AH1`` differ).
    """

    kind: str = "char"
    vocab_size: int = 100
    character_coverage: float = 1.0
    lexicon: str = ""
    keep_stress: bool = False

    def check(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"tokenizer.kind={self.kind!r} is unknown; choose one of {list(KINDS)}")
        if self.kind == "phone" and not self.lexicon:
            raise ConfigError(
                "tokenizer=phone needs tokenizer.lexicon=/path/to/lexicon.txt (WORD phone phone ... per line)"
            )
        if self.kind in ("unigram", "bpe") and self.vocab_size < 4:
            raise ConfigError(f"tokenizer.vocab_size={self.vocab_size} is too small; use at least 4")


class Tokenizer:
    """A trained tokenizer with the CTC blank at id 0: a sentencepiece model, or the phone
    units of a lexicon (:class:`~asrkit.targets.phones.PhoneUnits`).

    Args:
        model_dir: a directory written by :func:`train_tokenizer`.
    """

    def __init__(self, model_dir: str | Path) -> None:
        self.model_dir = Path(model_dir)
        self._phones: PhoneUnits | None = None
        if (self.model_dir / LEXICON).is_file():
            self._phones = PhoneUnits(self.model_dir)
            return
        path = self.model_dir / "sp.model"
        if not path.is_file():
            raise DataError(f"{path}: tokenizer model not found; run the tokenizer stage first")
        # Read here rather than by sentencepiece's C++: `asrkit export` sees what Python opens.
        self._sp = spm.SentencePieceProcessor(model_proto=path.read_bytes())

    @property
    def kind(self) -> str:
        """``phone`` or ``sentencepiece``."""
        return "sentencepiece" if self._phones is None else "phone"

    @property
    def num_tokens(self) -> int:
        """Output units, not counting the blank."""
        if self._phones is not None:
            return self._phones.num_tokens
        return self._sp.get_piece_size()

    def signature(self) -> dict[str, object]:
        """What a model trained with this tokenizer records about its output units: the
        kind, their number and a digest of the unit strings in id order."""
        digest = hashlib.sha1("\n".join(self.units()).encode("utf-8")).hexdigest()
        return {"kind": self.kind, "num_tokens": self.num_tokens, "units_sha1": digest}

    def check_model(self, meta: dict, num_tokens: int, *, model: str | Path) -> None:
        """Refuse a model whose output units are not this tokenizer's (a model copied in
        from an experiment with other units would decode to wrong words, or fail).

        Args:
            meta: the model bundle's ``meta`` (``units``: :meth:`signature` at training).
            num_tokens: the model's CTC outputs, not counting the blank.
            model: the bundle's path, for the message.

        Raises:
            DataError: the units differ.
        """
        mine = self.signature()
        theirs = meta.get("units")
        if isinstance(theirs, dict) and "units_sha1" in theirs:
            same = theirs.get("units_sha1") == mine["units_sha1"]
            what = f"{theirs.get('num_tokens', '?')} {theirs.get('kind', '?')} units"
        else:  # a bundle from before units were recorded: their number is all there is
            same = num_tokens == self.num_tokens
            what = f"{num_tokens} units"
        if not same or num_tokens != self.num_tokens:
            raise DataError(
                f"{model}: the model was trained on {what}, but {self.model_dir} holds "
                f"{self.num_tokens} {self.kind} units; decode it in the experiment that trained it "
                "(or copy that experiment's tokenizer/ here)"
            )

    def units(self) -> list[str]:
        """Unit strings by model id (index 0 is the blank)."""
        if self._phones is not None:
            return self._phones.units()
        return [BLANK, *(self._sp.id_to_piece(i) for i in range(self.num_tokens))]

    def encode(self, text: str) -> list[int]:
        """Model ids (1-based; 0 is blank) of a transcript."""
        if self._phones is not None:
            return self._phones.encode(text)
        return [i + 1 for i in self._sp.encode(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """Transcript of model ids; blanks (0) are skipped."""
        if self._phones is not None:
            return self._phones.decode(ids)
        text = self._sp.decode([int(i) - 1 for i in ids if int(i) > 0])
        return " ".join(text.split())  # one space between words, as in Kaldi text files

    def spellings(self, word: str) -> list[list[str]]:
        """``word`` in model units: every pronunciation of a phone tokenizer (none when the
        lexicon lacks the word), or the one sentencepiece segmentation."""
        if self._phones is not None:
            return self._phones.spellings(word)
        units = self.units()
        return [[units[i] for i in self.encode(word)]]


def train_tokenizer(
    texts: dict[str, str], out_dir: str | Path, cfg: TokenizerConfig, *, seed: int = 1
) -> Tokenizer:
    """Train a sentencepiece model on ``texts`` (utterance id -> transcript).

    Writes ``sp.model``, ``sp.vocab``, ``units.txt`` and ``words.txt`` into
    ``out_dir``; files appear only when training succeeded.

    Raises:
        ConfigError: bad settings, or a vocabulary size the text cannot support.
    """
    cfg.check()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.kind == "phone":
        for stale in ("sp.model", "sp.vocab"):
            (out_dir / stale).unlink(missing_ok=True)
        train_phone_units(texts, out_dir, lexicon=cfg.lexicon, keep_stress=cfg.keep_stress)
        tokenizer = Tokenizer(out_dir)
        log.info(
            "tokenizer (phone): %d units + blank from %s, %d training words",
            tokenizer.num_tokens,
            cfg.lexicon,
            len({w for t in texts.values() for w in t.split()}),
        )
        return tokenizer
    (out_dir / LEXICON).unlink(missing_ok=True)  # a phone tokenizer's, replaced
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".sp.") as tmp:
        corpus = Path(tmp) / "text"
        corpus.write_text("".join(f"{line}\n" for line in texts.values()), encoding="utf-8")
        options = dict(
            input=str(corpus),
            model_prefix=str(Path(tmp) / "sp"),
            model_type=cfg.kind,
            character_coverage=cfg.character_coverage,
            bos_id=-1,
            eos_id=-1,
            unk_id=0,
            # Deterministic: no sampling or shuffling of the input, one thread.
            input_sentence_size=0,
            shuffle_input_sentence=False,
            num_threads=1,
            minloglevel=2,
            unk_surface=" <unk> ",
        )
        if cfg.kind != "char":
            options["vocab_size"] = cfg.vocab_size
            # Let a vocab_size above what the text supports shrink to what it supports.
            options["hard_vocab_limit"] = False
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                spm.SentencePieceTrainer.train(**options)  # type: ignore[arg-type]
        except RuntimeError as err:
            raise ConfigError(
                f"tokenizer training failed: {' '.join(str(err).split())}; "
                "change tokenizer.vocab_size or tokenizer.kind"
            ) from None
        for name in ("sp.model", "sp.vocab"):
            os.replace(Path(tmp) / name, out_dir / name)
    tokenizer = Tokenizer(out_dir)
    atomic_write(out_dir / "units.txt", "".join(f"{unit} {i}\n" for i, unit in enumerate(tokenizer.units())))
    words = sorted({w for line in texts.values() for w in line.split()})
    atomic_write(out_dir / "words.txt", "".join(f"{w}\n" for w in words))
    log.info(
        "tokenizer (%s): %d units + blank, %d training words", cfg.kind, tokenizer.num_tokens, len(words)
    )
    return tokenizer
