"""The questions a tree may ask, like Kaldi's ``cluster-phones`` + ``compile-questions``, and
the roots it grows from (Kaldi's ``roots.txt``).

Public API:
    - :class:`Questions` — the phone sets and pdf-class sets a tree may ask about.
    - :func:`make_questions` — :func:`cluster_phones` (top-down 2-means clustering of the
      per-phone stats), extra sets and :func:`pdf_class_questions`.
    - :func:`read_phone_sets` — Kaldi's ``sets.int`` / ``extra_questions.int``.
    - :class:`Root`, :func:`read_roots` — Kaldi's ``roots.int``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asrkit.errors import ConfigError, DataError
from asrkit.gmm.tree.stats import _LOG_2PI, DEFAULT_VAR_FLOOR, TreeStats, _loglik, _mean_var

#: The package's logger, as when the tree was one module.
log = logging.getLogger(__package__)


# ---------------------------------------------------------------------------------------------
# Questions (cluster-phones + compile-questions)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Questions:
    """The yes-sets a tree may ask about (Kaldi's compiled ``questions.qst``).

    Attributes:
        phone_sets: phone sets asked about every context position ``0..N-1`` (the central
            phone's included: it separates the phones of a shared root).
        pdf_class_sets: pdf-class sets asked about key :data:`PDF_CLASS`.

    Sets are stored sorted, duplicates and empty sets dropped, in first-seen order.
    """

    phone_sets: tuple[tuple[int, ...], ...]
    pdf_class_sets: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        for name in ("phone_sets", "pdf_class_sets"):
            sets = [tuple(sorted({int(v) for v in s})) for s in getattr(self, name)]
            object.__setattr__(self, name, tuple(dict.fromkeys(s for s in sets if s)))
        bad = sorted({p for s in self.phone_sets for p in s if p <= 0})
        if bad or any(c < 0 for s in self.pdf_class_sets for c in s):
            raise ConfigError(
                f"questions: phones must be > 0 (got {bad}) and pdf-classes >= 0; "
                "0 is reserved for 'no phone' at utterance edges"
            )


def pdf_class_questions(num_pdf_classes: int) -> tuple[tuple[int, ...], ...]:
    """Kaldi's pdf-class questions for HMMs of up to ``num_pdf_classes`` pdf-classes:
    ``{0}, {0, 1}, ..., {0..num_pdf_classes-2}``."""
    return tuple(tuple(range(i + 1)) for i in range(num_pdf_classes - 1))


def _two_means(counts: np.ndarray, sums: np.ndarray, sumsqs: np.ndarray, var_floor: float) -> np.ndarray:
    """Split ``K >= 2`` items (Gaussian stats ``(K,)``, ``(K, D)``, ``(K, D)``) into two
    clusters; returns ``(K,)`` bool, True for the first.

    Deterministic: the best likelihood cut along the items' principal direction, then k-means
    steps (each item to the Gaussian that scores its frames best) while both clusters stay
    non-empty and the assignment changes.
    """
    num = len(counts)
    if num == 2:
        return np.array([True, False])
    means = sums / counts[:, None]
    centre = (counts[:, None] * means).sum(0) / counts.sum()
    weighted = (means - centre) * np.sqrt(counts)[:, None]
    direction = np.linalg.svd(weighted, full_matrices=False)[2][0]
    order = np.argsort((means - centre) @ direction, kind="stable")
    c_cum, s_cum, q_cum = (np.cumsum(a[order], axis=0)[:-1] for a in (counts, sums, sumsqs))
    totals = (counts.sum(), sums.sum(0), sumsqs.sum(0))
    cut_ll = _loglik(c_cum, s_cum, q_cum, var_floor) + _loglik(
        totals[0] - c_cum, totals[1] - s_cum, totals[2] - q_cum, var_floor
    )
    assign = np.zeros(num, dtype=bool)
    assign[order[: int(np.argmax(cut_ll)) + 1]] = True
    for _ in range(50):
        scores = []
        for side in (assign, ~assign):
            mean, var = _mean_var(counts[side].sum(), sums[side].sum(0), sumsqs[side].sum(0), var_floor)
            # sum_t log N(x_t; mean, var) from each item's stats.
            quad = (sumsqs - 2.0 * mean * sums + counts[:, None] * mean * mean) / var
            scores.append(-0.5 * (counts[:, None] * (np.log(var) + _LOG_2PI) + quad).sum(1))
        new = scores[0] >= scores[1]
        if new.all() or not new.any() or (new == assign).all():
            break
        assign = new
    return assign


def cluster_phones(
    stats: TreeStats,
    phone_sets: Sequence[Sequence[int]] | None = None,
    *,
    pdf_classes: Sequence[int] = (1,),
    var_floor: float = DEFAULT_VAR_FLOOR,
) -> list[tuple[int, ...]]:
    """Phone-set questions by top-down 2-means clustering, like Kaldi's ``cluster-phones``.

    Each set of ``phone_sets`` (Kaldi's ``phones/sets.int``: phones that stay together, e.g.
    the word-position variants of one phone) is one item with the stats pooled over events whose
    central phone is in it and whose pdf-class is in ``pdf_classes`` (Kaldi: the middle state).
    Items are split in two recursively down to single items; every node's phones become a
    question, the root's too (it separates a real neighbour from the utterance edge).

    Args:
        stats: tree stats.
        phone_sets: the items; default one per central phone seen in ``stats``.
        pdf_classes: pdf-classes whose stats describe a phone. An item without stats for them is
            described by all its pdf-classes; an item without any stats becomes its own
            question without taking part in the clustering.
        var_floor: lower bound on every variance.

    Returns:
        The questions, in depth-first order (root first).
    """
    central = stats.phones[:, stats.central_position]
    if phone_sets is None:
        phone_sets = [(int(p),) for p in np.unique(central)]
    items = [tuple(sorted({int(p) for p in s})) for s in phone_sets if len(s)]
    pooled = np.zeros(len(items)), np.zeros((len(items), stats.dim)), np.zeros((len(items), stats.dim))
    in_classes = np.isin(stats.pdf_classes, list(pdf_classes))
    for i, item in enumerate(items):
        mine = np.isin(central, item)
        chosen = mine & in_classes
        if stats.counts[chosen].sum() <= 0:
            chosen = mine
        pooled[0][i] = stats.counts[chosen].sum()
        pooled[1][i] = stats.sums[chosen].sum(0)
        pooled[2][i] = stats.sumsqs[chosen].sum(0)
    seen = np.flatnonzero(pooled[0] > 0)
    unseen = [items[i] for i in np.flatnonzero(pooled[0] <= 0)]
    if unseen:
        log.warning("cluster_phones: no stats for phone sets %s; each becomes its own question", unseen)
    questions: list[tuple[int, ...]] = []
    stack = [seen] if seen.size else []
    while stack:
        node = stack.pop()
        questions.append(tuple(sorted(p for i in node for p in items[i])))
        if node.size < 2:
            continue
        first = _two_means(pooled[0][node], pooled[1][node], pooled[2][node], var_floor)
        stack += [node[~first], node[first]]
    return questions + unseen


def make_questions(
    stats: TreeStats,
    phone_sets: Sequence[Sequence[int]] | None = None,
    *,
    extra_questions: Sequence[Sequence[int]] = (),
    pdf_classes: Sequence[int] = (1,),
    num_pdf_classes: int | None = None,
    var_floor: float = DEFAULT_VAR_FLOOR,
) -> Questions:
    """The questions for :func:`build_tree`, as Kaldi's recipes make them: :func:`cluster_phones`,
    then ``extra_questions`` (Kaldi's ``phones/extra_questions.int``), then
    :func:`pdf_class_questions` (``compile-questions``).

    Args:
        stats: tree stats.
        phone_sets: the items to cluster (see :func:`cluster_phones`).
        extra_questions: phone sets appended as they are.
        pdf_classes: pdf-classes that describe a phone in the clustering.
        num_pdf_classes: the most pdf-classes of any phone (the topology's); default the most
            seen in ``stats``.
        var_floor: lower bound on every variance.
    """
    if num_pdf_classes is None:
        num_pdf_classes = int(stats.pdf_classes.max()) + 1 if stats.num_events else 1
    clustered = cluster_phones(stats, phone_sets, pdf_classes=pdf_classes, var_floor=var_floor)
    return Questions(
        phone_sets=tuple(clustered) + tuple(tuple(s) for s in extra_questions),
        pdf_class_sets=pdf_class_questions(num_pdf_classes),
    )


def read_phone_sets(path: str | os.PathLike) -> list[tuple[int, ...]]:
    """Read integer phone sets, one per line (Kaldi's ``sets.int``, ``extra_questions.int``)."""
    sets = []
    for number, fields in _int_lines(path, words=set()):
        if not fields:
            raise DataError(f"{path}:{number}: empty phone set; remove the line")
        sets.append(tuple(int(f) for f in fields))
    return sets


def _int_lines(path: str | os.PathLike, *, words: set[str]) -> list[tuple[int, list[str]]]:
    """Non-empty lines of ``path`` as fields, each an integer or one of ``words``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror}); check the lang dir") from None
    lines = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        if not all(re.fullmatch(r"\d+", f) for f in fields if f not in words):
            raise DataError(
                f"{path}:{number}: expected integer phone ids, got {line.strip()!r}; use the .int "
                "files of the lang dir (phones as integers)"
            )
        lines.append((number, fields))
    return lines


# ---------------------------------------------------------------------------------------------
# Roots (roots.txt)
# ---------------------------------------------------------------------------------------------

_ROOT_WORDS = {"shared", "not-shared", "split", "not-split"}


@dataclass(frozen=True)
class Root:
    """One line of Kaldi's ``roots.txt``: phones whose tree starts from one root.

    Attributes:
        phones: the phones (> 0).
        shared: all pdf-classes of the phones start in one leaf (Kaldi ``shared``); if False,
            one leaf per pdf-class (``not-shared``), which must then be ``split=False``.
        split: the root may be split by questions (``split``); if False its leaves stay as they
            are (``not-split``, e.g. silence kept context-independent).
    """

    phones: tuple[int, ...]
    shared: bool = True
    split: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "phones", tuple(sorted({int(p) for p in self.phones})))
        if not self.phones or self.phones[0] <= 0:
            raise ConfigError(f"tree root {self.phones}: a root needs phones, all > 0; fix roots")
        if self.split and not self.shared:
            raise ConfigError(
                f"tree root {self.phones}: 'not-shared split' is not supported (as in Kaldi); "
                "use 'shared split' or 'not-shared not-split'"
            )


def read_roots(path: str | os.PathLike) -> list[Root]:
    """Read Kaldi's ``roots.int``: lines ``shared|not-shared split|not-split phone...``."""
    roots = []
    for number, fields in _int_lines(path, words=_ROOT_WORDS):
        if (
            len(fields) < 3
            or fields[0] not in ("shared", "not-shared")
            or fields[1] not in ("split", "not-split")
        ):
            raise DataError(
                f"{path}:{number}: expected 'shared|not-shared split|not-split phone...', got "
                f"{' '.join(fields)!r}; fix the roots file"
            )
        roots.append(Root(tuple(int(f) for f in fields[2:]), fields[0] == "shared", fields[1] == "split"))
    return roots
