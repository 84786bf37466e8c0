"""GMM-HMM training and alignment, in the shape of Kaldi's ``steps/train_mono.sh``,
``steps/align_si.sh`` and ``steps/train_deltas.sh``.

Kaldi's own C++ (k2-fsa's ``kaldi_hmm_gmm``) does the numerical work: the transition
model, diagonal GMMs and their maximum-likelihood update with mixing-up, training-graph
compilation and Viterbi alignment. This module runs the recipe around it:

- monophones: one Gaussian per HMM state from the global mean and variance, an equally
  spaced alignment, then ``mono_iters`` rounds of accumulate + update, realigning at the
  iterations Kaldi realigns at and adding Gaussians up to ``mono_gauss``;
- triphones: tree statistics from the previous alignment, questions from clustering the
  phones, a decision tree of at most ``tri_leaves`` tied states (:mod:`asrkit.gmm.tree`),
  one Gaussian per leaf from its statistics, then ``tri_iters`` rounds as above;
- alignment of any data set with a trained system (``beam``, then ``retry_beam`` for the
  utterances that fail), failures counted and reported, never dropped silently beyond
  ``max_fail``.

Each system is saved as a Kaldi exp dir: ``final.mdl``, ``tree``, ``ali.1.gz`` (transition
ids), ``num_jobs``, ``phones.txt``, ``log``-able ``train.json``.
"""

from __future__ import annotations

import gzip
import heapq
import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kaldi_hmm_gmm as khg
import kaldifst
import numpy as np

from asrkit.data.io import atomic_write
from asrkit.data.kaldi_ark import write_ark
from asrkit.errors import DataError
from asrkit.gmm.config import GmmConfig
from asrkit.gmm.feats import GmmFeatures
from asrkit.gmm.lang import Lang
from asrkit.gmm.model_io import read_model, transition_id_to_pdf, transition_id_to_phone, write_model
from asrkit.gmm.tree import (
    Tree,
    TreeStats,
    accumulate_tree_stats,
    build_tree,
    make_questions,
    read_phone_sets,
    read_roots,
    read_tree,
)
from asrkit.progress import Progress, counted, map_forked
from asrkit.sigstack import quiet_worker

log = logging.getLogger(__name__)


@dataclass
class GmmSystem:
    """A trained GMM-HMM: lang, tree (context dependency), transition model and GMMs."""

    lang: Lang
    ctx_dep: khg.ContextDependency
    trans_model: khg.TransitionModel
    am: khg.AmDiagGmm
    #: ``(trans_model, tid2pdf, tid2phone)``: the tables are the transition model's structure
    #: (its tuples and topology), which training never changes, and deriving them goes through
    #: every tuple in Python, too slow to do for every utterance.
    _tables: tuple[khg.TransitionModel, np.ndarray, np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def _derived(self) -> tuple[khg.TransitionModel, np.ndarray, np.ndarray]:
        if self._tables is None or self._tables[0] is not self.trans_model:
            model = self.trans_model
            pdfs, phones = transition_id_to_pdf(model), transition_id_to_phone(model)
            pdfs.setflags(write=False)  # shared by every caller
            phones.setflags(write=False)
            self._tables = (model, pdfs, phones)
        return self._tables

    @property
    def tid2pdf(self) -> np.ndarray:
        """``(num_transition_ids + 1,)`` the pdf of every transition-id (entry 0 unused)."""
        return self._derived()[1]

    @property
    def tid2phone(self) -> np.ndarray:
        """``(num_transition_ids + 1,)`` the phone of every transition-id (entry 0: 0)."""
        return self._derived()[2]

    def save(self, out_dir: Path) -> None:
        """``final.mdl`` and ``tree`` in Kaldi's binary formats, plus ``phones.txt``."""
        out_dir.mkdir(parents=True, exist_ok=True)
        write_model(out_dir / "final.mdl", self.trans_model, am_gmm=self.am)
        tmp = out_dir / "tree.tmp"
        self.ctx_dep.write(True, str(tmp))
        tmp.replace(out_dir / "tree")
        shutil.copyfile(self.lang.path / "phones.txt", out_dir / "phones.txt")

    @classmethod
    def load(cls, exp_dir: Path, lang: Lang, *, model: str = "final.mdl") -> GmmSystem:
        """A GMM exp dir's ``model`` (``final.mdl``; a SAT dir's ``final.alimdl``) and tree."""
        read = read_model(Path(exp_dir) / model)
        if read.am_gmm is None:
            raise DataError(f"{Path(exp_dir) / model}: holds no GMM ({read.followed_by}); not a GMM exp dir")
        return cls(lang, read_tree(Path(exp_dir) / "tree"), read.transition_model(), read.am_gmm)

    def log_likelihoods(self, feats: np.ndarray) -> np.ndarray:
        """``(T, num_pdfs)`` GMM log-likelihoods of ``feats`` ``(T, D)``."""
        out = np.empty((feats.shape[0], self.am.num_pdfs), dtype=np.float32)
        for pdf in range(self.am.num_pdfs):
            comp = self.am.get_pdf(pdf).log_likelihoods_matrix(feats)
            top = comp.max(axis=1)
            out[:, pdf] = top + np.log(np.exp(comp - top[:, None]).sum(axis=1))
        return out


def _phone2num_pdf_classes(topo: khg.HmmTopology, phones: Sequence[int]) -> list[int]:
    table = [0] * (max(phones) + 1)
    for p in phones:
        table[p] = topo.num_pdf_classes(p)
    return table


def _gaussian(mean: np.ndarray, var: np.ndarray) -> khg.DiagGmm:
    gmm = khg.DiagGmm(nmix=1, dim=mean.shape[0])
    gmm.set_invvars_and_means((1.0 / var).astype(np.float32)[None, :], mean.astype(np.float32)[None, :])
    gmm.set_weights(np.ones(1, dtype=np.float32))
    gmm.compute_gconsts()
    return gmm


# ---------------------------------------------------------------- alignment


class GraphCompiler:
    """Training graphs (one linear word sequence through L, expanded to HMM states) for
    a set of transcripts; compiled without transition probabilities, which are added from
    the current model at each alignment (as ``gmm-align-compiled`` does)."""

    def __init__(self, system: GmmSystem) -> None:
        self._build(system.lang, system.ctx_dep, system.trans_model)

    @classmethod
    def from_parts(
        cls, lang: Lang, ctx_dep: khg.ContextDependency, trans_model: khg.TransitionModel
    ) -> GraphCompiler:
        """A compiler for a system known by its parts (no GMMs: a hybrid's alignment model)."""
        compiler = cls.__new__(cls)
        compiler._build(lang, ctx_dep, trans_model)
        return compiler

    def _build(self, lang: Lang, ctx_dep: khg.ContextDependency, trans_model: khg.TransitionModel) -> None:
        # Kaldi's compiler keeps references to its arguments: so does this object.
        self.lang, self._parts = lang, (ctx_dep, trans_model)
        lexicon = lang.lexicon_fst()
        kaldifst.arcsort(lexicon, sort_type="olabel")
        opts = khg.TrainingGraphCompilerOptions(transition_scale=0.0, self_loop_scale=0.0, reorder=True)
        self._compiler = khg.TrainingGraphCompiler(trans_model, ctx_dep, lexicon, lang.disambig, opts)

    def compile(
        self, texts: Mapping[str, str], *, where: str, unknown_ok: bool = False, quiet: bool = False
    ) -> dict[str, kaldifst.StdVectorFst]:
        """Graphs of ``texts``; a word the lexicon lacks is an error, or with ``unknown_ok``
        (sets aligned, not trained on) the lang's unknown word (noted in the log unless
        ``quiet``)."""
        graphs = {}
        unknown = 0
        for utt, text in texts.items():
            words = self.lang.word_ids(text, utt=utt, where=where, unknown_ok=unknown_ok)
            unknown += sum(w not in self.lang.words for w in text.split())
            graph = self._compiler.compile_graph_from_text(words)
            if graph.num_states == 0:
                raise DataError(f"{where}: utterance {utt}: its training graph is empty; check its words")
            graphs[utt] = graph
        if unknown and not quiet:
            log.info("%s: %d word(s) not in the lexicon aligned as %s", where, unknown, self.lang.oov)
        return graphs


@dataclass
class AlignResult:
    alignments: dict[str, list[int]]
    failed: list[str]
    retried: int
    log_like: float
    frames: int

    @property
    def like_per_frame(self) -> float:
        return self.log_like / max(1, self.frames)


# Fork-shared state of one alignment pass (set before the pool forks; read by workers).
_PASS: dict[str, object] = {}


def align_compiled(
    graph: kaldifst.StdVectorFst,
    trans_model: khg.TransitionModel,
    decodable: khg.DecodableInterface,
    *,
    utt: str,
    beam: float,
    retry_beam: float,
    acoustic_scale: float,
    transition_scale: float,
    self_loop_scale: float,
) -> tuple[bool, int, float, int, list[int]]:
    """Kaldi's ``gmm-align-compiled`` for one utterance: a copy of its training ``graph``
    with the HMMs' transition probabilities added, Viterbi-aligned to ``decodable``.
    Returns (aligned, retried, log-likelihood, frames, transition-id alignment)."""
    graph = kaldifst.StdVectorFst(graph)
    khg.add_transition_probs(
        trans_model=trans_model,
        disambig_syms=[],
        transition_scale=transition_scale,
        self_loop_scale=self_loop_scale,
        fst=graph,
    )
    config = khg.AlignConfig(beam=beam, retry_beam=retry_beam, careful=False)
    done, _, retry, tot, nframes, ali, _ = khg.align_utterance_wrapper(
        config, utt, acoustic_scale, graph, decodable, 0, 0, 0, 0.0, 0
    )
    return bool(done), int(retry), float(tot), int(nframes), list(ali)


def _align_chunk(utts: list[str]) -> tuple[dict[str, list[int]], list[str], int, float, int]:
    system: GmmSystem = _PASS["system"]  # type: ignore[assignment]
    feats: GmmFeatures = _PASS["feats"]  # type: ignore[assignment]
    graphs: dict[str, kaldifst.StdVectorFst] = _PASS["graphs"]  # type: ignore[assignment]
    cfg: GmmConfig = _PASS["cfg"]  # type: ignore[assignment]
    am: khg.AmDiagGmm = _PASS["am"]
    out: dict[str, list[int]] = {}
    failed: list[str] = []
    retried, like, frames = 0, 0.0, 0
    for utt in counted(utts):
        x = feats(utt)
        decodable = khg.DecodableAmDiagGmmScaled(am, system.trans_model, x, cfg.acoustic_scale)
        done, retry, tot, nframes, ali = align_compiled(
            graphs[utt],
            system.trans_model,
            decodable,
            utt=utt,
            beam=cfg.beam,
            retry_beam=cfg.retry_beam,
            acoustic_scale=cfg.acoustic_scale,
            transition_scale=cfg.transition_scale,
            self_loop_scale=cfg.self_loop_scale,
        )
        retried += retry
        if done and len(ali) == x.shape[0]:
            out[utt] = ali
            like += tot
            frames += nframes
        else:
            failed.append(utt)
    return out, failed, retried, like, frames


def boosted(system: GmmSystem, factor: float) -> khg.AmDiagGmm:
    """The GMMs with the silence states' likelihoods scaled by ``factor`` (Kaldi's
    ``gmm-boost-silence``), for alignment."""
    if factor == 1.0:
        return system.am
    am = khg.AmDiagGmm()
    am.copy_from_am_diag_gmm(system.am)
    ok, pdfs = khg.get_pdfs_for_phones(system.trans_model, system.lang.silence)
    for pdf in pdfs:
        gmm = am.get_pdf(pdf)
        gmm.set_weights((gmm.weights * factor).astype(np.float32))
        gmm.compute_gconsts()
    return am


def align(
    system: GmmSystem,
    feats: GmmFeatures,
    graphs: Mapping[str, kaldifst.StdVectorFst],
    cfg: GmmConfig,
    *,
    where: str,
    may_fail: frozenset[str] = frozenset(),
) -> AlignResult:
    """Viterbi-align every utterance of ``graphs`` (``gmm-align-compiled``) in ``cfg.nj`` jobs.

    ``may_fail``: utterances whose failure is expected (words the lexicon lacks, aligned as
    the unknown word, whose phone may have no training data): left out with a note, not
    counted against ``cfg.max_fail``.

    Raises:
        DataError: more than ``cfg.max_fail`` of the utterances failed to align (first ids
            named); fewer are reported and left out of the result.
    """
    utts = list(graphs)
    _PASS.update(system=system, feats=feats, graphs=graphs, cfg=cfg, am=boosted(system, cfg.boost_silence))
    nj = max(1, min(cfg.nj, len(utts)))
    chunks = [utts[j::nj] for j in range(nj)]
    try:
        # A pass over a large set takes minutes; the iteration lines come only after it.
        with Progress(f"aligning {where}", total=len(utts)) as progress:
            if nj == 1:
                parts = [_align_chunk(chunks[0])]
            else:
                jobs = [(chunk,) for chunk in chunks]
                parts = map_forked(_align_chunk, jobs, nj=nj, progress=progress, initializer=quiet_worker)
    finally:
        _PASS.clear()
    result = AlignResult({}, [], 0, 0.0, 0)
    for ali, failed, retried, like, frames in parts:
        result.alignments.update(ali)
        result.failed += failed
        result.retried += retried
        result.log_like += like
        result.frames += frames
    result.alignments = {u: result.alignments[u] for u in utts if u in result.alignments}
    excused = sorted(u for u in result.failed if u in may_fail)
    if excused:
        log.info(
            "%s: %d utterance(s) with words the lexicon lacks did not align (first: %s); left out",
            where,
            len(excused),
            ", ".join(excused[:5]),
        )
        result.failed = [u for u in result.failed if u not in may_fail]
    if result.failed:
        share = len(result.failed) / len(utts)
        message = (
            f"{where}: {len(result.failed)} of {len(utts)} utterances failed to align "
            f"(first: {', '.join(sorted(result.failed)[:5])})"
        )
        if share > cfg.max_fail:
            raise DataError(
                f"{message}, more than gmm.max_fail={cfg.max_fail:g}; check their transcripts and audio, "
                "or raise gmm.retry_beam"
            )
        log.warning("%s; they are left out", message)
    return result


# ---------------------------------------------------------------- estimation


def _accumulate(
    system: GmmSystem, feats: GmmFeatures, alignments: Mapping[str, Sequence[int]]
) -> tuple[khg.AccumAmDiagGmm, np.ndarray, float, int]:
    """``gmm-acc-stats-ali``: GMM and transition statistics of the aligned frames."""
    acc = khg.AccumAmDiagGmm()
    acc.init(system.am, khg.str_to_gmm_flags("mvwt"))
    tid2pdf = system.tid2pdf
    trans_stats = np.zeros(system.trans_model.num_transition_ids + 1, dtype=np.float64)
    like, frames = 0.0, 0
    for utt, ali in alignments.items():
        x = feats(utt)
        tids = np.asarray(ali, dtype=np.int64)
        trans_stats += np.bincount(tids, minlength=trans_stats.shape[0])
        for row, pdf in zip(x, tid2pdf[tids].tolist(), strict=True):
            like += acc.accumulate_for_gmm(system.am, row, pdf, 1.0)
        frames += len(tids)
    return acc, trans_stats, like, frames


def _update(
    system: GmmSystem,
    acc: khg.AccumAmDiagGmm,
    trans_stats: np.ndarray | None,
    *,
    mix_up: int,
    power: float,
    rng: np.random.Generator,
    min_gaussian_occupancy: float = 10.0,
) -> None:
    """``gmm-est``: ML update of the GMMs (and transitions), then mixing up to ``mix_up``."""
    opts = khg.MleDiagGmmOptions(min_gaussian_occupancy=min_gaussian_occupancy)
    khg.mle_am_diag_gmm_update(opts, acc, khg.str_to_gmm_flags("mvw"), system.am)
    if trans_stats is not None:
        system.trans_model.mle_update(trans_stats[:, None], khg.MleTransitionUpdateConfig())
    if mix_up > system.am.num_gauss:
        occs = np.array([acc.get_acc(p).occupancy.sum() for p in range(system.am.num_pdfs)])
        mix_up_gmms(system.am, occs, mix_up, power=power, rng=rng)


def split_targets(occs: np.ndarray, target: int, *, power: float, min_count: float) -> np.ndarray:
    """Gaussians per state when mixing up to ``target`` in all (Kaldi's ``GetSplitTargets``):
    each extra Gaussian goes to the state with the most ``occupancy ** power`` per Gaussian,
    while a state keeps at least ``min_count`` frames per Gaussian."""
    weight = np.power(np.maximum(occs, 0.0), power)
    counts = np.ones(len(occs), dtype=np.int64)
    heap = [(-weight[i], i) for i in range(len(occs))]
    heapq.heapify(heap)
    total = len(occs)
    while total < target and heap:
        _, i = heapq.heappop(heap)
        if occs[i] / (counts[i] + 1) < min_count:
            continue  # this state has too little data for another Gaussian
        counts[i] += 1
        total += 1
        heapq.heappush(heap, (-weight[i] / counts[i], i))
    return counts


def mix_up_gmms(
    am: khg.AmDiagGmm,
    occs: np.ndarray,
    target: int,
    *,
    power: float,
    rng: np.random.Generator,
    min_count: float = 20.0,
    perturb: float = 0.01,
) -> None:
    """Kaldi's ``AmDiagGmm::SplitByCount`` with asrkit's seeded generator (the bindings'
    own draws from ``std::random_device``, so two runs would differ): each state's heaviest
    Gaussian is split in two, half the weight each, means moved apart by ``perturb``
    standard deviations in a random direction, until it has its share of ``target``."""
    targets = split_targets(occs, target, power=power, min_count=min_count)
    for pdf in range(am.num_pdfs):
        gmm = am.get_pdf(pdf)
        have = gmm.num_gauss
        if targets[pdf] <= have:
            continue
        weights = np.array(gmm.weights, dtype=np.float64)
        means = np.array(gmm.means, dtype=np.float64)
        variances = np.array(gmm.vars, dtype=np.float64)
        for _ in range(int(targets[pdf]) - have):
            k = int(np.argmax(weights))
            weights[k] /= 2
            shift = perturb * np.sqrt(variances[k]) * rng.standard_normal(means.shape[1])
            weights = np.append(weights, weights[k])
            means = np.vstack([means, means[k] + shift])
            means[k] -= shift
            variances = np.vstack([variances, variances[k]])
        gmm.resize(len(weights), means.shape[1])
        gmm.set_invvars_and_means((1.0 / variances).astype(np.float32), means.astype(np.float32))
        gmm.set_weights(weights.astype(np.float32))
        gmm.compute_gconsts()


def _log_round(kind: str, it: int, like: float, frames: int, system: GmmSystem, began: float) -> None:
    log.info(
        "%s iteration %d: log-likelihood per frame %.3f over %d frames, %d Gaussians (%.0f s)",
        kind,
        it + 1,
        like / max(1, frames),
        frames,
        system.am.num_gauss,
        time.monotonic() - began,
    )


def _gauss_schedule(start: int, target: int, iters: int) -> list[int]:
    """Gaussians after each round: linear growth to ``target`` over the first 3/4 of the
    rounds (Kaldi's ``max_iter_inc``), as integers."""
    grow = max(1, (iters * 3) // 4)
    step = max(0.0, (target - start) / grow)
    return [int(round(min(target, start + step * (i + 1)))) for i in range(iters)]


def train_mono(
    lang: Lang,
    feats: GmmFeatures,
    texts: Mapping[str, str],
    cfg: GmmConfig,
    *,
    where: str = "text",
    seed: int = 0,
) -> tuple[GmmSystem, AlignResult]:
    """Kaldi's ``train_mono.sh``: a monophone system and its final alignment of ``texts``
    (bitwise the same for the same ``seed``, which drives the mixing-up)."""
    rng = np.random.default_rng(seed)
    topo = lang.topology()
    phones = lang.real_phones
    ctx_dep = khg.monophone_context_dependency(phones, _phone2num_pdf_classes(topo, phones))
    trans_model = khg.TransitionModel(ctx_dep, topo)
    # gmm-init-mono: every state starts as the global Gaussian of (a share of) the data.
    sample = [feats(u) for u in list(texts)[: max(10, len(texts) // 10)]]
    stacked = np.concatenate(sample)
    am = khg.AmDiagGmm()
    am.init(_gaussian(stacked.mean(0), np.maximum(stacked.var(0), 1e-3)), trans_model.num_pdfs)
    system = GmmSystem(lang, ctx_dep, trans_model, am)
    graphs = GraphCompiler(system).compile(texts, where=where)

    began = time.monotonic()
    alignments = {}
    for seed, (utt, graph) in enumerate(graphs.items()):
        frames = feats(utt).shape[0]
        ok, path = kaldifst.equal_align(graph, frames, seed)
        if not ok:
            log.warning(
                "%s: utterance %s: too short (%d frames) for its transcript; left out", where, utt, frames
            )
            continue
        ok, tids, _, _ = kaldifst.get_linear_symbol_sequence(path)
        alignments[utt] = list(tids)
    if len(alignments) < (1 - cfg.max_fail) * len(graphs):
        raise DataError(
            f"{where}: {len(graphs) - len(alignments)} of {len(graphs)} utterances are too short for "
            "their transcripts; check the data dir"
        )
    schedule = _gauss_schedule(am.num_gauss, cfg.mono_gauss, cfg.mono_iters)
    result = AlignResult(alignments, [], 0, 0.0, 0)
    for it in range(cfg.mono_iters):
        if it in cfg.mono_realign:
            result = align(system, feats, graphs, cfg, where=where)
            alignments = result.alignments
        acc, trans_stats, like, frames = _accumulate(system, feats, alignments)
        _update(
            system,
            acc,
            trans_stats,
            mix_up=schedule[it],
            power=cfg.power,
            rng=rng,
            min_gaussian_occupancy=3.0 if it == 0 else 10.0,
        )
        _log_round("mono", it, like, frames, system, began)
    result = align(system, feats, graphs, cfg, where=where)
    return system, result


def build_triphone_tree(
    lang: Lang,
    feats: GmmFeatures,
    previous: GmmSystem,
    alignments: Mapping[str, Sequence[int]],
    *,
    num_leaves: int,
) -> tuple[Tree, TreeStats]:
    """Kaldi's ``acc-tree-stats`` + ``cluster-phones`` + ``build-tree``: a decision tree of
    at most ``num_leaves`` leaves from ``previous``'s alignment, and its statistics."""
    stats = accumulate_tree_stats(previous.trans_model, ((alignments[u], feats(u)) for u in alignments))
    questions = make_questions(
        stats,
        extra_questions=read_phone_sets(lang.path / "phones" / "extra_questions.txt"),
        num_pdf_classes=max(lang.topology().num_pdf_classes(p) for p in lang.real_phones),
    )
    roots = read_roots(lang.path / "phones" / "roots.txt")
    return build_tree(stats, roots=roots, questions=questions, num_leaves=num_leaves), stats


def train_triphone(
    lang: Lang,
    feats: GmmFeatures,
    texts: Mapping[str, str],
    previous: GmmSystem,
    alignments: Mapping[str, Sequence[int]],
    cfg: GmmConfig,
    *,
    num_leaves: int,
    num_gauss: int,
    where: str = "text",
    seed: int = 0,
    tree: tuple[Tree, TreeStats] | None = None,
    after_round: Callable[[int, GmmSystem, AlignResult], Any] | None = None,
) -> tuple[GmmSystem, AlignResult, Tree]:
    """Kaldi's ``train_deltas.sh``: a tree from ``previous``'s alignment (or ``tree``, a
    :func:`build_triphone_tree` result), a triphone system with at most ``num_leaves`` tied
    states and ``num_gauss`` Gaussians, and its final alignment of ``texts``.
    ``after_round(round, system, alignment)`` runs after each round's update; features it
    returns replace ``feats`` from then on (an MLLT re-estimation changes them)."""
    began = time.monotonic()
    rng = np.random.default_rng(seed)
    built, stats = tree or build_triphone_tree(lang, feats, previous, alignments, num_leaves=num_leaves)
    ctx_dep = built.context_dependency()
    trans_model = khg.TransitionModel(ctx_dep, lang.topology())
    _, means, variances = built.leaf_stats(stats)
    am = khg.AmDiagGmm()
    for leaf in range(built.num_leaves):
        # gmm-init-model: one Gaussian per leaf from the statistics of its events.
        am.add_pdf(_gaussian(means[leaf], np.maximum(variances[leaf], 1e-3)))
    system = GmmSystem(lang, ctx_dep, trans_model, am)
    log.info(
        "tree: %d leaves (asked for at most %d) from %d events; built in %.1f s",
        built.num_leaves,
        num_leaves,
        len(stats.counts),
        time.monotonic() - began,
    )
    graphs = GraphCompiler(system).compile({u: texts[u] for u in texts}, where=where)
    schedule = _gauss_schedule(am.num_gauss, num_gauss, cfg.tri_iters)
    result = AlignResult({}, [], 0, 0.0, 0)
    for it in range(cfg.tri_iters):
        # The first round aligns with the tree's single Gaussians (Kaldi converts the old
        # alignment instead; aligning afresh is as good and needs no convert-ali).
        if it == 0 or it in cfg.tri_realign:
            result = align(system, feats, graphs, cfg, where=where)
        acc, trans_stats, like, frames = _accumulate(system, feats, result.alignments)
        _update(system, acc, trans_stats, mix_up=schedule[it], power=0.2, rng=rng)
        _log_round("triphone", it, like, frames, system, began)
        if after_round is not None:
            feats = after_round(it, system, result) or feats
    result = align(system, feats, graphs, cfg, where=where)
    return system, result, built


def write_alignment_dir(
    out_dir: Path,
    system: GmmSystem,
    result: AlignResult,
    *,
    extra: dict | None = None,
    files: Callable[[Path], None] | None = None,
) -> None:
    """A Kaldi GMM exp/ali dir: ``final.mdl``, ``tree``, ``ali.1.gz`` (transition ids),
    ``num_jobs``, ``phones.txt`` and ``align.json`` (counts), replaced as a whole;
    ``files(dir)`` writes any more (a speaker-adapted system's transforms)."""
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        system.save(tmp)
        if files is not None:
            files(tmp)
        ark = tmp / "ali.1.ark"
        write_ark(
            ark,
            ((u, np.asarray(result.alignments[u], dtype=np.int32)) for u in sorted(result.alignments)),
            kind="int",
        )
        with gzip.open(tmp / "ali.1.gz", "wb") as handle:
            handle.write(ark.read_bytes())
        ark.unlink()
        atomic_write(tmp / "num_jobs", "1\n")
        record = {
            "aligned": len(result.alignments),
            "failed": sorted(result.failed),
            "retried": result.retried,
            "log_like_per_frame": round(result.like_per_frame, 4),
            "num_pdfs": system.am.num_pdfs,
            "num_gauss": system.am.num_gauss,
            **(extra or {}),
        }
        atomic_write(tmp / "align.json", json.dumps(record, indent=2) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:  # a full disk, say: no half-written dir is left behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise


__all__ = [
    "AlignResult",
    "GmmConfig",
    "GmmSystem",
    "GraphCompiler",
    "align",
    "train_mono",
    "train_triphone",
    "write_alignment_dir",
]
