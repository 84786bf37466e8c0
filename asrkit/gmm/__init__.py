"""GMM-HMM systems in Kaldi's shapes (the hybrid models' targets).

Built on k2-fsa's ``kaldi_hmm_gmm`` (Kaldi's own GMM/HMM C++); this subpackage adds what the
bindings lack and writes Kaldi's binary formats so Kaldi's tools read the results.

Public API, one module per stage:

:mod:`asrkit.gmm.model_io` — Kaldi's ``final.mdl`` (transition model + ``AmDiagGmm``):
    - :func:`read_model` → :class:`KaldiModel`, :func:`write_model`.
    - :func:`transition_id_to_pdf`, :func:`transition_id_to_phone` — per transition-id tables.

:mod:`asrkit.gmm.tree` — phonetic decision trees (``acc-tree-stats``, ``cluster-phones``,
``compile-questions``, ``build-tree``; a package of one module per job):
    - :func:`accumulate_tree_stats` → :class:`TreeStats` — per-event Gaussian stats from a
      monophone alignment.
    - :func:`make_questions` / :func:`cluster_phones` / :func:`pdf_class_questions` →
      :class:`Questions`.
    - :func:`build_tree` (with :class:`Root`, :func:`read_roots`, :func:`read_phone_sets`) →
      :class:`Tree` — Kaldi's ``tree`` file, a real ``ContextDependency``, per-leaf Gaussians.
    - :func:`read_tree` — a Kaldi binary ``tree`` file as a ``kaldi_hmm_gmm.ContextDependency``.

:mod:`asrkit.gmm.graph` — the decoding graph (``format_lm.sh`` + ``mkgraph.sh``):
    - :func:`make_g` — ``G.fst`` from an ARPA LM (words outside ``words.txt`` skipped);
      :func:`check_g`.
    - :func:`make_hclg` — ``HCLG`` from lang, tree, transition model and G.
    - :func:`make_graph` → :class:`GraphDir` — both, written as Kaldi's graph dir
      (:func:`write_graph_dir`); :func:`load_graph_dir` reads one (Kaldi's too).
"""

from asrkit.gmm.graph import (
    GraphDir,
    check_g,
    load_graph_dir,
    make_g,
    make_graph,
    make_hclg,
    write_graph_dir,
)
from asrkit.gmm.model_io import (
    KaldiModel,
    read_model,
    transition_id_to_pdf,
    transition_id_to_phone,
    write_model,
)
from asrkit.gmm.tree import (
    Questions,
    Root,
    Tree,
    TreeStats,
    accumulate_tree_stats,
    build_tree,
    cluster_phones,
    make_questions,
    pdf_class_questions,
    read_phone_sets,
    read_roots,
    read_tree,
)

__all__ = [
    "GraphDir",
    "KaldiModel",
    "Questions",
    "Root",
    "Tree",
    "TreeStats",
    "accumulate_tree_stats",
    "build_tree",
    "check_g",
    "cluster_phones",
    "load_graph_dir",
    "make_g",
    "make_graph",
    "make_hclg",
    "make_questions",
    "pdf_class_questions",
    "read_model",
    "read_phone_sets",
    "read_roots",
    "read_tree",
    "transition_id_to_pdf",
    "transition_id_to_phone",
    "write_graph_dir",
    "write_model",
]
