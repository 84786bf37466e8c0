"""Tree statistics, like Kaldi's ``acc-tree-stats``, and the single-Gaussian likelihoods of stats.

Events, as in Kaldi: a context-dependent HMM state is a set of ``(key, value)`` pairs. Keys
``0..N-1`` hold the phones of the context window (``N`` the context width, ``P`` the central
position; value 0 means "no phone", past an utterance edge); key ``-1`` (:data:`PDF_CLASS`)
holds the pdf-class of the HMM state. Kaldi's triphone is ``N=3, P=1``. As in Kaldi, an event
whose central phone is context-independent carries no context keys, so no context question is
ever asked about it; in arrays such a missing key has the value :data:`ABSENT`.

Public API:
    - :data:`PDF_CLASS`, :data:`ABSENT`, :data:`DEFAULT_VAR_FLOOR`.
    - :class:`TreeStats` — per-event Gaussian sufficient statistics (Kaldi's ``treeacc``).
    - :func:`accumulate_tree_stats` — the stats of a monophone alignment and its features.

The rest of :mod:`asrkit.gmm.tree` shares the private helpers ``_sum_rows``, ``_mean_var`` and
``_loglik`` (one diagonal Gaussian per set of stats).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from asrkit.data.io import atomic_writer
from asrkit.errors import ConfigError, DataError

PDF_CLASS = -1
"""Kaldi's ``kPdfClass``: the event key whose value is the pdf-class (HMM state)."""

ABSENT = -1
"""Value of a context key that is not part of the event (the context of a CI phone)."""

DEFAULT_VAR_FLOOR = 0.01
"""Kaldi's ``acc-tree-stats --var-floor`` default, used wherever a variance is estimated."""

_LOG_2PI = math.log(2.0 * math.pi)


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
                    "update asrkit.gmm.tree.stats._TransitionInfo for this kaldi_hmm_gmm version"
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
