"""The event map (Kaldi's ``tree/event-map.h``), the tree, and Kaldi's ``tree`` file.

Public API:
    - :class:`Leaf`, :class:`Split`, :class:`Table` (:data:`Node`) — Kaldi's ``CE``, ``SE`` and
      ``TE`` event maps.
    - :class:`Tree` — Kaldi's ``ContextDependency``: lookups, per-leaf Gaussians, the binary
      ``tree`` file (:meth:`Tree.to_bytes`, :meth:`Tree.from_bytes`, :meth:`Tree.read`,
      :meth:`Tree.write`), its text form and a real ``kaldi_hmm_gmm.ContextDependency``.
    - :class:`SplitRecord` — one split :func:`~asrkit.gmm.tree.build.build_tree` made.
    - :func:`read_tree` — any Kaldi binary ``tree`` file as a ``kaldi_hmm_gmm.ContextDependency``.
    - :data:`BINARY_MARKER` (:mod:`asrkit.data.kaldi_binary`'s).

The ``tree`` file's basic types are written and read by :mod:`asrkit.data.kaldi_binary`.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterable, Sequence
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
from asrkit.errors import ConfigError, DataError
from asrkit.gmm.tree.stats import ABSENT, DEFAULT_VAR_FLOOR, PDF_CLASS, TreeStats, _mean_var, _sum_rows

#: The package's logger, as when the tree was one module.
log = logging.getLogger(__package__)


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
