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
        general_words: an open vocabulary: the N most frequent English words
            (:mod:`asrkit.lm.vocab`; 0: off) join the lexicon, with CMUdict pronunciations in
            the corpus lexicon's phones when there is one (``lang/lexicon_open.txt``, which
            the phone tokenizer and the GMM stage then read), and the LM, as a unigram
            mixed into it.
        general_weights: the mixture weights tried; the one with the lowest dev
            perplexity is kept.
    """

    order: int = 3
    discounts: list[list[float]] = field(default_factory=list)
    sets: list[str] = field(default_factory=list)
    extra_text: str = ""
    extra_words: str = ""
    general_words: int = 0
    general_weights: list[float] = field(default_factory=lambda: [0.02, 0.05, 0.1, 0.2, 0.3])

    def check(self) -> None:
        if self.order < 2:
            raise ConfigError(
                f"lm.order={self.order}: the decoder's KenLM refuses unigram ARPA files; use lm.order >= 2"
            )
        if self.general_words < 0:
            raise ConfigError(f"lm.general_words={self.general_words}: a count of words, 0 for none")
        if self.general_words and (
            not self.general_weights or not all(0 < w < 1 for w in self.general_weights)
        ):
            raise ConfigError(f"lm.general_weights={self.general_weights}: one or more weights in (0, 1)")
        if self.discounts and (len(self.discounts) != self.order or any(len(d) != 3 for d in self.discounts)):
            raise ConfigError(
                f"lm.discounts needs {self.order} entries of [D1, D2, D3] "
                f"(one per order), got {self.discounts}"
            )
