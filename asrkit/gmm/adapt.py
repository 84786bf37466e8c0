"""The statistics of :mod:`asrkit.gmm.transforms` gathered from a GMM system and its
alignments, features through a transform, and the LDA+MLLT system (Kaldi's
``train_lda_mllt.sh``: ±3 spliced MFCC + CMVN projected by LDA on tied-state classes with
silence weighted out, MLLT re-estimated on given training rounds and folded into the
model's means and the features' transform).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from asrkit.gmm.config import GmmConfig
from asrkit.gmm.feats import GmmFeatures
from asrkit.gmm.lang import Lang
from asrkit.gmm.model_io import transition_id_to_phone
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
    LdaStats,
    MlltStats,
    apply_affine,
    compose,
    estimate_fmllr,
    estimate_lda,
    estimate_mllt,
    splice,
)

__all__ = [
    "TransformedFeatures",
    "gaussian_stats",
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

    def spliced(self, utt: str) -> np.ndarray:
        return splice(np.asarray(self.base(utt), dtype=np.float64), self.context)

    def __call__(self, utt: str) -> np.ndarray:
        feats = apply_affine(self.transform, self.spliced(utt))
        speaker = self.speakers.get(self.data.utt2spk[utt])
        if speaker is not None:
            feats = apply_affine(speaker, feats)
        return feats.astype(np.float32)

    def __iter__(self) -> Iterator[tuple[str, np.ndarray]]:
        for utt in self.utt_ids:
            yield utt, self(utt)


def silence_weights(
    system: GmmSystem, tids: Sequence[int] | np.ndarray, *, silence_weight: float
) -> np.ndarray:
    """Per frame, ``silence_weight`` where the alignment is in a silence phone, else 1
    (Kaldi's ``weight-silence-post``)."""
    phones = transition_id_to_phone(system.trans_model)[np.asarray(tids, dtype=np.int64)]
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


def gaussian_stats(
    system: GmmSystem,
    feats: Mapping[str, np.ndarray] | TransformedFeatures | GmmFeatures,
    alignments: Mapping[str, Sequence[int]],
    stats: MlltStats | FmllrStats,
    *,
    silence_weight: float = 1.0,
) -> None:
    """Add each aligned frame to ``stats`` with its posteriors over the Gaussians of its
    tied state (Kaldi's ``ali-to-post`` + ``gmm-acc-mllt`` / ``gmm-est-fmllr`` accumulation)."""
    tid2pdf = system.tid2pdf
    for utt, ali in alignments.items():
        x = np.asarray(feats[utt] if isinstance(feats, Mapping) else feats(utt), dtype=np.float64)
        tids = np.asarray(ali, dtype=np.int64)
        pdfs = tid2pdf[tids]
        weight = silence_weights(system, tids, silence_weight=silence_weight)
        for pdf in np.unique(pdfs):
            rows = np.flatnonzero((pdfs == pdf) & (weight > 0))
            if not len(rows):
                continue
            gmm = system.am.get_pdf(int(pdf))
            comp = np.asarray(gmm.log_likelihoods_matrix(x[rows].astype(np.float32)), dtype=np.float64)
            post = np.exp(comp - comp.max(axis=1, keepdims=True))
            post *= (weight[rows] / post.sum(axis=1))[:, None]
            stats.add(
                x[rows], np.asarray(gmm.means, dtype=np.float64), np.asarray(gmm.vars, dtype=np.float64), post
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
    for speaker, utts in sorted(by_speaker.items()):
        stats = FmllrStats(dim=dim)
        gaussian_stats(system, feats, utts, stats, silence_weight=silence_weight)
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


def transforms_from_hypotheses(
    system: GmmSystem,
    feats: TransformedFeatures,
    hypotheses: Mapping[str, str],
    cfg: GmmConfig,
    *,
    passes: int = 2,
    silence_weight: float = 0.0,
    where: str = "first-pass hypotheses",
) -> dict[str, np.ndarray]:
    """Test speakers' fMLLR transforms for ``system`` (a SAT system) from their own audio
    and the first pass's ``hypotheses`` only, never a reference: each pass aligns the
    hypotheses with ``system`` through the features adapted so far and re-estimates every
    speaker's transform (Kaldi's ``decode_fmllr.sh`` estimates from first-pass lattice
    posteriors; a hypothesis' best alignment stands in for them here). Utterances whose
    hypothesis is empty or cannot be aligned add nothing."""
    usable = {u: text for u, text in hypotheses.items() if text.strip()}
    graphs = GraphCompiler(system).compile(usable, where=where, unknown_ok=True)
    adapted = TransformedFeatures(feats.base, feats.transform, context=feats.context)
    for _ in range(passes):
        result = align(system, adapted, graphs, cfg, where=where, may_fail=frozenset(graphs))  # type: ignore[arg-type]
        speakers = speaker_transforms(system, adapted, result.alignments, silence_weight=silence_weight)
        adapted = TransformedFeatures(feats.base, feats.transform, context=feats.context, speakers=speakers)
    return adapted.speakers
