"""Phonetic decision trees in Kaldi's shapes: tree statistics, questions, tree building and
Kaldi's binary ``tree`` file.

What Kaldi does with four programs, written in numpy, one module per job:

- :mod:`~asrkit.gmm.tree.stats` — :func:`accumulate_tree_stats` (``acc-tree-stats``): one
  diagonal-Gaussian accumulator per seen event (:class:`TreeStats`), from a monophone alignment
  and its features.
- :mod:`~asrkit.gmm.tree.questions` — :func:`cluster_phones` + :func:`make_questions`
  (``cluster-phones`` + ``compile-questions``): phone sets from top-down 2-means clustering of
  the per-phone stats, extra sets, and the pdf-class questions (:class:`Questions`); the roots
  (:class:`Root`, :func:`read_roots`) and phone sets (:func:`read_phone_sets`) of a lang dir.
- :mod:`~asrkit.gmm.tree.build` — :func:`build_tree` (``build-tree``): greedy likelihood splits
  from the roots, then bottom-up merging of leaves within each root.
- :mod:`~asrkit.gmm.tree.eventmap` — :class:`Tree`: the event map (:class:`Leaf`,
  :class:`Split`, :class:`Table`); writes Kaldi's binary ``tree`` file, becomes a real
  ``kaldi_hmm_gmm.ContextDependency``; :func:`read_tree` loads any Kaldi binary ``tree`` file.
  Its basic types are written and read by :mod:`asrkit.data.kaldi_binary`.

Events, as in Kaldi: a context-dependent HMM state is a set of ``(key, value)`` pairs. Keys
``0..N-1`` hold the phones of the context window (``N`` the context width, ``P`` the central
position; value 0 means "no phone", past an utterance edge); key ``-1`` (:data:`PDF_CLASS`)
holds the pdf-class of the HMM state. Kaldi's triphone is ``N=3, P=1``. As in Kaldi, an event
whose central phone is context-independent carries no context keys, so no context question is
ever asked about it; in arrays such a missing key has the value :data:`ABSENT`.

The tree this package builds starts, as the task's design asks, with a table on the central
phone (``TE P``) that sends each phone to its root's subtree (a root of several phones is
copied under each of them, with the questions about the central phone answered for it) and
phones in no root to ``NULL``. Leaves are numbered ``0..L-1`` in depth-first order.

Public API (every name importable from ``asrkit.gmm.tree``):
    - constants: :data:`PDF_CLASS`, :data:`ABSENT`, :data:`DEFAULT_VAR_FLOOR`,
      :data:`BINARY_MARKER`.
    - stats: :class:`TreeStats`, :func:`accumulate_tree_stats`.
    - questions and roots: :class:`Questions`, :func:`pdf_class_questions`,
      :func:`cluster_phones`, :func:`make_questions`, :func:`read_phone_sets`, :class:`Root`,
      :func:`read_roots`.
    - building: :func:`build_tree` → :class:`Tree` (with :class:`SplitRecord` per split).
    - the tree and its file: :class:`Tree`, :class:`Leaf`, :class:`Split`, :class:`Table`,
      :data:`Node`, :func:`read_tree`.

The modules stack ``stats`` ← ``eventmap``, ``questions`` ← ``build``; they share a few
private helpers (the single-Gaussian likelihoods in ``stats``), which are not part of the API.
"""

from asrkit.gmm.tree.build import build_tree
from asrkit.gmm.tree.eventmap import (
    BINARY_MARKER,
    Leaf,
    Node,
    Split,
    SplitRecord,
    Table,
    Tree,
    read_tree,
)
from asrkit.gmm.tree.questions import (
    Questions,
    Root,
    cluster_phones,
    make_questions,
    pdf_class_questions,
    read_phone_sets,
    read_roots,
)
from asrkit.gmm.tree.stats import (
    ABSENT,
    DEFAULT_VAR_FLOOR,
    PDF_CLASS,
    TreeStats,
    accumulate_tree_stats,
)

__all__ = [
    "ABSENT",
    "BINARY_MARKER",
    "DEFAULT_VAR_FLOOR",
    "PDF_CLASS",
    "Leaf",
    "Node",
    "Questions",
    "Root",
    "Split",
    "SplitRecord",
    "Table",
    "Tree",
    "TreeStats",
    "accumulate_tree_stats",
    "build_tree",
    "cluster_phones",
    "make_questions",
    "pdf_class_questions",
    "read_phone_sets",
    "read_roots",
    "read_tree",
]
