"""Scoring: WER/CER of Kaldi text files, sclite-compatible.

Public API:
    - :func:`align_words` — weighted edit-distance alignment (``sclite`` weights
      4/3/3 with sclite's tie-breaking, or unit-cost ``levenshtein``).
    - :func:`read_text`, :func:`score_texts`, :func:`score_files`,
      :func:`write_scoring_dir`, :func:`summary`; :class:`ErrorCounts`,
      :class:`ScoreResult`.
    - :func:`bootstrap_wer`, :func:`bootstrap_counts` — a WER's confidence interval by
      resampling utterances (:class:`BootstrapInterval`).
    - :func:`score_nist_files` (:mod:`.nist`) — STM references, CTM hypotheses and a GLM
      (:mod:`.glm`, csrfilt's rules), scored as NIST's ``hubscr.pl -h hub5``.
"""

from asrkit.scoring.align import align_words
from asrkit.scoring.bootstrap import BootstrapInterval, bootstrap_counts, bootstrap_wer
from asrkit.scoring.nist import score_nist_files
from asrkit.scoring.wer import (
    ErrorCounts,
    ScoreResult,
    read_text,
    score_files,
    score_texts,
    summary,
    write_scoring_dir,
)

__all__ = [
    "BootstrapInterval",
    "ErrorCounts",
    "ScoreResult",
    "align_words",
    "bootstrap_counts",
    "bootstrap_wer",
    "read_text",
    "score_files",
    "score_nist_files",
    "score_texts",
    "summary",
    "write_scoring_dir",
]
