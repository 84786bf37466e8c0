"""Transcript spelling: words that differ only in case or attached punctuation.

To a word LM, a lexicon and the scorer, ``erase``, ``ERASE`` and ``ERASE,`` are three words;
a corpus that mixes them (transcripts from several annotators, or with punctuation left in)
loses LM counts and scores a correct ``ERASE`` against ``erase`` as an error.
:func:`spelling_variants` finds such groups, and ``data.text_normalize`` (applied by stage 1
to every set's ``text``, so training, the LM and scoring all see one spelling) merges them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping

#: ``data.text_normalize`` values.
NORMALIZE = ("none", "upper", "lower", "upper_nopunct", "lower_nopunct")
# Punctuation at either end of a word; apostrophes and hyphens inside words stay (DON'T, X-RAY).
_EDGE_PUNCT = re.compile(r"^[^\w']+|[^\w']+$", re.UNICODE)


def _is_tag(word: str) -> bool:
    """Corpus tags such as ``<unk>``, ``[noise]``, ``[laughter]``: kept as they are."""
    return len(word) > 2 and ((word[0], word[-1]) in (("<", ">"), ("[", "]")))


def _strip(word: str) -> str:
    return word if _is_tag(word) else _EDGE_PUNCT.sub("", word)


def spelling_variants(texts: Iterable[str]) -> dict[str, list[str]]:
    """Groups of two or more spellings of one word (case folded, edge punctuation
    stripped), by that key, each group sorted; empty when every word has one spelling."""
    groups: dict[str, set[str]] = {}
    for text in texts:
        for word in text.split():
            key = unicodedata.normalize("NFKC", _strip(word)).casefold()
            if key:
                groups.setdefault(key, set()).add(word)
    return {key: sorted(words) for key, words in sorted(groups.items()) if len(words) > 1}


def describe_variants(variants: Mapping[str, list[str]], *, show: int = 3) -> str:
    shown = "; ".join(" / ".join(words) for words in list(variants.values())[:show])
    more = f" and {len(variants) - show} more" if len(variants) > show else ""
    return (
        f"{len(variants)} word(s) are spelled several ways that differ only in case or "
        f"punctuation ({shown}{more})"
    )


def normalize_text(text: str, how: str) -> str:
    """``text`` with its words normalized as ``how`` (one of :data:`NORMALIZE`) says;
    words that were only punctuation are dropped by the ``_nopunct`` variants. Corpus tags
    (``<unk>``, ``[noise]``) are left as they are. The lexicon is not rewritten: with
    ``tokenizer=phone`` or the hybrid pipeline, choose the case the lexicon uses."""
    if how == "none":
        return text
    words = text.split()
    if how.endswith("_nopunct"):
        words = [w for w in (_strip(w) for w in words) if w]
    cased = (w if _is_tag(w) else w.upper() if how.startswith("upper") else w.lower() for w in words)
    return " ".join(cased)
