"""Language models for decoding.

Public API:
    - :func:`estimate_kneser_ney` — interpolated modified Kneser-Ney word n-gram model.
    - :func:`write_arpa`, :func:`read_arpa`, :class:`NGramLM` — ARPA files and queries.
"""

from asrkit.lm.ngram import NGramLM, estimate_kneser_ney, read_arpa, write_arpa

__all__ = ["NGramLM", "estimate_kneser_ney", "read_arpa", "write_arpa"]
