"""Phonetic decision trees in Kaldi's shapes: tree statistics, questions, tree building and
Kaldi's binary ``tree`` file.

What Kaldi does with four programs, written in numpy:

- :func:`accumulate_tree_stats` (``acc-tree-stats``): one diagonal-Gaussian accumulator per
  seen event, from a monophone alignment and its features.
- :func:`cluster_phones` + :func:`make_questions` (``cluster-phones`` + ``compile-questions``):
  phone sets from top-down 2-means clustering of the per-phone stats, extra sets, and the
  pdf-class questions.
- :func:`build_tree` (``build-tree``): greedy likelihood splits from the roots, then bottom-up
  merging of leaves within each root.
- :class:`Tree`: the event map; writes Kaldi's binary ``tree`` file, becomes a real
  ``kaldi_hmm_gmm.ContextDependency``; :func:`read_tree` loads any Kaldi binary ``tree`` file.

Events, as in Kaldi: a context-dependent HMM state is a set of ``(key, value)`` pairs. Keys
``0..N-1`` hold the phones of the context window (``N`` the context width, ``P`` the central
position; value 0 means "no phone", past an utterance edge); key ``-1`` (:data:`PDF_CLASS`)
holds the pdf-class of the HMM state. Kaldi's triphone is ``N=3, P=1``. As in Kaldi, an event
whose central phone is context-independent carries no context keys, so no context question is
ever asked about it; in arrays such a missing key has the value :data:`ABSENT`.

The tree this module writes starts, as the task's design asks, with a table on the central
phone (``TE P``) that sends each phone to its root's subtree (a root of several phones is
copied under each of them, with the questions about the central phone answered for it) and
phones in no root to ``NULL``. Leaves are numbered ``0..L-1`` in depth-first order.
"""

from __future__ import annotations

import heapq
import io
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from asrkit.data.io import atomic_writer
from asrkit.data.kaldi_binary import (
    BINARY_MARKER,
    BinaryReader,
    pack_int32,
    pack_int32_vector,
    pack_token,
    pack_uint32,
)
from asrkit.errors import ConfigError, DataError, raise_all

log = logging.getLogger(__name__)

PDF_CLASS = -1
"""Kaldi's ``kPdfClass``: the event key whose value is the pdf-class (HMM state)."""

ABSENT = -1
"""Value of a context key that is not part of the event (the context of a CI phone)."""

DEFAULT_VAR_FLOOR = 0.01
"""Kaldi's ``acc-tree-stats --var-floor`` default, used wherever a variance is estimated."""

_LOG_2PI = math.log(2.0 * math.pi)


# ---------------------------------------------------------------------------------------------
# The event map (Kaldi's tree/event-map.h) and the tree
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    """Kaldi's ``ConstantEventMap`` (``CE pdf``): every event that reaches it maps to ``pdf``."""

    pdf: int


@dataclass(frozen=True)
class Split:
    """Kaldi's ``SplitEventMap`` (``SE key [ values ] { yes no }``): events whose value of
    ``key`` is in ``values`` (sorted) go to ``yes``, the others to ``no``."""

    key: int
    values: tuple[int, ...]
    yes: Node
    no: Node


@dataclass(frozen=True)
class Table:
    """Kaldi's ``TableEventMap`` (``TE key n ( child_0 .. child_n-1 )``): the value of ``key``
    indexes ``children``; ``None`` (Kaldi's ``NULL``) and values past the end map nowhere."""

    key: int
    children: tuple[Node | None, ...]


Node = Leaf | Split | Table


@dataclass(frozen=True)
class SplitRecord:
    """One split :func:`build_tree` made, in the order it made them.

    Attributes:
        root: index of the root (in ``roots``) the split leaf grew from.
        key: the event key asked about (``0..N-1`` or :data:`PDF_CLASS`).
        values: the question's yes-set.
        gain: log-likelihood gain of the split (single diagonal Gaussians).
        yes_count: frames on the yes side.
        no_count: frames on the no side.
    """

    root: int
    key: int
    values: tuple[int, ...]
    gain: float
    yes_count: float
    no_count: float


@dataclass(frozen=True)
class Tree:
    """A phonetic decision tree: Kaldi's ``ContextDependency`` (``N``, ``P`` and the map
    ``ToPdf`` from events to leaves, i.e. pdf-ids).

    Attributes:
        context_width: ``N``, phones in the context window (3 for triphones).
        central_position: ``P``, the central phone's position in the window (1 for triphones).
        root: the event map.
        splits: what :func:`build_tree` did (empty for a tree read from a file); not compared.
    """

    context_width: int
    central_position: int
    root: Node
    splits: tuple[SplitRecord, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.context_width < 1 or not 0 <= self.central_position < self.context_width:
            raise ConfigError(
                f"tree context: width {self.context_width}, central position {self.central_position}; "
                "need width >= 1 and 0 <= central position < width (triphones: 3 and 1)"
            )

    @cached_property
    def num_leaves(self) -> int:
        """Number of pdf-ids, ``max leaf + 1`` (Kaldi's ``NumPdfs()``)."""
        return max((leaf.pdf for leaf in _iter_leaves(self.root)), default=-1) + 1

    def lookup(self, phones: Sequence[int], pdf_class: int) -> int | None:
        """The leaf (pdf-id) of one event, in pure Python; ``None`` where the tree has no answer
        (Kaldi's ``compute()`` returning ``ok=False``).

        Args:
            phones: the ``N`` phones of the context window (0 past an utterance edge).
            pdf_class: the HMM state's pdf-class.
        """
        if len(phones) != self.context_width:
            raise ConfigError(
                f"tree lookup: {len(phones)} phones given, the tree's context width is "
                f"{self.context_width}; pass one phone per context position"
            )
        node: Node | None = self.root
        while node is not None:
            if isinstance(node, Leaf):
                return node.pdf
            value = pdf_class if node.key == PDF_CLASS else phones[node.key]
            if isinstance(node, Split):
                node = node.yes if value in node.values else node.no
            else:
                node = node.children[value] if 0 <= value < len(node.children) else None
        return None

    def map_events(self, stats: TreeStats) -> np.ndarray:
        """Leaf of every event of ``stats``, vectorised: ``(E,)`` int64, ``-1`` where the tree
        has no answer (a phone in no root, or a key the event lacks)."""
        self._check_context(stats)
        out = np.full(stats.num_events, -1, dtype=np.int64)
        stack: list[tuple[Node | None, np.ndarray]] = [(self.root, np.arange(stats.num_events))]
        while stack:
            node, idx = stack.pop()
            if node is None or idx.size == 0:
                continue
            if isinstance(node, Leaf):
                out[idx] = node.pdf
                continue
            values = stats.key_values(node.key)[idx]
            present = values != ABSENT if node.key != PDF_CLASS else np.ones(idx.size, dtype=bool)
            idx, values = idx[present], values[present]
            if isinstance(node, Split):
                yes = np.isin(values, node.values)
                stack += [(node.yes, idx[yes]), (node.no, idx[~yes])]
            else:
                for value in np.unique(values):
                    if 0 <= value < len(node.children):
                        stack.append((node.children[value], idx[values == value]))
        return out

    def leaf_stats(
        self, stats: TreeStats, *, var_floor: float = DEFAULT_VAR_FLOOR
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One Gaussian per leaf from the tree stats, as ``gmm-init-model`` starts a model.

        Args:
            stats: the stats the tree was built from (or any with the same context).
            var_floor: lower bound on every variance.

        Returns:
            ``counts`` ``(L,)``, ``means`` ``(L, D)`` and ``vars`` ``(L, D)``, float64. A leaf
            no event reaches (a root with no data) gets count 0 and the global mean and variance.

        Raises:
            DataError: some events map nowhere (their phones are in no root of this tree).
        """
        pdfs = self.map_events(stats)
        lost = pdfs < 0
        if lost.any():
            phones = sorted({int(p) for p in stats.phones[lost, self.central_position]})
            raise DataError(
                f"tree stats: {int(lost.sum())} of {stats.num_events} events reach no leaf of the "
                f"tree (central phones {phones}); build the tree with roots that cover those phones"
            )
        num = self.num_leaves
        counts = np.bincount(pdfs, weights=stats.counts, minlength=num)
        sums = _sum_rows(stats.sums, pdfs, num)
        sumsqs = _sum_rows(stats.sumsqs, pdfs, num)
        means, variances = _mean_var(counts, sums, sumsqs, var_floor)
        empty = counts <= 0
        if empty.any():
            total = counts.sum()
            if total > 0:
                g_mean, g_var = _mean_var(
                    np.array([total]), sums.sum(0)[None], sumsqs.sum(0)[None], var_floor
                )
                means[empty], variances[empty] = g_mean[0], g_var[0]
            else:
                means[empty], variances[empty] = 0.0, 1.0
            log.warning(
                "tree: %d of %d leaves have no data (leaves %s...); they start from the global Gaussian",
                int(empty.sum()),
                num,
                np.flatnonzero(empty)[:10].tolist(),
            )
        return counts, means, variances

    def to_bytes(self) -> bytes:
        """The Kaldi binary ``tree`` file's bytes (starting with ``"\\0B"``)."""
        return (
            BINARY_MARKER
            + pack_token("ContextDependency")
            + pack_int32(self.context_width)
            + pack_int32(self.central_position)
            + pack_token("ToPdf")
            + _event_map_bytes(self.root)
            + pack_token("EndContextDependency")
        )

    def to_text(self) -> str:
        """Kaldi's text form of the tree (what ``copy-tree --binary=false`` prints)."""
        return (
            f"ContextDependency {self.context_width} {self.central_position} ToPdf "
            + _event_map_text(self.root)
            + "EndContextDependency "
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "<bytes>") -> Tree:
        """Parse a Kaldi binary ``tree`` file's bytes (see :meth:`to_bytes`).

        Raises:
            DataError: the bytes are not a complete Kaldi binary tree (``source`` names them).
        """
        reader = _TreeReader(data, source)
        if not data.startswith(BINARY_MARKER):
            kind = (
                "Kaldi's text form" if data.lstrip().startswith(b"ContextDependency") else "not Kaldi binary"
            )
            raise DataError(
                f"{source}: not a Kaldi binary tree ({kind}: it does not start with the binary marker "
                "'\\0B'); write it in binary (Kaldi: copy-tree --binary=true in out) or rebuild it"
            )
        reader.stream.seek(len(BINARY_MARKER))
        reader.expect("ContextDependency")
        width, central = reader.int32(), reader.int32()
        if width < 1 or not 0 <= central < width:
            raise reader.fail(f"context width {width} / central position {central} make no sense")
        reader.expect("ToPdf")
        try:
            root = _read_event_map(reader)
        except RecursionError:
            raise reader.fail("the event map nests too deeply") from None
        reader.expect("EndContextDependency")
        if reader.stream.tell() != len(data):
            raise reader.fail(f"{len(data) - reader.stream.tell()} bytes follow EndContextDependency")
        if root is None:
            raise reader.fail("the event map is NULL")
        return cls(context_width=width, central_position=central, root=root)

    @classmethod
    def read(cls, path: str | os.PathLike) -> Tree:
        """Read a Kaldi binary ``tree`` file (see :func:`read_tree` for a ContextDependency)."""
        return cls.from_bytes(_read_file(path), source=str(path))

    def write(self, path: str | os.PathLike) -> None:
        """Write the Kaldi binary ``tree`` file atomically (temporary file, then rename)."""
        with atomic_writer(path, "wb") as handle:
            handle.write(self.to_bytes())

    def context_dependency(self) -> Any:
        """A real ``kaldi_hmm_gmm.ContextDependency`` parsed by Kaldi's own reader from
        :meth:`to_bytes` (for ``TransitionModel(ctx_dep, topo)``, graph building, ``compute()``)."""
        return _context_dependency_from_bytes(self.to_bytes()[len(BINARY_MARKER) :], source="<tree>")

    def _check_context(self, stats: TreeStats) -> None:
        if (stats.context_width, stats.central_position) != (self.context_width, self.central_position):
            raise ConfigError(
                f"tree stats have context width/central position {stats.context_width}/"
                f"{stats.central_position}, the tree {self.context_width}/{self.central_position}; "
                "use stats accumulated with the tree's context"
            )


def read_tree(path: str | os.PathLike) -> Any:
    """Load a Kaldi binary ``tree`` file (Kaldi's or :meth:`Tree.write`'s) as a
    ``kaldi_hmm_gmm.ContextDependency``.

    The file is first checked by :meth:`Tree.from_bytes`, so a bad file gives a readable
    :class:`~asrkit.errors.DataError` naming the path, then parsed by Kaldi's reader.
    """
    data = _read_file(path)
    Tree.from_bytes(data, source=str(path))
    return _context_dependency_from_bytes(data[len(BINARY_MARKER) :], source=str(path))


def _read_file(path: str | os.PathLike) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise DataError(
            f"{path}: cannot read the tree ({err.strerror}); check the path (a GMM exp dir's 'tree')"
        ) from None


def _context_dependency_from_bytes(body: bytes, *, source: str) -> Any:
    import kaldi_hmm_gmm as khg

    ctx_dep = khg.ContextDependency.__new__(khg.ContextDependency)
    try:
        # The bindings pickle a ContextDependency as its Kaldi binary bytes (no "\0B"), as int8s.
        ctx_dep.__setstate__((np.frombuffer(body, dtype=np.int8).tolist(),))
    except RuntimeError as err:
        raise DataError(
            f"{source}: Kaldi could not parse the tree ({str(err).splitlines()[-1]}); rebuild it"
        ) from None
    return ctx_dep


def _iter_leaves(root: Node | None) -> Iterable[Leaf]:
    stack: list[Node | None] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, Leaf):
            yield node
        elif isinstance(node, Split):
            stack += [node.no, node.yes]
        elif isinstance(node, Table):
            stack.extend(reversed(node.children))


# ---------------------------------------------------------------------------------------------
# Kaldi binary / text serialisation (the basic types: asrkit.data.kaldi_binary)
# ---------------------------------------------------------------------------------------------

#: The event map's tokens, packed once: ``NULL``, ``CE``, ``SE``, ``TE`` and the brackets.
_NULL, _CE, _SE, _TE, _OPEN_SPLIT, _CLOSE_SPLIT, _OPEN_TABLE, _CLOSE_TABLE = (
    pack_token(token) for token in ("NULL", "CE", "SE", "TE", "{", "}", "(", ")")
)


def _event_map_bytes(root: Node | None) -> bytes:
    out = bytearray()
    stack: list[Node | None | bytes] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, bytes):
            out += item
        elif item is None:
            out += _NULL
        elif isinstance(item, Leaf):
            out += _CE + pack_int32(item.pdf)
        elif isinstance(item, Split):
            out += _SE + pack_int32(item.key) + pack_int32_vector(item.values) + _OPEN_SPLIT
            stack += [_CLOSE_SPLIT, item.no, item.yes]
        else:
            out += _TE + pack_int32(item.key) + pack_uint32(len(item.children)) + _OPEN_TABLE
            stack.append(_CLOSE_TABLE)
            stack.extend(reversed(item.children))
    return bytes(out)


def _event_map_text(root: Node | None) -> str:
    out: list[str] = []
    stack: list[Node | None | str] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif item is None:
            out.append("NULL ")
        elif isinstance(item, Leaf):
            out.append(f"CE {item.pdf} ")
        elif isinstance(item, Split):
            values = "".join(f"{v} " for v in item.values)
            out.append(f"SE {item.key} [ {values}]\n{{ ")
            stack += ["} \n", item.no, item.yes]
        else:
            out.append(f"TE {item.key} {len(item.children)} ( ")
            stack.append(") \n")
            stack.extend(reversed(item.children))
    return "".join(out)


class _TreeReader(BinaryReader):
    """Reads a binary tree's bytes; every error names the source, the byte offset and the fix."""

    def __init__(self, data: bytes, source: str) -> None:
        super().__init__(io.BytesIO(data), source)
        self.size = len(data)

    def fail(self, problem: str, *, utt: str | None = None, fix: str | None = None) -> DataError:
        return DataError(
            f"{self.where}: not a valid Kaldi binary tree: {problem} (byte {self.stream.tell()} of "
            f"{self.size}); the file is truncated or corrupt, rebuild it (build-tree / asrkit)"
        )


def _read_event_map(reader: _TreeReader) -> Node | None:
    start = reader.stream.tell()
    token = reader.token()
    if token == "NULL":
        return None
    if token == "CE":
        return Leaf(reader.int32())
    if token == "SE":
        key, values = reader.int32(), tuple(reader.int32_vector().tolist())
        reader.expect("{")
        yes, no = _read_event_map(reader), _read_event_map(reader)
        reader.expect("}")
        if yes is None or no is None:
            raise reader.fail("a split (SE) has a NULL branch")
        return Split(key, values, yes, no)
    if token == "TE":
        key, size = reader.int32(), reader.uint32()
        if size > reader.size:
            raise reader.fail(f"table size {size} is larger than the file")
        reader.expect("(")
        children = tuple(_read_event_map(reader) for _ in range(size))
        reader.expect(")")
        return Table(key, children)
    reader.stream.seek(start)
    raise reader.fail(f"expected an event map (NULL, CE, SE or TE), found {token[:20]!r}")


# ---------------------------------------------------------------------------------------------
# Tree statistics (acc-tree-stats)
# ---------------------------------------------------------------------------------------------


@dataclass
class TreeStats:
    """Gaussian sufficient statistics of each seen event (Kaldi's ``treeacc``), float64.

    Attributes:
        context_width: ``N``.
        central_position: ``P``.
        phones: ``(E, N)`` int32, the phones of each event's context window (0 past an
            utterance edge, :data:`ABSENT` for the context keys of a CI central phone).
        pdf_classes: ``(E,)`` int32, each event's pdf-class.
        counts: ``(E,)`` frames per event.
        sums: ``(E, D)`` sum of the frames.
        sumsqs: ``(E, D)`` sum of the squared frames.
    """

    context_width: int
    central_position: int
    phones: np.ndarray
    pdf_classes: np.ndarray
    counts: np.ndarray
    sums: np.ndarray
    sumsqs: np.ndarray

    def __post_init__(self) -> None:
        num = len(self.counts)
        shapes_ok = (
            self.phones.shape == (num, self.context_width)
            and self.pdf_classes.shape == (num,)
            and self.sums.ndim == 2
            and self.sums.shape[0] == num
            and self.sumsqs.shape == self.sums.shape
        )
        if not shapes_ok or not 0 <= self.central_position < self.context_width:
            raise ConfigError(
                f"tree stats: inconsistent shapes phones {self.phones.shape}, pdf_classes "
                f"{self.pdf_classes.shape}, counts {self.counts.shape}, sums {self.sums.shape}, "
                f"sumsqs {self.sumsqs.shape} for context {self.context_width}/{self.central_position}; "
                "need (E, N), (E,), (E,), (E, D), (E, D) and 0 <= P < N"
            )

    @property
    def num_events(self) -> int:
        """``E``."""
        return len(self.counts)

    @property
    def dim(self) -> int:
        """``D``, the feature dimension."""
        return int(self.sums.shape[1])

    def key_values(self, key: int) -> np.ndarray:
        """``(E,)`` value of ``key`` in every event (:data:`ABSENT` where missing)."""
        return self.pdf_classes if key == PDF_CLASS else self.phones[:, key]

    def event(self, index: int) -> tuple[tuple[int, int], ...]:
        """Event ``index`` as Kaldi writes it: ``(key, value)`` pairs sorted by key, missing keys left out."""
        pairs = [(PDF_CLASS, int(self.pdf_classes[index]))]
        pairs += [(k, int(v)) for k, v in enumerate(self.phones[index]) if v != ABSENT]
        return tuple(pairs)

    @classmethod
    def merge(cls, parts: Sequence[TreeStats]) -> TreeStats:
        """Sum stats from several jobs (Kaldi's ``sum-tree-stats``)."""
        if not parts:
            raise ConfigError("TreeStats.merge: no stats given; pass the stats of every job")
        first = parts[0]
        if any(
            (p.context_width, p.central_position, p.dim)
            != (first.context_width, first.central_position, first.dim)
            for p in parts
        ):
            raise ConfigError(
                "TreeStats.merge: the stats differ in context width, central position or feature "
                "dimension; accumulate every job with the same settings and features"
            )
        keys = np.concatenate([np.column_stack([p.phones, p.pdf_classes]) for p in parts])
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        return cls(
            context_width=first.context_width,
            central_position=first.central_position,
            phones=uniq[:, :-1].astype(np.int32),
            pdf_classes=uniq[:, -1].astype(np.int32),
            counts=np.bincount(
                inverse, weights=np.concatenate([p.counts for p in parts]), minlength=len(uniq)
            ),
            sums=_sum_rows(np.concatenate([p.sums for p in parts]), inverse, len(uniq)),
            sumsqs=_sum_rows(np.concatenate([p.sumsqs for p in parts]), inverse, len(uniq)),
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the stats as an ``.npz`` file, atomically."""
        with atomic_writer(path, "wb") as handle:
            np.savez(
                handle,
                context=np.array([self.context_width, self.central_position]),
                phones=self.phones,
                pdf_classes=self.pdf_classes,
                counts=self.counts,
                sums=self.sums,
                sumsqs=self.sumsqs,
            )

    @classmethod
    def load(cls, path: str | os.PathLike) -> TreeStats:
        """Read stats written by :meth:`save`."""
        try:
            with np.load(path) as npz:
                width, central = (int(v) for v in npz["context"])
                return cls(
                    width, central, *(npz[k] for k in ("phones", "pdf_classes", "counts", "sums", "sumsqs"))
                )
        except (OSError, KeyError, ValueError) as err:
            raise DataError(
                f"{path}: not tree stats written by TreeStats.save ({err}); accumulate them again"
            ) from None


def _sum_rows(rows: np.ndarray, labels: np.ndarray, num: int) -> np.ndarray:
    """``(num, D)`` sums of the ``rows`` ``(n, D)`` sharing each label in ``labels`` ``(n,)``."""
    out = np.zeros((num, rows.shape[1]), dtype=np.float64)
    if len(labels):
        order = np.argsort(labels, kind="stable")
        sorted_labels = labels[order]
        starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
        out[sorted_labels[starts]] = np.add.reduceat(rows[order], starts, axis=0)
    return out


@dataclass
class _TransitionInfo:
    """Per transition-id facts from a TransitionModel, as arrays indexed by transition-id."""

    phone: np.ndarray
    pdf_class: np.ndarray
    state: np.ndarray
    hmm_state: np.ndarray
    self_loop: np.ndarray
    final: np.ndarray

    @classmethod
    def from_model(cls, trans_model: Any) -> _TransitionInfo:
        num = trans_model.num_transition_ids + 1  # transition-ids start at 1
        arrays = {
            name: np.zeros(num, dtype=np.int64) for name in ("phone", "pdf_class", "state", "hmm_state")
        }
        flags = {name: np.zeros(num, dtype=bool) for name in ("self_loop", "final")}
        tuples = trans_model.tuples
        id2state = trans_model.id2state
        topo = trans_model.topo
        entries: dict[int, list[Any]] = {}
        for tid in range(1, num):
            state = id2state[tid]
            # The bindings expose a tuple only through pickling: (phone, hmm_state, forward_pdf,
            # self_loop_pdf), as its repr shows; the phone is checked against the model.
            phone, hmm_state = tuples[state - 1].__getstate__()[:2]
            if phone != trans_model.transition_id_to_phone(tid):
                raise RuntimeError(
                    "kaldi_hmm_gmm's TransitionModelTuple pickles in an unexpected order; "
                    "update asrkit.gmm.tree._TransitionInfo for this kaldi_hmm_gmm version"
                )
            if phone not in entries:
                entries[phone] = topo.topology_for_phone(phone)
            self_loop = trans_model.is_self_loop(tid)
            hmm = entries[phone][hmm_state]
            # Kaldi's TransitionIdToPdfClass: the self-loop's pdf-class for a self-loop.
            arrays["pdf_class"][tid] = hmm.self_loop_pdf_class if self_loop else hmm.forward_pdf_class
            arrays["phone"][tid], arrays["state"][tid], arrays["hmm_state"][tid] = phone, state, hmm_state
            flags["self_loop"][tid], flags["final"][tid] = self_loop, trans_model.is_final(tid)
        return cls(**arrays, **flags)


def _is_reordered(tids: np.ndarray, info: _TransitionInfo) -> bool:
    """Whether self-loops follow the forward transition (Kaldi's ``reorder=true`` graphs).

    At the first change of transition state next to a self-loop: a self-loop just before the
    change means reordered (loops come last), one just after means not.
    """
    states, loops = info.state[tids], info.self_loop[tids]
    change = np.flatnonzero(states[:-1] != states[1:])
    before, after = loops[change], loops[change + 1]
    decisive = np.flatnonzero(before | after)
    if decisive.size:
        return bool(before[decisive[0]])
    return bool(not loops[0] and loops[-1])


def _split_to_phones(tids: np.ndarray, info: _TransitionInfo, where: str) -> np.ndarray:
    """``(S + 1,)`` frame boundaries of the phones of one alignment (Kaldi's ``SplitToPhones``):
    a phone ends with its final transition (and, reordered, the self-loops after it)."""
    num = len(tids)
    reordered = _is_reordered(tids, info)
    bounds = [0]
    for final in np.flatnonzero(info.final[tids]):
        end = int(final) + 1
        if reordered:
            state = info.state[tids[final]]
            while end < num and info.self_loop[tids[end]] and info.state[tids[end]] == state:
                end += 1
        bounds.append(end)
    if bounds[-1] != num:
        raise DataError(
            f"{where}: the alignment does not end with a phone's final transition (frame "
            f"{bounds[-1]} of {num}); re-align, the alignment is truncated or from another model"
        )
    bounds_arr = np.asarray(bounds)
    starts = bounds_arr[:-1]
    lengths = np.diff(bounds_arr)
    seg_phone = np.repeat(info.phone[tids[starts]], lengths)
    bad = info.phone[tids] != seg_phone
    bad[starts] |= info.hmm_state[tids[starts]] != 0
    if bad.any():
        frame = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{where}: the alignment cannot be split into phones at frame {frame} (a phone does not "
            "start in its first HMM state or changes before its final transition); re-align with the "
            "same transition model"
        )
    return bounds_arr


class _EventAccumulator:
    """Growing per-event Gaussian stats keyed by ``(context phones, pdf-class)``."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.index: dict[tuple[int, ...], int] = {}
        self.dim = -1
        self.counts = np.zeros(0)
        self.sums = np.zeros((0, 0))
        self.sumsqs = np.zeros((0, 0))

    def event_id(self, key: tuple[int, ...]) -> int:
        found = self.index.get(key)
        if found is None:
            found = self.index[key] = len(self.index)
        return found

    def add(self, event_ids: np.ndarray, feats: np.ndarray) -> None:
        if self.dim < 0:
            self.dim = feats.shape[1]
            self.sums = np.zeros((0, self.dim))
            self.sumsqs = np.zeros((0, self.dim))
        needed = len(self.index)
        if needed > len(self.counts):
            grow = max(needed, 2 * len(self.counts), 64) - len(self.counts)
            self.counts = np.concatenate([self.counts, np.zeros(grow)])
            self.sums = np.concatenate([self.sums, np.zeros((grow, self.dim))])
            self.sumsqs = np.concatenate([self.sumsqs, np.zeros((grow, self.dim))])
        uniq, local = np.unique(event_ids, return_inverse=True)
        feats64 = feats.astype(np.float64)
        self.counts[uniq] += np.bincount(local, minlength=len(uniq))
        self.sums[uniq] += _sum_rows(feats64, local, len(uniq))
        self.sumsqs[uniq] += _sum_rows(feats64 * feats64, local, len(uniq))

    def result(self, central: int) -> TreeStats:
        num = len(self.index)
        keys = np.array(list(self.index), dtype=np.int32).reshape(num, self.width + 1)
        dim = max(self.dim, 0)
        return TreeStats(
            context_width=self.width,
            central_position=central,
            phones=keys[:, :-1],
            pdf_classes=keys[:, -1],
            counts=self.counts[:num].copy(),
            sums=self.sums[:num].reshape(num, dim).copy(),
            sumsqs=self.sumsqs[:num].reshape(num, dim).copy(),
        )


def accumulate_tree_stats(
    trans_model: Any,
    alignments: Iterable[tuple[Sequence[int], np.ndarray]],
    *,
    context_width: int = 3,
    central_position: int = 1,
    ci_phones: Iterable[int] = (),
) -> TreeStats:
    """Gather the stats for tree building, like Kaldi's ``acc-tree-stats``.

    Each alignment is split into phones (a phone ends at its final transition; both Kaldi
    transition orders are recognised), and each frame adds to the event of its phone's context
    window and its pdf-class. As in Kaldi, when the central phone is in ``ci_phones`` the event
    keeps only the central phone and the pdf-class, so no tree asks about its context.

    Args:
        trans_model: the ``kaldi_hmm_gmm.TransitionModel`` the alignments use (monophone).
        alignments: per utterance ``(transition_ids, feats)``: ``T`` transition-ids and
            ``(T, D)`` float features.
        context_width: ``N``, phones in the context window.
        central_position: ``P``, the position of the central phone in the window.
        ci_phones: context-independent phones (silence, noise).

    Returns:
        The stats of every event seen, in order of first appearance.

    Raises:
        DataError: an alignment does not match its features or cannot be split into phones.
    """
    if context_width < 1 or not 0 <= central_position < context_width:
        raise ConfigError(
            f"tree stats: context width {context_width}, central position {central_position}; "
            "need width >= 1 and 0 <= central position < width (triphones: 3 and 1)"
        )
    info = _TransitionInfo.from_model(trans_model)
    ci = {int(p) for p in ci_phones}
    acc = _EventAccumulator(context_width)
    num_tids = len(info.phone) - 1
    for utt, (transition_ids, feats) in enumerate(alignments):
        where = f"tree stats, utterance #{utt}"
        tids = np.asarray(transition_ids, dtype=np.int64).reshape(-1)
        feats = np.asarray(feats)
        if feats.ndim != 2 or feats.shape[0] != len(tids):
            raise DataError(
                f"{where}: {len(tids)} transition-ids but features of shape {feats.shape}; pair each "
                "alignment with the (T, D) features of the same utterance"
            )
        if len(tids) == 0:
            continue
        if tids.min() < 1 or tids.max() > num_tids:
            raise DataError(
                f"{where}: transition-id {int(tids.max() if tids.max() > num_tids else tids.min())} is "
                f"outside 1..{num_tids}; the alignment comes from another model"
            )
        bounds = _split_to_phones(tids, info, where)
        seq = info.phone[tids[bounds[:-1]]].tolist()
        frame_events = np.empty(len(tids), dtype=np.int64)
        for s, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            window = [
                seq[s + j - central_position] if 0 <= s + j - central_position < len(seq) else 0
                for j in range(context_width)
            ]
            if seq[s] in ci:
                window = [ABSENT if j != central_position else seq[s] for j in range(context_width)]
            classes = info.pdf_class[tids[start:end]]
            for pdf_class in np.unique(classes):
                frame_events[start:end][classes == pdf_class] = acc.event_id((*window, int(pdf_class)))
        acc.add(frame_events, feats)
    return acc.result(central_position)


# ---------------------------------------------------------------------------------------------
# Single diagonal Gaussians: likelihoods of stats
# ---------------------------------------------------------------------------------------------


def _mean_var(
    counts: np.ndarray, sums: np.ndarray, sumsqs: np.ndarray, var_floor: float
) -> tuple[np.ndarray, np.ndarray]:
    safe = np.where(counts > 0, counts, 1.0)[..., None]
    mean = sums / safe
    var = np.maximum(sumsqs / safe - mean * mean, var_floor)
    return mean, var


def _loglik(counts: np.ndarray, sums: np.ndarray, sumsqs: np.ndarray, var_floor: float) -> np.ndarray:
    """Log-likelihood of the frames behind each set of stats under their ML diagonal Gaussian
    with variances floored at ``var_floor`` (Kaldi's ``GaussClusterable::Objf``).

    Args:
        counts: ``(...,)``; sums, sumsqs: ``(..., D)``.

    Returns:
        ``(...,)``: ``-0.5 n sum_d (log 2pi + log v_d + s2_d / v_d)`` with ``s2`` the ML variance
        and ``v = max(s2, var_floor)``; 0 where the count is not positive.
    """
    safe = np.where(counts > 0, counts, 1.0)[..., None]
    mean = sums / safe
    var = np.maximum(sumsqs / safe - mean * mean, 0.0)
    floored = np.maximum(var, var_floor)
    per_frame = -0.5 * (np.log(floored) + var / floored + _LOG_2PI).sum(axis=-1)
    return np.where(counts > 0, counts * per_frame, 0.0)


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
# Roots and tree building (build-tree)
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
