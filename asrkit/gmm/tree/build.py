"""Building a phonetic decision tree, like Kaldi's ``build-tree``: greedy likelihood splits
from the roots, then bottom-up merging of leaves within each root.

Public API:
    - :func:`build_tree` — the :class:`~asrkit.gmm.tree.eventmap.Tree` of a set of tree stats,
      roots and questions.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from asrkit.errors import ConfigError, raise_all
from asrkit.gmm.tree.eventmap import Leaf, Node, Split, SplitRecord, Table, Tree, _iter_leaves
from asrkit.gmm.tree.questions import Questions, Root
from asrkit.gmm.tree.stats import ABSENT, DEFAULT_VAR_FLOOR, PDF_CLASS, TreeStats, _loglik

#: The package's logger, as when the tree was one module.
log = logging.getLogger(__package__)


@dataclass(frozen=True)
class _Candidate:
    gain: float
    key: int
    values: tuple[int, ...]
    yes_count: float
    no_count: float


class _Splitter:
    """Finds the best question for a set of events, vectorised over questions and values."""

    def __init__(self, stats: TreeStats, questions: Questions, *, min_count: float, var_floor: float) -> None:
        self.stats, self.min_count, self.var_floor = stats, min_count, var_floor
        self.keys = [*range(stats.context_width), PDF_CLASS]
        max_phone = max(
            [int(stats.phones.max()) if stats.num_events else 0] + [max(s) for s in questions.phone_sets]
        )
        max_class = max(
            [int(stats.pdf_classes.max()) if stats.num_events else 0]
            + [max(s) for s in questions.pdf_class_sets]
        )
        self.tables: dict[int, tuple[np.ndarray, tuple[tuple[int, ...], ...]]] = {}
        phone_table = _membership(questions.phone_sets, max_phone + 1)
        for key in range(stats.context_width):
            self.tables[key] = (phone_table, questions.phone_sets)
        self.tables[PDF_CLASS] = (
            _membership(questions.pdf_class_sets, max_class + 1),
            questions.pdf_class_sets,
        )

    def totals(self, events: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        s = self.stats
        return float(s.counts[events].sum()), s.sums[events].sum(0), s.sumsqs[events].sum(0)

    def best(self, events: np.ndarray) -> _Candidate | None:
        stats = self.stats
        total_c, total_s, total_q = self.totals(events)
        total_ll = float(_loglik(np.array(total_c), total_s, total_q, self.var_floor))
        best: _Candidate | None = None
        for key in self.keys:
            table, sets = self.tables[key]
            if not sets:
                continue
            values = stats.key_values(key)[events]
            if key != PDF_CLASS and (values == ABSENT).any():
                continue  # as in Kaldi, only keys every event has are asked about
            order = np.argsort(values, kind="stable")
            sorted_values = values[order]
            starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
            if len(starts) < 2:
                continue
            member = table[:, sorted_values[starts]]
            num_yes = member.sum(1)
            useful = np.flatnonzero((num_yes > 0) & (num_yes < len(starts)))
            if not useful.size:
                continue
            ordered = events[order]
            v_counts = np.add.reduceat(stats.counts[ordered], starts)
            member_f = member[useful].astype(np.float64)
            yes_c = member_f @ v_counts
            no_c = total_c - yes_c
            ok = (yes_c > 0) & (no_c > 0) & (yes_c >= self.min_count) & (no_c >= self.min_count)
            if not ok.any():
                continue
            useful, member_f, yes_c, no_c = useful[ok], member_f[ok], yes_c[ok], no_c[ok]
            yes_s = member_f @ np.add.reduceat(stats.sums[ordered], starts, axis=0)
            yes_q = member_f @ np.add.reduceat(stats.sumsqs[ordered], starts, axis=0)
            gains = (
                _loglik(yes_c, yes_s, yes_q, self.var_floor)
                + _loglik(no_c, total_s - yes_s, total_q - yes_q, self.var_floor)
                - total_ll
            )
            i = int(np.argmax(gains))
            if best is None or gains[i] > best.gain:
                best = _Candidate(float(gains[i]), key, sets[useful[i]], float(yes_c[i]), float(no_c[i]))
        return best


def _membership(sets: Sequence[Sequence[int]], size: int) -> np.ndarray:
    """``(len(sets), size)`` bool: ``[q, v]`` is whether value ``v`` is in set ``q``."""
    table = np.zeros((len(sets), size), dtype=bool)
    for q, values in enumerate(sets):
        table[q, list(values)] = True
    return table


def _cluster_bottom_up(
    counts: np.ndarray, sums: np.ndarray, sumsqs: np.ndarray, *, thresh: float, var_floor: float
) -> np.ndarray:
    """Greedy agglomerative clustering of ``K`` Gaussians (``(K,)``, ``(K, D)``, ``(K, D)``):
    merge the cheapest pair (log-likelihood loss) while it costs less than ``thresh``.

    Returns:
        ``(K,)`` cluster label of each item (the index of one item of its cluster).
    """
    num = len(counts)
    labels = np.arange(num)
    if num < 2:
        return labels
    counts, sums, sumsqs = counts.copy(), sums.copy(), sumsqs.copy()
    own = _loglik(counts, sums, sumsqs, var_floor)
    alive = np.ones(num, dtype=bool)

    def costs(i: int) -> np.ndarray:
        pair = _loglik(counts[i] + counts, sums[i] + sums, sumsqs[i] + sumsqs, var_floor)
        row = own[i] + own - pair
        row[~alive] = np.inf
        row[i] = np.inf
        return row

    matrix = np.stack([costs(i) for i in range(num)])
    row_min, row_arg = matrix.min(1), matrix.argmin(1)
    while True:
        i = int(np.argmin(row_min))
        if not row_min[i] < thresh:
            break
        j = int(row_arg[i])
        counts[i] += counts[j]
        sums[i] += sums[j]
        sumsqs[i] += sumsqs[j]
        own[i] = _loglik(counts[i], sums[i], sumsqs[i], var_floor)
        alive[j] = False
        labels[labels == j] = i
        matrix[j, :] = matrix[:, j] = np.inf
        row_min[j] = np.inf
        matrix[i] = matrix[:, i] = costs(i)
        row_min[i], row_arg[i] = matrix[i].min(), matrix[i].argmin()
        stale = np.flatnonzero(alive & ((row_arg == i) | (row_arg == j)))
        for r in stale:
            row_min[r], row_arg[r] = matrix[r].min(), matrix[r].argmin()
        better = np.flatnonzero(alive & (matrix[:, i] < row_min))
        row_min[better], row_arg[better] = matrix[better, i], i
    return labels


def build_tree(
    stats: TreeStats,
    *,
    roots: Sequence[Root | Sequence[int]],
    questions: Questions,
    num_leaves: int,
    min_count: float = 0.0,
    split_thresh: float = 300.0,
    cluster_thresh: float | None = None,
    var_floor: float = DEFAULT_VAR_FLOOR,
    phone2num_pdf_classes: Sequence[int] | Mapping[int, int] | None = None,
) -> Tree:
    """Build a phonetic decision tree, like Kaldi's ``build-tree``.

    1. Each root starts as one leaf (shared) or one leaf per pdf-class (not shared), holding
       the events whose central phone is in it.
    2. Greedy splitting: repeatedly the leaf, key and question with the largest log-likelihood
       gain (single diagonal Gaussians, variances floored) is split, while the tree has fewer
       than ``num_leaves`` leaves and the gain exceeds ``split_thresh``. Only leaves of
       ``split`` roots split, only on keys every event of the leaf has, and only where each
       side holds at least ``min_count`` frames.
    3. Clustering: within each root (each starting leaf), leaves are merged bottom-up while the
       cheapest merge loses less than ``cluster_thresh``; merged leaves share one pdf.

    Args:
        stats: the tree stats (:func:`accumulate_tree_stats`).
        roots: Kaldi's ``roots.txt``; a plain phone sequence means ``shared split``. Every
            central phone of ``stats`` must be in a root; phones in no root map to ``NULL``.
        questions: what may be asked (:func:`make_questions`).
        num_leaves: most leaves before clustering (Kaldi's ``--max-leaves``), >= 1.
        min_count: fewest frames on each side of a split. Kaldi has no such limit (its
            ``--thresh`` guards); 0 keeps Kaldi's behaviour.
        split_thresh: smallest gain worth a split (Kaldi's ``--thresh``, default 300).
        cluster_thresh: merge-cost threshold. ``None`` (Kaldi's ``--cluster-thresh=-1``, the
            default) uses the smallest gain of any split made: a merge cheaper than the worst
            split is a better use of a leaf. 0 turns clustering off.
        var_floor: lower bound on every variance.
        phone2num_pdf_classes: pdf-classes per phone, indexed by phone (the topology's
            ``get_phone_to_num_pdf_classes()``) or a mapping; needed only by not-shared roots,
            default the most seen in ``stats``.

    Returns:
        The tree; its leaves ``0..L-1`` are the pdf-ids, :attr:`Tree.splits` lists the splits.

    Raises:
        ConfigError: roots overlap or miss phones seen in ``stats``, or bad settings.
    """
    root_list = [r if isinstance(r, Root) else Root(tuple(r)) for r in roots]
    _check_build_args(stats, root_list, num_leaves=num_leaves, min_count=min_count, var_floor=var_floor)
    central_pos = stats.central_position
    central = stats.phones[:, central_pos]
    num_classes = _num_pdf_classes(stats, root_list, phone2num_pdf_classes)

    # Working leaves and internal nodes, by node id; stubs are the starting leaves.
    node_events: list[np.ndarray] = []
    node_stub: list[int] = []
    internal: dict[int, tuple[int, tuple[int, ...], int, int]] = {}
    stub_nodes: list[list[int]] = []  # per root: its starting leaves (one, or one per pdf-class)
    splittable: list[int] = []
    for r, root in enumerate(root_list):
        mine = np.flatnonzero(np.isin(central, root.phones))
        parts = [mine] if root.shared else [mine[stats.pdf_classes[mine] == c] for c in range(num_classes[r])]
        stub_nodes.append([])
        for part in parts:
            stub_nodes[r].append(len(node_events))
            node_stub.append(len(node_events))
            node_events.append(part)
            if root.split:
                splittable.append(len(node_events) - 1)
        if mine.size == 0:
            log.warning("build_tree: root %s has no data; its leaves will have no stats", root.phones)
    node_root = [r for r, nodes in enumerate(stub_nodes) for _ in nodes]

    splitter = _Splitter(stats, questions, min_count=min_count, var_floor=var_floor)
    heap: list[tuple[float, int, _Candidate]] = []
    for node in splittable:
        candidate = splitter.best(node_events[node])
        if candidate is not None:
            heapq.heappush(heap, (-candidate.gain, node, candidate))
    leaves = len(node_events)
    records: list[SplitRecord] = []
    while heap and leaves < num_leaves:
        _, node, cand = heapq.heappop(heap)
        if not cand.gain > split_thresh:
            break
        events = node_events[node]
        yes = np.isin(stats.key_values(cand.key)[events], cand.values)
        children = []
        for part in (events[yes], events[~yes]):
            child = len(node_events)
            node_events.append(part)
            node_stub.append(node_stub[node])
            node_root.append(node_root[node])
            children.append(child)
            found = splitter.best(part)
            if found is not None:
                heapq.heappush(heap, (-found.gain, child, found))
        internal[node] = (cand.key, cand.values, children[0], children[1])
        records.append(
            SplitRecord(node_root[node], cand.key, cand.values, cand.gain, cand.yes_count, cand.no_count)
        )
        leaves += 1

    final_leaves = [n for n in range(len(node_events)) if n not in internal]
    if cluster_thresh is None:
        cluster_thresh = min((rec.gain for rec in records), default=0.0)
    cluster = _cluster_leaves(
        splitter, node_events, node_stub, final_leaves, thresh=cluster_thresh, var_floor=var_floor
    )
    tree = _assemble(stats, root_list, stub_nodes, internal, cluster, num_classes, tuple(records))
    total_frames = float(stats.counts.sum())
    gain = sum(rec.gain for rec in records)
    log.info(
        "build_tree: %d starting leaves, %d splits (gain %.4f per frame over %.0f frames, smallest %.1f), "
        "%d leaves after clustering with threshold %.1f",
        sum(len(n) for n in stub_nodes),
        len(records),
        gain / max(total_frames, 1.0),
        total_frames,
        min((rec.gain for rec in records), default=0.0),
        tree.num_leaves,
        cluster_thresh,
    )
    return tree


def _check_build_args(
    stats: TreeStats, roots: list[Root], *, num_leaves: int, min_count: float, var_floor: float
) -> None:
    problems = []
    if not roots:
        problems.append("no roots given; pass one Root per line of roots.txt")
    owner: dict[int, int] = {}
    for r, root in enumerate(roots):
        for phone in root.phones:
            if phone in owner:
                problems.append(
                    f"phone {phone} is in roots #{owner[phone]} and #{r}; each phone needs exactly one root"
                )
            owner[phone] = r
    missing = sorted({int(p) for p in stats.phones[:, stats.central_position]} - set(owner))
    if missing:
        problems.append(f"central phones {missing} of the stats are in no root; add them to roots")
    if num_leaves < 1:
        problems.append(f"num_leaves is {num_leaves}; need >= 1 (Kaldi --max-leaves)")
    if min_count < 0 or var_floor <= 0:
        problems.append(f"min_count {min_count} / var_floor {var_floor}: need min_count >= 0, var_floor > 0")
    raise_all([f"build_tree: {p}" for p in problems])


def _num_pdf_classes(
    stats: TreeStats, roots: list[Root], given: Sequence[int] | Mapping[int, int] | None
) -> list[int]:
    """Pdf-classes of each root (the most of its phones); only not-shared roots need them."""
    out = []
    central = stats.phones[:, stats.central_position]
    for root in roots:
        if root.shared:
            out.append(1)
            continue
        if given is not None:
            try:
                out.append(max(int(given[p]) for p in root.phones))
            except (IndexError, KeyError):
                raise ConfigError(
                    f"build_tree: phone2num_pdf_classes has no entry for a phone of root {root.phones}; "
                    "pass the topology's get_phone_to_num_pdf_classes()"
                ) from None
            continue
        mine = np.isin(central, root.phones)
        if not mine.any():
            raise ConfigError(
                f"build_tree: not-shared root {root.phones} has no stats, so its pdf-classes are "
                "unknown; pass phone2num_pdf_classes (the topology's get_phone_to_num_pdf_classes())"
            )
        out.append(int(stats.pdf_classes[mine].max()) + 1)
    return out


def _cluster_leaves(
    splitter: _Splitter,
    node_events: list[np.ndarray],
    node_stub: list[int],
    final_leaves: list[int],
    *,
    thresh: float,
    var_floor: float,
) -> dict[int, int]:
    """Cluster label (a leaf's node id) of every final leaf; merges only within one stub."""
    label = {n: n for n in final_leaves}
    if thresh <= 0:
        return label
    by_stub: dict[int, list[int]] = {}
    for n in final_leaves:
        by_stub.setdefault(node_stub[n], []).append(n)
    for group in by_stub.values():
        if len(group) < 2:
            continue
        totals = [splitter.totals(node_events[n]) for n in group]
        found = _cluster_bottom_up(
            np.array([t[0] for t in totals]),
            np.stack([t[1] for t in totals]),
            np.stack([t[2] for t in totals]),
            thresh=thresh,
            var_floor=var_floor,
        )
        for n, f in zip(group, found, strict=True):
            label[n] = group[int(f)]
    return label


def _assemble(
    stats: TreeStats,
    roots: list[Root],
    stub_nodes: list[list[int]],
    internal: dict[int, tuple[int, tuple[int, ...], int, int]],
    cluster: dict[int, int],
    num_classes: list[int],
    records: tuple[SplitRecord, ...],
) -> Tree:
    """The final tree: a table on the central phone, each phone's copy of its root's subtree
    (central-phone questions answered for that phone), leaves renumbered depth-first."""
    central_pos = stats.central_position

    def subtree(top: int, phone: int) -> Node:
        built: dict[int, Node] = {}
        stack = [(top, False)]
        while stack:
            node, expanded = stack.pop()
            if node not in internal:
                built[node] = Leaf(cluster[node])
                continue
            key, values, yes, no = internal[node]
            if key == central_pos:
                chosen = yes if phone in values else no
                if expanded:
                    built[node] = built[chosen]
                else:
                    stack += [(node, True), (chosen, False)]
            elif expanded:
                built[node] = Split(key, values, built[yes], built[no])
            else:
                stack += [(node, True), (yes, False), (no, False)]
        return built[top]

    max_phone = max(p for root in roots for p in root.phones)
    children: list[Node | None] = [None] * (max_phone + 1)
    for r, root in enumerate(roots):
        for phone in root.phones:
            if root.shared:
                children[phone] = subtree(stub_nodes[r][0], phone)
            else:
                children[phone] = Table(
                    PDF_CLASS, tuple(subtree(n, phone) for n in stub_nodes[r][: num_classes[r]])
                )
    top = Table(central_pos, tuple(children))
    numbering: dict[int, int] = {}
    for leaf in _iter_leaves(top):
        numbering.setdefault(leaf.pdf, len(numbering))
    return Tree(stats.context_width, central_pos, _relabel(top, numbering), splits=records)


def _relabel(root: Node, numbering: dict[int, int]) -> Node:
    """``root`` with every leaf's pdf replaced through ``numbering``."""
    done: dict[int, Node] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if isinstance(node, Leaf):
            done[id(node)] = Leaf(numbering[node.pdf])
        elif not expanded:
            stack.append((node, True))
            kids = (
                [node.yes, node.no]
                if isinstance(node, Split)
                else [c for c in node.children if c is not None]
            )
            stack += [(k, False) for k in kids]
        elif isinstance(node, Split):
            done[id(node)] = Split(node.key, node.values, done[id(node.yes)], done[id(node.no)])
        else:
            done[id(node)] = Table(node.key, tuple(None if c is None else done[id(c)] for c in node.children))
    return done[id(root)]
