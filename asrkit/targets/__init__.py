"""Training targets: tokenizers for CTC units (alignment targets join later).

Public API:
    - :class:`TokenizerConfig`, :func:`train_tokenizer`, :class:`Tokenizer` —
      sentencepiece char/unigram/bpe with the CTC blank at id 0, saved with
      ``units.txt`` and ``words.txt``.
"""

from asrkit.targets.tokenizer import BLANK, Tokenizer, TokenizerConfig, train_tokenizer

__all__ = ["BLANK", "Tokenizer", "TokenizerConfig", "train_tokenizer"]
