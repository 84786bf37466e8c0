"""Decoding pdf log-likelihoods against an ``HCLG`` graph (Kaldi's ``decode-faster-mapped`` /
``latgen-faster-mapped`` and ``lattice-scale | lattice-add-penalty | lattice-best-path``).

The acoustic scores are per-frame pdf log-likelihoods: GMM log-likelihoods, or a hybrid
network's log-posteriors minus the log-priors of its targets (:func:`pdf_log_likelihoods`).
As Kaldi's decodables do, they are multiplied by ``acoustic_scale`` before the search; a
path's score is then ``acoustic_scale * sum_t loglike[t, pdf_t] - graph_cost``.

Searches, from k2-fsa's ``kaldi_decoder`` (Kaldi's own C++):

- :meth:`WfstDecoder.decode` / :meth:`WfstDecoder.decode_best`: the best path by Kaldi's
  ``FasterDecoder`` (``beam``, ``max_active``).
- :meth:`WfstDecoder.decode_lattice`: a state-level lattice by Kaldi's
  ``LatticeSimpleDecoder`` (``beam``, ``lattice_beam``; it has no ``max_active``): every path
  within ``lattice_beam`` of the best, with graph and acoustic costs kept apart. The bindings
  expose no lattice from ``LatticeFasterDecoder`` and no lattice determinization, so the
  lattice is the raw one; :class:`WordLattice` finds its best path at any LM weight and
  word insertion penalty without decoding again (:meth:`WfstDecoder.decode_with_scales`),
  which is how Kaldi's scoring sweeps them.

An utterance whose search reaches no final state of the graph gets the best partial path,
a warning and a count (:attr:`WfstDecoder.num_partial`), as Kaldi's ``--allow-partial=true``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import _kaldifst
import kaldi_decoder as kd
import kaldifst
import numpy as np

from asrkit.errors import ConfigError, DataError
from asrkit.gmm.config import WfstConfig
from asrkit.progress import Progress, counted, map_forked
from asrkit.sigstack import quiet_worker

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Log-likelihood given to pdfs whose prior is below the floor: they never win (Kaldi nnet1's
#: ``--prior-floor`` treatment), yet costs stay finite for the search.
NEVER = -1.0e10

#: The file name of a decoding dir's :class:`SweepJournal`.
SWEEP_JOURNAL = "sweep.jsonl"

#: One round of the lattice's topological relaxation: arcs by destination, the destinations,
#: where each destination's arcs start.
_Round = tuple[np.ndarray, np.ndarray, np.ndarray]


def pdf_log_likelihoods(
    log_posteriors: np.ndarray,
    log_priors: np.ndarray,
    *,
    prior_floor: float = 1e-10,
    prior_scale: float = 1.0,
) -> np.ndarray:
    """Scaled likelihoods of a hybrid network: ``log p(x|s) + const = log p(s|x) - log p(s)``,
    or with the priors weighted, ``log p(s|x) - prior_scale * log p(s)``.

    Args:
        log_posteriors: ``(T, P)`` log-softmax outputs over the ``P`` pdfs.
        log_priors: ``(P,)`` log prior probabilities of the pdfs (counted from the training
            alignments).
        prior_floor: pdfs with a prior below this (never or hardly ever seen in training) get
            :data:`NEVER` instead, so that a tiny prior cannot make them win (Kaldi nnet1's
            ``--prior-floor``, default 1e-10).
        prior_scale: the priors' weight (Kaldi nnet1's ``--prior-scale``, default 1).

    Returns:
        ``(T, P)`` float32 log-likelihoods for :class:`WfstDecoder`.

    Raises:
        DataError: the shapes disagree.
    """
    post = np.asarray(log_posteriors, dtype=np.float32)
    priors = np.asarray(log_priors, dtype=np.float64)
    if post.ndim != 2 or priors.ndim != 1 or post.shape[1] != priors.shape[0]:
        raise DataError(
            f"log-posteriors of shape {post.shape} and log-priors of shape {priors.shape}: need (T, P) "
            "and (P,) over the same pdfs; count the priors from alignments of the model the network "
            "was trained for"
        )
    if not prior_floor > 0.0:
        raise ConfigError(f"prior_floor={prior_floor}: must be positive (Kaldi's default is 1e-10)")
    out = (post - (prior_scale * priors).astype(np.float32)[None, :]).astype(np.float32)
    rare = ~(priors >= math.log(prior_floor))
    if rare.any():
        out[:, rare] = NEVER
    return out


def _transition_pdfs(transitions: Any) -> np.ndarray:
    """The ``(num_transition_ids + 1,)`` pdf table of a transition model, a KaldiModel or an array."""
    if isinstance(transitions, np.ndarray):
        table = transitions
    elif hasattr(transitions, "transition_id_to_pdf_array"):
        table = np.asarray(transitions.transition_id_to_pdf_array())
    else:
        from asrkit.gmm.model_io import transition_id_to_pdf

        table = transition_id_to_pdf(transitions)
    table = np.asarray(table, dtype=np.int64)
    if table.ndim != 1 or len(table) < 2 or table[1:].min() < 0:
        raise DataError(
            f"transition-id -> pdf table of shape {table.shape}: need (num_transition_ids + 1,) "
            "non-negative pdf ids (entry 0 unused); pass the model's transition model"
        )
    return table


@dataclass
class WfstResult:
    """The best path of one utterance.

    Attributes:
        words: the word sequence.
        word_ids: its ids in ``words.txt``.
        alignment: ``(T,)`` int32 transition-ids, one per frame.
        graph_cost: the path's graph cost (LM, lexicon and transition ``-log`` probabilities).
        acoustic_cost: ``-acoustic_scale * sum_t loglike[t, pdf_t]``.
        reached_final: False when the search ended in no final state (partial output).
    """

    words: list[str]
    word_ids: list[int]
    alignment: np.ndarray
    graph_cost: float
    acoustic_cost: float
    reached_final: bool

    @property
    def score(self) -> float:
        """``acoustic_scale * loglike - graph cost`` of the path (Kaldi's "likelihood")."""
        return -(self.graph_cost + self.acoustic_cost)


@dataclass
class WordLattice:
    """A decoder's raw (state-level) lattice as arrays, to find best paths under other weights.

    Arc ``i`` goes from ``src[i]`` to ``dst[i]``, emits word ``olabel[i]`` (0: none) and costs
    ``graph[i]`` (graph cost) and ``acoustic[i]`` (unscaled: ``-loglike``, the decoder's
    acoustic scale divided out, as Kaldi writes lattices). Under LM weight ``w`` and word
    insertion penalty ``p`` a path costs ``graph + acoustic / w + p * words`` (Kaldi's
    ``lattice-scale --inv-acoustic-scale=w | lattice-add-penalty --word-ins-penalty=p``).

    Attributes:
        start: the start state.
        num_states: states ``0..num_states-1``.
        src / dst / olabel: ``(A,)`` int64 arc tables.
        graph / acoustic: ``(A,)`` float64 arc costs.
        final_states / final_graph / final_acoustic: the final states and their final costs.
    """

    start: int
    num_states: int
    src: np.ndarray
    dst: np.ndarray
    olabel: np.ndarray
    graph: np.ndarray
    acoustic: np.ndarray
    final_states: np.ndarray
    final_graph: np.ndarray
    final_acoustic: np.ndarray
    _rounds: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @classmethod
    def from_lattice(cls, lattice: kaldifst.Lattice, *, acoustic_scale: float) -> WordLattice:
        """Read a ``kaldifst.Lattice`` whose acoustic costs carry ``acoustic_scale``."""
        arcs: list[tuple[int, int, int, float, float]] = []
        finals: list[tuple[int, float, float]] = []
        for state in range(lattice.num_states):
            # kaldifst has no public arc iterator for lattices; its text form rounds the costs
            # to 6 digits, so the binding's own iterator is used.
            it = _kaldifst._ArcIteratorLattice(lattice, state)
            while not it.done:
                arc = it.value
                arcs.append((state, arc.nextstate, arc.olabel, arc.weight.value1, arc.weight.value2))
                it.next()
            weight = lattice.final(state)
            if math.isfinite(weight.value1):
                finals.append((state, weight.value1, weight.value2))
        table = np.array(arcs, dtype=np.float64).reshape(-1, 5)
        fin = np.array(finals, dtype=np.float64).reshape(-1, 3)
        return cls(
            start=int(lattice.start),
            num_states=int(lattice.num_states),
            src=table[:, 0].astype(np.int64),
            dst=table[:, 1].astype(np.int64),
            olabel=table[:, 2].astype(np.int64),
            graph=table[:, 3],
            acoustic=table[:, 4] / acoustic_scale,
            final_states=fin[:, 0].astype(np.int64),
            final_graph=fin[:, 1],
            final_acoustic=fin[:, 2] / acoustic_scale,
        )

    @property
    def num_arcs(self) -> int:
        return len(self.src)

    def _topological_rounds(self) -> list[_Round]:
        """The arcs in rounds (Kahn's algorithm): every arc's source is complete before the
        round that holds the arc, so a round can be relaxed at once. Each round is
        ``(arcs sorted by destination, its distinct destinations, where each one's arcs
        start)``, ready for ``np.minimum.reduceat``."""
        if self._rounds is not None:
            return self._rounds
        order = np.argsort(self.src, kind="stable")
        offsets = np.searchsorted(self.src[order], np.arange(self.num_states + 1))
        indeg = np.bincount(self.dst, minlength=self.num_states)
        frontier = np.flatnonzero(indeg == 0)
        rounds: list[_Round] = []
        done = 0
        while frontier.size:
            done += frontier.size
            starts, lens = offsets[frontier], offsets[frontier + 1] - offsets[frontier]
            total = int(lens.sum())
            if total == 0:
                break
            within = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
            arcs = order[np.repeat(starts, lens) + within]
            arcs = arcs[np.argsort(self.dst[arcs], kind="stable")]
            targets = self.dst[arcs]
            first = np.flatnonzero(np.r_[True, targets[1:] != targets[:-1]])
            rounds.append((arcs, targets[first], first))
            indeg -= np.bincount(targets, minlength=self.num_states)
            frontier = np.unique(targets[indeg[targets] == 0])
        if done < self.num_states and (indeg > 0).any():
            raise DataError(
                "lattice has a cycle (an epsilon loop in the graph?); rebuild HCLG with make_hclg"
            )
        self._rounds = rounds
        return rounds

    def best_paths(
        self, lm_weights: Sequence[float], *, word_penalties: Sequence[float] = (0.0,)
    ) -> dict[tuple[float, float], tuple[list[int], float]]:
        """The best path under every pair of LM weight and word insertion penalty.

        Returns:
            ``(lm_weight, word_penalty) -> (word ids, cost)``; the cost is
            ``graph + acoustic / lm_weight + penalty * len(words)`` (Kaldi's scaling).
        """
        if any(not w > 0 for w in lm_weights):
            raise ConfigError(f"LM weights {list(lm_weights)}: must be positive (Kaldi sweeps 7..17)")
        combos = [(float(w), float(p)) for w in lm_weights for p in word_penalties]
        out: dict[tuple[float, float], tuple[list[int], float]] = {}
        if not len(self.final_states):
            return {c: ([], math.inf) for c in combos}
        rounds = self._topological_rounds()
        is_word = (self.olabel != 0).astype(np.float64)
        # Rescore a few pairs at a time: the cost table is (pairs, arcs).
        chunk = max(1, 4_000_000 // max(1, self.num_arcs))
        for first in range(0, len(combos), chunk):
            part = combos[first : first + chunk]
            inv = np.array([1.0 / w for w, _ in part])[:, None]
            pen = np.array([p for _, p in part])[:, None]
            cost = self.graph[None, :] + self.acoustic[None, :] * inv + is_word[None, :] * pen
            best = np.full((len(part), self.num_states), np.inf)
            best[:, self.start] = 0.0
            for arcs, targets, starts in rounds:
                reached = np.minimum.reduceat(best[:, self.src[arcs]] + cost[:, arcs], starts, axis=1)
                best[:, targets] = np.minimum(best[:, targets], reached)
            final = self.final_graph[None, :] + self.final_acoustic[None, :] * inv
            totals = best[:, self.final_states] + final
            on_best = best[:, self.src] + cost == best[:, self.dst]
            for k, combo in enumerate(part):
                j = int(np.argmin(totals[k]))
                if not math.isfinite(totals[k, j]):
                    out[combo] = ([], math.inf)
                    continue
                pred = np.full(self.num_states, -1, dtype=np.int64)
                winners = np.flatnonzero(on_best[k])
                pred[self.dst[winners]] = winners
                words: list[int] = []
                state = int(self.final_states[j])
                while state != self.start:
                    arc = int(pred[state])
                    if self.olabel[arc]:
                        words.append(int(self.olabel[arc]))
                    state = int(self.src[arc])
                out[combo] = (words[::-1], float(totals[k, j]))
        return out

    def best_path(self, lm_weight: float, *, word_penalty: float = 0.0) -> list[int]:
        """The best word-id sequence at one LM weight and word insertion penalty."""
        return self.best_paths([lm_weight], word_penalties=[word_penalty])[
            (float(lm_weight), float(word_penalty))
        ][0]


class WfstDecoder:
    """Viterbi beam search of pdf log-likelihoods through an HCLG graph.

    Args:
        hclg: the graph (transition-ids in, word ids out), e.g. from
            :func:`asrkit.gmm.graph.make_hclg` or :func:`~asrkit.gmm.graph.load_graph_dir`.
        transitions: the model's ``kaldi_hmm_gmm.TransitionModel``, a
            :class:`~asrkit.gmm.model_io.KaldiModel`, or its ``(num_transition_ids + 1,)``
            transition-id -> pdf table.
        words: word id -> word (``words.txt`` inverted).
        beam: search beam (Kaldi's decoding default 13).
        lattice_beam: lattice pruning beam of :meth:`decode_lattice` (Kaldi's default 8).
        max_active / min_active: bounds on the active states per frame (best path search).
        acoustic_scale: multiplies the log-likelihoods (Kaldi's 0.1 for GMMs and hybrids).

    Attributes:
        num_decoded: utterances decoded so far.
        num_partial: how many of them reached no final state (partial output, warned).
    """

    def __init__(
        self,
        hclg: kaldifst.StdVectorFst,
        transitions: Any,
        *,
        words: Mapping[int, str],
        beam: float = 13.0,
        lattice_beam: float = 8.0,
        max_active: int = 7000,
        min_active: int = 200,
        acoustic_scale: float = 0.1,
    ) -> None:
        if not (beam > 0 and lattice_beam > 0 and acoustic_scale > 0 and max_active >= min_active >= 0):
            raise ConfigError(
                f"decoder settings beam={beam}, lattice_beam={lattice_beam}, "
                f"acoustic_scale={acoustic_scale}, "
                f"max_active={max_active}, min_active={min_active}: beams and scale must be positive and "
                "max_active >= min_active >= 0"
            )
        if hclg.start < 0:
            raise DataError("HCLG is empty (no start state); rebuild it (asrkit.gmm.graph.make_hclg)")
        self.hclg = hclg
        self.tid2pdf = _transition_pdfs(transitions)
        self.num_pdfs = int(self.tid2pdf[1:].max()) + 1
        self.words = dict(words)
        self.beam = beam
        self.lattice_beam = lattice_beam
        self.max_active = max_active
        self.min_active = min_active
        self.acoustic_scale = acoustic_scale
        self._faster = kd.FasterDecoder(
            hclg, kd.FasterDecoderOptions(beam=beam, max_active=max_active, min_active=min_active)
        )
        self._lattice: Any = None
        self.num_decoded = 0
        self.num_partial = 0

    @classmethod
    def from_graph_dir(cls, graph: Any, transitions: Any, **settings: Any) -> WfstDecoder:
        """A decoder for a :class:`~asrkit.gmm.graph.GraphDir` (its HCLG and ``words.txt``)."""
        decoder = cls(graph.hclg, transitions, words=graph.word_names, **settings)
        if graph.num_pdfs >= 0 and graph.num_pdfs != decoder.num_pdfs:
            raise DataError(
                f"{graph.path}: the graph was built for {graph.num_pdfs} pdfs, the model has "
                f"{decoder.num_pdfs}; rebuild the graph with this model"
            )
        return decoder

    # --- inputs and outputs ----------------------------------------------------------------------

    def _decodable(self, loglikes: np.ndarray, utt: str) -> kd.DecodableCtc:
        scores = np.asarray(loglikes)
        if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] != self.num_pdfs:
            raise DataError(
                f"utterance {utt}: log-likelihoods of shape {scores.shape}, the model has {self.num_pdfs} "
                "pdfs; need (T >= 1, num_pdfs) (for a network: its outputs over the tree's pdfs)"
            )
        bad = ~np.isfinite(scores)
        if bad.any():
            frame = int(np.argwhere(bad)[0, 0])
            raise DataError(
                f"utterance {utt}: log-likelihood at frame {frame} is {scores[bad][0]}; "
                "give finite values (floor the priors with pdf_log_likelihoods)"
            )
        # DecodableCtc answers log_likelihood(t, i) with column i - 1: one column per transition-id.
        return kd.DecodableCtc(
            np.ascontiguousarray((self.acoustic_scale * scores.astype(np.float32))[:, self.tid2pdf[1:]])
        )

    def word_strings(self, ids: Sequence[int]) -> list[str]:
        """Words of graph word ids (``words.txt``)."""
        try:
            return [self.words[i] for i in ids]
        except KeyError as err:
            raise DataError(
                f"word id {err.args[0]} of the graph is not in the decoder's words; take words.txt from "
                "the same graph dir as HCLG.fst"
            ) from None

    def _partial(self, utt: str, num_frames: int) -> None:
        self.num_partial += 1
        log.warning(
            "utterance %s: no final state of the graph reached after %d frames; output is the best "
            "partial path (%d such so far; a larger beam may help)",
            utt,
            num_frames,
            self.num_partial,
        )

    # --- searches --------------------------------------------------------------------------------

    def decode_best(self, loglikes: np.ndarray, *, utt: str = "?") -> WfstResult:
        """The best path of one utterance, with its alignment and costs.

        Args:
            loglikes: ``(T, num_pdfs)`` acoustic log-likelihoods (unscaled).
            utt: the utterance id, for messages.
        """
        decodable = self._decodable(loglikes, utt)
        self._faster.decode(decodable)
        self.num_decoded += 1
        reached = self._faster.reached_final()
        if not reached:
            self._partial(utt, len(loglikes))
        ok, path = self._faster.get_best_path(True)
        if not ok:
            log.warning("utterance %s: the search kept no path at all; empty output", utt)
            return WfstResult([], [], np.zeros(0, dtype=np.int32), math.inf, math.inf, False)
        _, tids, word_ids, weight = kaldifst.get_linear_symbol_sequence(path)
        return WfstResult(
            words=self.word_strings(word_ids),
            word_ids=list(word_ids),
            alignment=np.asarray(tids, dtype=np.int32),
            graph_cost=float(weight.value1),
            acoustic_cost=float(weight.value2),
            reached_final=reached,
        )

    def decode(self, loglikes: np.ndarray, *, utt: str = "?") -> list[str]:
        """The best word sequence of one utterance (``loglikes``: ``(T, num_pdfs)``)."""
        return self.decode_best(loglikes, utt=utt).words

    def decode_lattice(self, loglikes: np.ndarray, *, utt: str = "?") -> WordLattice:
        """The raw lattice of one utterance: every path within ``lattice_beam`` of the best
        (``loglikes``: ``(T, num_pdfs)``); see :class:`WordLattice`."""
        if self._lattice is None:
            config = kd.LatticeSimpleDecoderConfig(beam=self.beam, lattice_beam=self.lattice_beam)
            self._lattice = kd.LatticeSimpleDecoder(self.hclg, config)
        decodable = self._decodable(loglikes, utt)
        self._lattice.decode(decodable)
        self.num_decoded += 1
        if not math.isfinite(self._lattice.final_relative_cost()):
            self._partial(utt, len(loglikes))
        # With no final state reached, Kaldi treats every surviving state as final.
        ok, raw = self._lattice.get_raw_lattice(True)
        if not ok or raw.start < 0:
            log.warning("utterance %s: the search kept no path at all; empty lattice", utt)
            empty = np.zeros(0, dtype=np.int64)
            nothing = np.zeros(0)
            return WordLattice(0, 1, empty, empty, empty, nothing, nothing, empty, nothing, nothing)
        return WordLattice.from_lattice(raw, acoustic_scale=self.acoustic_scale)

    def decode_with_scales(
        self,
        loglikes: np.ndarray,
        lm_weights: Sequence[float],
        *,
        word_penalties: Sequence[float] = (0.0,),
        utt: str = "?",
    ) -> dict[tuple[float, float], list[str]]:
        """The best word sequence at every LM weight and word insertion penalty, from one
        lattice (no decoding per value; Kaldi's scoring sweep).

        The lattice is searched with this decoder's ``acoustic_scale`` and pruned with
        ``lattice_beam``; paths pruned there are not rescored, as in Kaldi.

        Returns:
            ``(lm_weight, word_penalty) -> words``.
        """
        lattice = self.decode_lattice(loglikes, utt=utt)
        paths = lattice.best_paths(lm_weights, word_penalties=word_penalties)
        return {combo: self.word_strings(ids) for combo, (ids, _) in paths.items()}

    def sweep(
        self,
        scores: Mapping[str, np.ndarray],
        lm_weights: Sequence[float],
        *,
        word_penalties: Sequence[float] = (0.0,),
        nj: int = 1,
        label: str = "lattice search",
        journal: SweepJournal | None = None,
    ) -> dict[str, dict[tuple[float, float], list[str]]]:
        """:meth:`decode_with_scales` for many utterances, in ``nj`` forked processes (Kaldi's
        ``decode.sh --nj``): ``utt -> (lm_weight, word_penalty) -> words``, in the order of
        ``scores``. The workers share the graph and the scores with this process (fork), so
        nothing large is copied; each returns only its words. ``label`` starts the progress
        lines (e.g. :meth:`~asrkit.decoding.decoder.Decoder.progress_label`'s ``decoding dev
        (tri1, 6 weight settings)``); they count utterances, as each lattice is rescored at
        every point at once.

        With a ``journal`` each utterance's words are added to it as soon as they are found,
        and the utterances it already holds (from a sweep that was stopped) are not searched
        again; it is removed once every utterance is found."""
        utts = list(scores)
        shared = {"lm_weights": list(lm_weights), "penalties": list(word_penalties), "journal": journal}
        found: dict[str, dict[tuple[float, float], list[str]]] = {}
        todo: Mapping[str, np.ndarray] = scores
        if journal is not None:
            journal.begin(self, lm_weights, word_penalties)
            found = journal.finished(scores)
            if found:
                log.info(
                    "%s: %d of %d utterances from %s (a stopped sweep)",
                    label,
                    len(found),
                    len(utts),
                    journal.path,
                )
            todo = {utt: value for utt, value in scores.items() if utt not in found}
        parts = _in_jobs(_sweep_chunk, self, todo, nj=nj, label=label, shared=shared) if todo else []
        for words, partial in parts:
            found.update(words)
            if len(parts) > 1:  # one job ran here, on this decoder's own counts
                self.num_decoded += len(words)
                self.num_partial += partial
        if journal is not None:
            journal.done()
        return {utt: found[utt] for utt in utts}

    def best_words(
        self,
        scores: Mapping[str, np.ndarray],
        lm_weight: float,
        *,
        nj: int = 1,
        label: str = "best path search",
    ) -> dict[str, list[str]]:
        """The best word sequence of every utterance at one LM weight (no word penalty),
        without a lattice: Kaldi's ``FasterDecoder`` (this decoder's ``beam``, ``max_active``)
        at acoustic scale ``1 / lm_weight``, so that it minimises what the lattice's best path
        at that weight minimises, graph cost plus acoustic cost over the LM weight. A few
        times faster than :meth:`sweep` where only one point is wanted (a SAT system's first
        pass: Kaldi's ``decode_fmllr.sh`` also searches that pass more narrowly), and bounded
        by ``max_active`` where a weak model's lattice search is not. ``utt -> words``, in
        the order of ``scores``; ``nj`` forked processes, as :meth:`sweep`."""
        if not lm_weight > 0:
            raise ConfigError(f"LM weight {lm_weight}: must be > 0")
        search = WfstDecoder(
            self.hclg,
            self.tid2pdf,
            words=self.words,
            beam=self.beam,
            lattice_beam=self.lattice_beam,
            max_active=self.max_active,
            min_active=self.min_active,
            acoustic_scale=1.0 / lm_weight,
        )
        found: dict[str, list[str]] = {}
        for words, partial in _in_jobs(_best_chunk, search, scores, nj=nj, label=label):
            found.update(words)
            self.num_decoded += len(words)
            self.num_partial += partial
        return {utt: found[utt] for utt in scores}


# Fork-shared state of one WfstDecoder.sweep or best_words (set before the pool forks; read
# by workers).
_SWEEP: dict[str, Any] = {}


def _in_jobs(
    chunk: Callable[[list[str]], _T],
    decoder: WfstDecoder,
    scores: Mapping[str, np.ndarray],
    *,
    nj: int,
    label: str,
    shared: Mapping[str, Any] | None = None,
) -> list[_T]:
    """``chunk`` over the utterances of ``scores`` here (one job) or in ``nj`` forked
    workers, each taking every nj-th utterance (similar lengths in each job, so they end
    together), with ``decoder``, ``scores`` and ``shared`` in :data:`_SWEEP` for the
    workers; progress counts utterances."""
    utts = list(scores)
    nj = max(1, min(nj, len(utts)))
    try:
        _SWEEP.update(shared or {}, decoder=decoder, scores=scores)
        with Progress(label, total=len(utts)) as progress:
            if nj == 1:
                return [chunk(utts)]
            jobs = [(utts[j::nj],) for j in range(nj)]
            return map_forked(chunk, jobs, nj=nj, progress=progress, initializer=quiet_worker)
    finally:
        _SWEEP.clear()


def _best_chunk(utts: list[str]) -> tuple[dict[str, list[str]], int]:
    decoder: WfstDecoder = _SWEEP["decoder"]
    scores: Mapping[str, np.ndarray] = _SWEEP["scores"]
    before = decoder.num_partial
    words = {utt: decoder.decode(scores[utt], utt=utt) for utt in counted(utts)}
    return words, decoder.num_partial - before


def first_pass_words(
    search: WfstDecoder,
    scores: Mapping[str, np.ndarray],
    point: tuple[float, float],
    *,
    nj: int = 1,
    label: str = "first pass",
) -> dict[str, str]:
    """A SAT system's speaker-independent first pass: ``utt -> hypothesis`` at ``point``
    (LM weight, word penalty). Without a penalty, the best path search of
    :meth:`WfstDecoder.best_words`; with one (which that search cannot add), the lattice's
    best path at the point."""
    weight, penalty = point
    if penalty == 0:
        return {utt: " ".join(w) for utt, w in search.best_words(scores, weight, nj=nj, label=label).items()}
    swept = search.sweep(scores, [weight], word_penalties=[penalty], nj=nj, label=label)
    return {utt: " ".join(words[(weight, penalty)]) for utt, words in swept.items()}


def _sweep_chunk(utts: list[str]) -> tuple[dict[str, dict[tuple[float, float], list[str]]], int]:
    decoder: WfstDecoder = _SWEEP["decoder"]
    scores: Mapping[str, np.ndarray] = _SWEEP["scores"]
    journal: SweepJournal | None = _SWEEP["journal"]
    before = decoder.num_partial
    words = {}
    for utt in counted(utts):
        words[utt] = decoder.decode_with_scales(
            scores[utt], _SWEEP["lm_weights"], word_penalties=_SWEEP["penalties"], utt=utt
        )
        if journal is not None:
            journal.add(utt, scores[utt], words[utt])
    return words, decoder.num_partial - before


class SweepJournal:
    """The utterances a :meth:`WfstDecoder.sweep` has finished, one line each, so that the
    sweep started again after a stop searches only the rest: a weak model's lattices take
    up to a minute an utterance, and a set of them can outlast a session.

    The file's first line says what was searched: ``identity`` (the caller's: the graph
    file, say), the decoder's beams, scale and active-state bounds, and the LM weights and
    penalties swept; a file that says otherwise is started afresh. Each utterance's line
    holds its words at every point and a digest of its scores, and is reused only where
    the scores are the same bit for bit (a retrained model's are not). A last line cut short
    by the stop is ignored. Lines are appended with one ``write`` each to a file opened for
    appending, so the forked jobs of one sweep can share the file.

    Args:
        path: the journal file.
        identity: what else the results depend on, as JSON-able values.
    """

    def __init__(self, path: str | Path, identity: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.identity = dict(identity)
        self._header: dict[str, Any] = {}

    def begin(self, decoder: WfstDecoder, lm_weights: Sequence[float], penalties: Sequence[float]) -> None:
        """Take this sweep's settings; a journal of other settings is removed."""
        self._header = {
            "identity": self.identity,
            "search": {
                name: float(getattr(decoder, name))
                for name in ("acoustic_scale", "beam", "lattice_beam", "max_active", "min_active")
            },
            "lm_weights": [float(w) for w in lm_weights],
            "word_penalties": [float(p) for p in penalties],
        }
        try:
            with open(self.path, encoding="utf-8") as f:
                same = json.loads(f.readline()) == self._header
        except (OSError, ValueError):
            same = False
        if not same:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.unlink(missing_ok=True)
            self._write(self._header)

    def finished(self, scores: Mapping[str, np.ndarray]) -> dict[str, dict[tuple[float, float], list[str]]]:
        """The journal's utterances of ``scores`` whose scores it saw: ``utt -> point -> words``."""
        found: dict[str, dict[tuple[float, float], list[str]]] = {}
        with open(self.path, encoding="utf-8") as f:
            f.readline()
            for line in f:
                try:
                    entry = json.loads(line)
                    utt = entry["utt"]
                    words = {(float(w), float(p)): list(text) for w, p, text in entry["words"]}
                except (ValueError, KeyError, TypeError):
                    continue  # cut short by the stop
                if utt in scores and entry.get("digest") == _digest(scores[utt]):
                    found[utt] = words
        return found

    def add(self, utt: str, scores: np.ndarray, words: Mapping[tuple[float, float], list[str]]) -> None:
        """Record one utterance's words at every point."""
        entry = {
            "utt": utt,
            "digest": _digest(scores),
            "words": [[w, p, list(t)] for (w, p), t in words.items()],
        }
        self._write(entry)

    def done(self) -> None:
        """The sweep found every utterance: the journal has served."""
        self.path.unlink(missing_ok=True)

    def _write(self, entry: Mapping[str, Any]) -> None:
        data = (json.dumps(entry, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def _digest(scores: np.ndarray) -> str:
    """A digest of an utterance's scores: their type, shape and bytes."""
    array = np.ascontiguousarray(scores)
    h = hashlib.blake2b(f"{array.dtype.str}{array.shape}".encode(), digest_size=16)
    h.update(array.tobytes())
    return h.hexdigest()


def wfst_search(graph: Any, transitions: Any, wfst: WfstConfig, *, acoustic_scale: float) -> WfstDecoder:
    """The lattice search through ``graph`` (a loaded graph dir) with the ``wfst``
    settings' beams: stages 5 and 7 and a SAT system's first pass on audio build it here."""
    return WfstDecoder.from_graph_dir(
        graph,
        transitions,
        beam=wfst.beam,
        lattice_beam=wfst.lattice_beam,
        max_active=wfst.max_active,
        acoustic_scale=acoustic_scale,
    )
