"""Settings of the ``lm`` key: the word n-gram language model of the ``lang`` stage."""

from __future__ import annotations

from dataclasses import dataclass, field

from asrkit.errors import ConfigError


@dataclass
class LMConfig:
    """Settings of the ``lm`` key.

    Attributes:
        order: n-gram order.
        discounts: per order ``[D1, D2, D3]`` Kneser-Ney discounts; empty = estimated
            from the counts (KenLM's fallback ``0.5, 1, 1.5`` where they cannot be).
        sets: data dirs whose transcripts train the LM (empty = the training set). The
            recipe's dev and test sets are refused: their text must never reach the LM.
        extra_text: optional text file (one sentence per line, no ids) added to the LM data.
        extra_words: optional file whose first column lists more words the decoder may
            output (a word list, or a pronunciation lexicon such as a corpus's CMU-style
            dictionary): words absent from the LM text are scored with its ``<unk>``
            probability. Its words must be spellable in the tokenizer's units (with
            ``tokenizer=phone``, in its lexicon).
    """

    order: int = 3
    discounts: list[list[float]] = field(default_factory=list)
    sets: list[str] = field(default_factory=list)
    extra_text: str = ""
    extra_words: str = ""

    def check(self) -> None:
        if self.order < 2:
            raise ConfigError(
                f"lm.order={self.order}: the decoder's KenLM refuses unigram ARPA files; use lm.order >= 2"
            )
        if self.discounts and (len(self.discounts) != self.order or any(len(d) != 3 for d in self.discounts)):
            raise ConfigError(
                f"lm.discounts needs {self.order} entries of [D1, D2, D3] "
                f"(one per order), got {self.discounts}"
            )
