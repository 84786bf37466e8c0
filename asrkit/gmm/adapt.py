"""The statistics of :mod:`asrkit.gmm.transforms` gathered from a GMM system and its
alignments, features through a transform, and the LDA+MLLT system (Kaldi's
``train_lda_mllt.sh``: ±3 spliced MFCC + CMVN projected by LDA on tied-state classes with
silence weighted out, MLLT re-estimated on given training rounds and folded into the
model's means and the features' transform).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from asrkit.data.kaldi_ark import write_ark
from asrkit.errors import DataError
from asrkit.gmm.config import GmmConfig
from asrkit.gmm.feats import GmmFeatures
from asrkit.gmm.lang import Lang
from asrkit.gmm.train import (
    AlignResult,
    GmmSystem,
    GraphCompiler,
    align,
    build_triphone_tree,
    train_triphone,
)
from asrkit.gmm.transforms import (
    FmllrStats,
    GaussianMoments,
    LdaStats,
    MlltStats,
    apply_affine,
    compose,
    estimate_fmllr,
    estimate_lda,
    estimate_mllt,
    read_matrix,
    splice,
    write_matrix,
)

__all__ = [
    "ALIMDL",
    "FINAL_MAT",
    "TRANSFORMS",
    "Adaptation",
    "TestAdaptation",
    "TransformedFeatures",
    "adapt_test_speakers",
    "align_adapted",
    "alignment_model",
    "system_features",
    "gaussian_moments",
    "gaussian_stats",
    "gaussians",
    "lda_stats",
    "silence_weights",
    "speaker_transforms",
    "train_lda_mllt",
    "train_sat",
    "transforms_from_hypotheses",
    "transform_means",
]

log = logging.getLogger(__name__)


class TransformedFeatures:
    """A GMM data dir's MFCC + CMVN (no deltas), spliced ``context`` frames either side and
    through ``transform`` (``(k, D)`` or ``(k, D + 1)``); with ``speakers``, each speaker's
    own affine transform (fMLLR) after it. Reads like :class:`GmmFeatures`."""

    def __init__(
        self,
        base: GmmFeatures,
        transform: np.ndarray,
        *,
        context: int = 3,
        speakers: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.base, self.transform, self.context = base, transform, context
        self.speakers = dict(speakers or {})
        self.data, self.data_dir = base.data, base.data_dir

    @property
    def utt_ids(self) -> list[str]:
        return self.base.utt_ids

    def unadapted(self) -> TransformedFeatures:
        """The same features without the speakers' transforms."""
        return TransformedFeatures(self.base, self.transform, context=self.context)

    def spliced(self, utt: str) -> np.ndarray:
        return splice(np.asarray(self.base(utt), dtype=np.float64), self.context)

    def __call__(self, utt: str) -> np.ndarray:
        where = f"{self.data_dir}: utterance {utt}"
        feats = apply_affine(self.transform, self.spliced(utt), where=f"{where} (final.mat)")
        speaker = self.data.utt2spk[utt]
        if speaker in self.speakers:
            feats = apply_affine(
                self.speakers[speaker], feats, where=f"{where} (speaker {speaker}'s fMLLR transform)"
            )
        return feats.astype(np.float32)

    def __iter__(self) -> Iterator[tuple[str, np.ndarray]]:
        for utt in self.utt_ids:
            yield utt, self(utt)


def silence_weights(
    system: GmmSystem, tids: Sequence[int] | np.ndarray, *, silence_weight: float
) -> np.ndarray:
    """Per frame, ``silence_weight`` where the alignment is in a silence phone, else 1
    (Kaldi's ``weight-silence-post``)."""
    phones = system.tid2phone[np.asarray(tids, dtype=np.int64)]
    return np.where(np.isin(phones, system.lang.silence), silence_weight, 1.0)


def lda_stats(
    system: GmmSystem,
    feats: TransformedFeatures,
    alignments: Mapping[str, Sequence[int]],
    *,
    silence_weight: float = 0.0,
) -> LdaStats:
    """LDA statistics of the spliced features, a class per tied state (pdf) of ``system``'s
    alignments, silence frames weighted by ``silence_weight`` (Kaldi's ``acc-lda``)."""
    tid2pdf = system.tid2pdf
    stats: LdaStats | None = None
    for utt, ali in alignments.items():
        x = feats.spliced(utt)
        if stats is None:
            stats = LdaStats(dim=x.shape[1], classes=system.am.num_pdfs)
        tids = np.asarray(ali, dtype=np.int64)
        stats.add(x, tid2pdf[tids], silence_weights(system, tids, silence_weight=silence_weight))
    if stats is None:
        raise ValueError("lda_stats needs at least one aligned utterance")
    return stats


def gaussians(system: GmmSystem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every Gaussian of ``system``, pdf by pdf: the first Gaussian's number per pdf
    ``(pdfs + 1,)`` (the last entry is their total), the means and the variances ``(M, D)``."""
    gmms = [system.am.get_pdf(pdf) for pdf in range(system.am.num_pdfs)]
    first = np.concatenate([[0], np.cumsum([g.num_gauss for g in gmms])])
    means = np.concatenate([np.asarray(g.means, dtype=np.float64) for g in gmms])
    variances = np.concatenate([np.asarray(g.vars, dtype=np.float64) for g in gmms])
    return first, means, variances


def gaussian_moments(
    system: GmmSystem,
    feats: Mapping[str, np.ndarray] | TransformedFeatures | GmmFeatures,
    alignments: Mapping[str, Sequence[int]],
    *,
    silence_weight: float = 1.0,
    posterior_feats: TransformedFeatures | GmmFeatures | None = None,
) -> GaussianMoments:
    """The aligned frames' moments per Gaussian of ``system`` (numbered as
    :func:`gaussians`), each frame shared among its tied state's Gaussians by their
    posteriors (Kaldi's ``ali-to-post`` + Gaussian-level accumulation), silence frames
    weighted by ``silence_weight``. With ``posterior_feats``, the posteriors come from those
    features and the moments from ``feats`` (Kaldi's ``gmm-acc-stats-twofeats``)."""

    def read(source: Mapping[str, np.ndarray] | TransformedFeatures | GmmFeatures, utt: str) -> np.ndarray:
        return np.asarray(source[utt] if isinstance(source, Mapping) else source(utt), dtype=np.float64)

    tid2pdf = system.tid2pdf
    first, means, _ = gaussians(system)
    moments: GaussianMoments | None = None
    chunk: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    held = 0
    for utt, ali in alignments.items():
        tids = np.asarray(ali, dtype=np.int64)
        x = read(feats, utt)
        y = x if posterior_feats is None else read(posterior_feats, utt)
        chunk.append((x, y, tid2pdf[tids], silence_weights(system, tids, silence_weight=silence_weight)))
        held += len(tids)
        if held >= _CHUNK_FRAMES:
            moments = _add_chunk(system, first, chunk, moments)
            chunk, held = [], 0
    if chunk:
        moments = _add_chunk(system, first, chunk, moments)
    return moments if moments is not None else GaussianMoments.zeros(len(means), means.shape[1])


#: Frames held at once by :func:`gaussian_moments` (float64 features, twice: ~0.6 GB at 40
#: dimensions), so a large training set is summed a chunk at a time.
_CHUNK_FRAMES = 1_000_000


def _add_chunk(
    system: GmmSystem,
    first: np.ndarray,
    chunk: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    moments: GaussianMoments | None,
) -> GaussianMoments:
    """Add a chunk's frames (features, posterior features, pdf, weight) to ``moments``,
    each tied state's frames scored in one call."""
    x = np.concatenate([c[0] for c in chunk])
    y = np.concatenate([c[1] for c in chunk])
    pdf = np.concatenate([c[2] for c in chunk])
    weight = np.concatenate([c[3] for c in chunk])
    if moments is None:
        moments = GaussianMoments.zeros(int(first[-1]), x.shape[1])
    keep = np.flatnonzero(weight > 0)
    order = keep[np.argsort(pdf[keep], kind="stable")]
    bounds = np.flatnonzero(np.diff(pdf[order])) + 1
    for rows in np.split(order, bounds):
        if not len(rows):
            continue
        p = int(pdf[rows[0]])
        scored = y[rows].astype(np.float32)
        comp = np.asarray(system.am.get_pdf(p).log_likelihoods_matrix(scored), dtype=np.float64)
        post = np.exp(comp - comp.max(axis=1, keepdims=True))
        post *= (weight[rows] / post.sum(axis=1))[:, None]
        moments.add(np.arange(first[p], first[p + 1]), x[rows], post)
    return moments


def gaussian_stats(
    system: GmmSystem,
    feats: Mapping[str, np.ndarray] | TransformedFeatures | GmmFeatures,
    alignments: Mapping[str, Sequence[int]],
    stats: MlltStats | FmllrStats,
    *,
    silence_weight: float = 1.0,
) -> None:
    """Add the aligned frames to ``stats`` with their posteriors over the Gaussians of
    their tied states (Kaldi's ``gmm-acc-mllt`` / ``gmm-est-fmllr`` accumulation)."""
    _, means, variances = gaussians(system)
    stats.add_moments(
        gaussian_moments(system, feats, alignments, silence_weight=silence_weight), means, variances
    )


def transform_means(system: GmmSystem, matrix: np.ndarray) -> None:
    """Every Gaussian's mean through ``matrix`` (square; Kaldi's ``gmm-transform-means``)."""
    for pdf in range(system.am.num_pdfs):
        gmm = system.am.get_pdf(pdf)
        means = np.asarray(gmm.means, dtype=np.float64) @ matrix.T
        gmm.set_means(means.astype(np.float32))
        gmm.compute_gconsts()


def train_lda_mllt(
    lang: Lang,
    base: GmmFeatures,
    texts: Mapping[str, str],
    previous: GmmSystem,
    alignments: Mapping[str, Sequence[int]],
    cfg: GmmConfig,
    *,
    num_leaves: int,
    num_gauss: int,
    dim: int = 40,
    context: int = 3,
    mllt_rounds: Sequence[int] = (1, 3, 5, 11),
    where: str = "text",
    seed: int = 0,
) -> tuple[GmmSystem, AlignResult, TransformedFeatures]:
    """Kaldi's ``train_lda_mllt.sh``: LDA to ``dim`` from ``previous``'s alignment, a tree
    and triphone system on the projected features, and MLLT re-estimated after each of
    ``mllt_rounds`` (0-based training rounds), folded into the means and the features'
    transform. Returns the system, its final alignment and its features (whose
    ``transform`` is the composed ``final.mat``)."""
    probe = TransformedFeatures(base, np.eye(1), context=context)
    lda = estimate_lda(lda_stats(previous, probe, alignments), dim)
    feats = TransformedFeatures(base, lda, context=context)
    tree = build_triphone_tree(lang, feats, previous, alignments, num_leaves=num_leaves)  # type: ignore[arg-type]

    def mllt(round_: int, system: GmmSystem, result: AlignResult) -> TransformedFeatures | None:
        nonlocal feats
        if round_ not in mllt_rounds:
            return None
        stats = MlltStats(dim=dim)
        gaussian_stats(system, feats, result.alignments, stats)
        before = feats.transform
        matrix, history = estimate_mllt(stats)
        transform_means(system, matrix)
        feats = TransformedFeatures(base, compose([before, matrix], before.shape[1]), context=context)
        log.info("MLLT after round %d: auxiliary %.4g per frame", round_, history[-1] / stats.beta)
        return feats

    system, result, _ = train_triphone(
        lang,
        feats,  # type: ignore[arg-type]
        texts,
        previous,
        alignments,
        cfg,
        num_leaves=num_leaves,
        num_gauss=num_gauss,
        where=where,
        seed=seed,
        tree=tree,
        after_round=mllt,
    )
    return system, result, feats


def speaker_transforms(
    system: GmmSystem,
    feats: TransformedFeatures,
    alignments: Mapping[str, Sequence[int]],
    *,
    silence_weight: float = 0.0,
    min_count: float = 50.0,
    iterations: int = 10,
) -> dict[str, np.ndarray]:
    """Each speaker's fMLLR transform ``(D, D + 1)`` of ``feats`` (with any transforms they
    already hold applied: the new one is composed after them) from ``system``'s posteriors
    along ``alignments``, silence frames weighted by ``silence_weight`` (Kaldi's
    ``gmm-est-fmllr``). A speaker with fewer than ``min_count`` weighted frames keeps what
    it had. Returns speaker -> the composed transform."""
    by_speaker: dict[str, dict[str, Sequence[int]]] = {}
    for utt, ali in alignments.items():
        by_speaker.setdefault(feats.data.utt2spk[utt], {})[utt] = ali
    out = dict(feats.speakers)
    dim = system.am.dim
    _, means, variances = gaussians(system)
    for speaker, utts in sorted(by_speaker.items()):
        stats = FmllrStats(dim=dim)
        stats.add_moments(
            gaussian_moments(system, feats, utts, silence_weight=silence_weight), means, variances
        )
        w, history = estimate_fmllr(stats, iterations=iterations, min_count=min_count)
        if not history:
            continue
        before = out.get(speaker)
        out[speaker] = w if before is None else compose([before, w], dim)
        log.debug(
            "fMLLR %s: %.0f frames, auxiliary gain %.3f per frame",
            speaker,
            stats.beta,
            history[-1] / stats.beta,
        )
    return out


def train_sat(
    lang: Lang,
    feats: TransformedFeatures,
    texts: Mapping[str, str],
    previous: GmmSystem,
    alignments: Mapping[str, Sequence[int]],
    cfg: GmmConfig,
    *,
    num_leaves: int,
    num_gauss: int,
    fmllr_rounds: Sequence[int] = (1, 5, 9),
    silence_weight: float = 0.0,
    where: str = "text",
    seed: int = 0,
) -> tuple[GmmSystem, AlignResult, TransformedFeatures]:
    """Kaldi's ``train_sat.sh``: every speaker's fMLLR transform estimated with
    ``previous`` (the LDA+MLLT system, on ``feats``, its features), a tree and triphone
    system on the adapted features, and the transforms re-estimated with the system being
    trained after each of ``fmllr_rounds`` (composed with the ones before). Returns the
    system, its final alignment and the adapted features (their ``speakers`` hold each
    training speaker's composed transform)."""
    speakers = speaker_transforms(previous, feats, alignments, silence_weight=silence_weight)
    adapted = TransformedFeatures(feats.base, feats.transform, context=feats.context, speakers=speakers)
    tree = build_triphone_tree(lang, adapted, previous, alignments, num_leaves=num_leaves)  # type: ignore[arg-type]

    def fmllr(round_: int, system: GmmSystem, result: AlignResult) -> TransformedFeatures | None:
        nonlocal adapted
        if round_ not in fmllr_rounds:
            return None
        updated = speaker_transforms(system, adapted, result.alignments, silence_weight=silence_weight)
        adapted = TransformedFeatures(feats.base, feats.transform, context=feats.context, speakers=updated)
        return adapted

    system, result, _ = train_triphone(
        lang,
        adapted,  # type: ignore[arg-type]
        texts,
        previous,
        alignments,
        cfg,
        num_leaves=num_leaves,
        num_gauss=num_gauss,
        where=where,
        seed=seed,
        tree=tree,
        after_round=fmllr,
    )
    return system, result, adapted


def alignment_model(
    system: GmmSystem,
    si_feats: TransformedFeatures,
    adapted: TransformedFeatures,
    alignments: Mapping[str, Sequence[int]],
    *,
    min_count: float = 10.0,
    var_floor: float = 1e-3,
) -> GmmSystem:
    """A SAT system's speaker-independent twin (Kaldi's ``final.alimdl``): the same tree,
    transitions and Gaussians, each Gaussian's weight, mean and variance re-estimated on the
    unadapted features ``si_feats`` with the posteriors the SAT system gives the adapted
    ones (``gmm-acc-stats-twofeats``). It aligns and decodes speakers before they have a
    transform. A Gaussian seen for ``min_count`` frames or fewer keeps the SAT values
    (``gmm-est``'s minimum Gaussian occupancy, 10)."""
    import kaldi_hmm_gmm as khg

    moments = gaussian_moments(system, si_feats, alignments, posterior_feats=adapted)
    first, means, variances = gaussians(system)
    am = khg.AmDiagGmm()
    am.copy_from_am_diag_gmm(system.am)
    for pdf in range(am.num_pdfs):
        at = slice(first[pdf], first[pdf + 1])
        n = moments.n[at]
        seen = n > min_count
        if not seen.any():
            continue
        mean, var = means[at].copy(), variances[at].copy()
        mean[seen] = moments.s[at][seen] / n[seen, None]
        second = np.einsum("mii->mi", moments.ss[at][seen]) / n[seen, None]
        var[seen] = np.maximum(second - mean[seen] ** 2, var_floor)
        gmm = am.get_pdf(pdf)
        gmm.set_invvars_and_means((1.0 / var).astype(np.float32), mean.astype(np.float32))
        weights = np.where(seen, n, 0.0) + np.where(seen, 0.0, np.asarray(gmm.weights) * n.sum())
        gmm.set_weights((weights / weights.sum()).astype(np.float32))
        gmm.compute_gconsts()
    return GmmSystem(system.lang, system.ctx_dep, system.trans_model, am)


def align_adapted(
    system: GmmSystem,
    alimdl: GmmSystem,
    si_feats: TransformedFeatures,
    graphs: Mapping[str, Any],
    cfg: GmmConfig,
    *,
    passes: int = 2,
    silence_weight: float = 0.0,
    where: str,
    may_fail: frozenset[str] = frozenset(),
) -> tuple[AlignResult, TransformedFeatures]:
    """Kaldi's ``align_fmllr.sh``: align ``graphs`` with the speaker-independent ``alimdl``
    on ``si_feats``, estimate each speaker's fMLLR transform for the SAT ``system`` from
    that alignment, then ``passes`` times realign with ``system`` through the adapted
    features and re-estimate (composed with the transform before). Returns the last
    alignment and the adapted features (``speakers``: each speaker's transform)."""
    adapted = TransformedFeatures(si_feats.base, si_feats.transform, context=si_feats.context)
    result = align(alimdl, adapted, graphs, cfg, where=where, may_fail=may_fail)  # type: ignore[arg-type]
    for _ in range(passes):
        speakers = speaker_transforms(system, adapted, result.alignments, silence_weight=silence_weight)
        adapted = TransformedFeatures(
            si_feats.base, si_feats.transform, context=si_feats.context, speakers=speakers
        )
        result = align(system, adapted, graphs, cfg, where=where, may_fail=may_fail)  # type: ignore[arg-type]
    return result, adapted


def transforms_from_hypotheses(
    system: GmmSystem,
    alimdl: GmmSystem,
    si_feats: TransformedFeatures,
    hypotheses: Mapping[str, str],
    cfg: GmmConfig,
    *,
    passes: int = 2,
    silence_weight: float = 0.0,
    where: str = "first-pass hypotheses",
) -> dict[str, np.ndarray]:
    """Test speakers' fMLLR transforms for the SAT ``system`` from their own audio and the
    first pass's ``hypotheses`` only, never a reference: :func:`align_adapted` over the
    hypotheses (Kaldi's ``decode_fmllr.sh`` estimates from first-pass lattice posteriors;
    a hypothesis' best alignment stands in for them here). Utterances whose hypothesis is
    empty or cannot be aligned add nothing."""
    usable = {u: text for u, text in hypotheses.items() if text.strip()}
    graphs = GraphCompiler(system).compile(usable, where=where, unknown_ok=True)
    _, adapted = align_adapted(
        system,
        alimdl,
        si_feats,
        graphs,
        cfg,
        passes=passes,
        silence_weight=silence_weight,
        where=where,
        may_fail=frozenset(graphs),
    )
    return adapted.speakers


@dataclass
class TestAdaptation:
    """A set's test speakers adapted from their own audio (:func:`adapt_test_speakers`):
    the speaker-independent first pass's hypotheses, each speaker's final transform, and
    the hypotheses of every adapted pass the transforms were re-estimated from."""

    first_pass: dict[str, str]
    speakers: dict[str, np.ndarray]
    adapted_passes: list[dict[str, str]] = field(default_factory=list)


def adapt_test_speakers(
    system: GmmSystem,
    alimdl: GmmSystem,
    si_feats: TransformedFeatures,
    search: Any,
    point: tuple[float, float],
    cfg: GmmConfig,
    *,
    estimates: int = 1,
    nj: int = 1,
    label: str = "first pass",
    where: str = "first-pass hypotheses",
) -> TestAdaptation:
    """The test speakers' fMLLR transforms of a SAT ``system`` from their audio alone, as
    Kaldi's ``decode_fmllr.sh``: ``alimdl`` decodes the speaker-independent features
    ``si_feats`` through ``search`` (a :class:`~asrkit.decoding.wfst.WfstDecoder`) at
    ``point`` (LM weight, word penalty) and the transforms are estimated from those
    hypotheses. With ``estimates`` > 1 the SAT model then decodes the adapted features
    at the same point and the transforms are estimated again from its (better) hypotheses,
    as ``decode_fmllr.sh``'s final fMLLR does from the adapted lattice. No reference is read.
    """
    from asrkit.decoding.wfst import first_pass_words
    from asrkit.progress import Progress

    if estimates < 1:
        raise ValueError(f"estimates={estimates}: at least one")
    result: TestAdaptation | None = None
    model, feats = alimdl, si_feats  # the first pass: speaker-independent
    for round_ in range(1, estimates + 1):
        name = label if round_ == 1 else f"{label}, adapted pass {round_ - 1}"
        with Progress(f"{name}: scores", total=len(feats.utt_ids)) as p:
            scores = {utt: model.log_likelihoods(feats(utt)) for utt in p.each(feats.utt_ids)}
        words = first_pass_words(search, scores, point, nj=nj, label=name)
        speakers = transforms_from_hypotheses(
            system,
            alimdl,
            si_feats,
            words,
            cfg,
            silence_weight=cfg.fmllr_silence_weight,
            where=where if round_ == 1 else f"{where} (adapted pass {round_ - 1})",
        )
        if result is None:
            result = TestAdaptation(words, speakers)
        else:
            result.adapted_passes.append(words)
            result.speakers = speakers
        # the next estimate's hypotheses: the SAT model on the features these transforms adapt
        model = system
        feats = TransformedFeatures(
            si_feats.base, si_feats.transform, context=si_feats.context, speakers=speakers
        )
    assert result is not None  # estimates >= 1
    return result


# ---------------------------------------------------------------- files


#: A system dir's files of the speaker-adapted systems (Kaldi's names).
FINAL_MAT, SPLICE_OPTS, TRANSFORMS, ALIMDL = "final.mat", "splice_opts", "trans.1", "final.alimdl"


@dataclass
class Adaptation:
    """What a speaker-adapted system's features need besides MFCC + CMVN: the spliced
    frames' ``transform`` (``final.mat``), ``context`` frames either side, each
    speaker's fMLLR transform (``trans.1``) and the speaker-independent alignment model
    (``final.alimdl``) of a SAT system."""

    transform: np.ndarray
    context: int = 3
    speakers: dict[str, np.ndarray] = field(default_factory=dict)
    alimdl: GmmSystem | None = None

    @classmethod
    def of(cls, feats: TransformedFeatures, alimdl: GmmSystem | None = None) -> Adaptation:
        return cls(feats.transform, feats.context, dict(feats.speakers), alimdl)

    def features(self, base: GmmFeatures, *, speakers: bool = True) -> TransformedFeatures:
        """``base`` (MFCC + CMVN, no deltas) through the transforms; ``speakers=False``:
        without the speakers' (the first pass's input)."""
        return TransformedFeatures(
            base, self.transform, context=self.context, speakers=self.speakers if speakers else None
        )

    def write(self, out_dir: Path) -> None:
        """``final.mat``, ``splice_opts``, and for SAT ``trans.1`` (an archive of speaker ->
        ``(D, D + 1)`` matrix) and ``final.alimdl``, in Kaldi's formats."""
        from asrkit.data.io import atomic_write
        from asrkit.gmm.model_io import write_model

        write_matrix(out_dir / FINAL_MAT, self.transform)
        atomic_write(out_dir / SPLICE_OPTS, f"--left-context={self.context} --right-context={self.context}\n")
        if self.speakers:
            write_ark(out_dir / TRANSFORMS, sorted(self.speakers.items()), kind="mat")
        if self.alimdl is not None:
            write_model(out_dir / ALIMDL, self.alimdl.trans_model, am_gmm=self.alimdl.am)

    @classmethod
    def read(cls, system_dir: Path, lang: Lang | None = None) -> Adaptation | None:
        """A system dir's adaptation files; None for a system on MFCC + deltas (no
        ``final.mat``). ``lang``: also read ``final.alimdl`` when there is one."""
        system_dir = Path(system_dir)
        if not (system_dir / FINAL_MAT).is_file():
            return None
        opts = (system_dir / SPLICE_OPTS).read_text().split() if (system_dir / SPLICE_OPTS).is_file() else []
        context = 3
        for opt in opts:
            if opt.startswith("--left-context="):
                try:
                    context = int(opt.split("=", 1)[1])
                except ValueError:
                    raise DataError(
                        f"{system_dir / SPLICE_OPTS}: {opt!r} is not a frame count; rerun the GMM stage"
                    ) from None
        speakers = read_transforms(system_dir)
        alimdl = None
        if lang is not None and (system_dir / ALIMDL).is_file():
            alimdl = GmmSystem.load(system_dir, lang, model=ALIMDL)
        return cls(read_matrix(system_dir / FINAL_MAT), context, speakers, alimdl)


def read_transforms(folder: Path) -> dict[str, np.ndarray]:
    """Every speaker's fMLLR transform in a dir's ``trans.<job>`` archives (asrkit writes
    ``trans.1``; Kaldi one per job); empty when there is none."""
    from asrkit.data.kaldi_table import read_matrices

    out: dict[str, np.ndarray] = {}
    for path in sorted(Path(folder).glob("trans.*")):
        if path.suffix[1:].isdigit():
            out.update((spk, np.asarray(m, dtype=np.float64)) for spk, m in read_matrices(f"ark:{path}"))
    return out


def system_features(system_dir: Path, data_dir: Path) -> GmmFeatures | TransformedFeatures:
    """The speaker-independent features a system dir's ``final.mdl`` (or ``final.alimdl``)
    reads: MFCC + CMVN + deltas, or spliced through its ``final.mat``."""
    adaptation = Adaptation.read(system_dir)
    if adaptation is None:
        return GmmFeatures(data_dir)
    return adaptation.features(GmmFeatures(data_dir, delta_order=0), speakers=False)
