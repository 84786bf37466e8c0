"""Training targets: tokenizers for CTC units and Kaldi alignments for frame-level targets.

Public API:
    - :class:`TokenizerConfig`, :func:`train_tokenizer`, :class:`Tokenizer` —
      sentencepiece char/unigram/bpe with the CTC blank at id 0, saved with
      ``units.txt`` and ``words.txt``.
    - :func:`read_alignments` — int32 label vectors per utterance from a Kaldi
      rspecifier (``ark:``, ``scp:``, ``ark:gunzip -c ali.1.gz |``) or an alignment dir.
    - :func:`read_frame_counts` — feature frames per utterance from a data dir or a
      feature rspecifier (float, compressed or text matrices).
    - :func:`alignment_dir_settings` — an alignment dir's ``frame_subsampling_factor``
      and ``num_classes``.
    - :class:`AlignmentCheckConfig`, :func:`check_alignments`, :class:`AlignmentReport` —
      alignments matched to ``ceil(T / subsampling_factor)`` frames, small length
      differences fixed, every mismatch reported in one error.
"""

from asrkit.targets.alignments import (
    AlignmentCheckConfig,
    AlignmentReport,
    alignment_dir_settings,
    check_alignments,
    read_alignments,
    read_frame_counts,
)
from asrkit.targets.tokenizer import BLANK, Tokenizer, TokenizerConfig, train_tokenizer

__all__ = [
    "BLANK",
    "AlignmentCheckConfig",
    "AlignmentReport",
    "Tokenizer",
    "TokenizerConfig",
    "alignment_dir_settings",
    "check_alignments",
    "read_alignments",
    "read_frame_counts",
    "train_tokenizer",
]
