"""The GMM systems of the HMM pipeline, trained in Kaldi's order: a monophone system, then
one triphone system per ``gmm.tri_leaves`` entry, each from the previous one's alignment
and of its ``gmm.tri_kinds`` kind (Kaldi's ``train_mono.sh``, then ``train_deltas.sh``,
``train_lda_mllt.sh`` or ``train_sat.sh``).

One function, :func:`train_systems`, called by the recipe's GMM stage and by the HMM
pipeline's benchmark, so the benchmark times exactly what the stage runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from asrkit.gmm.adapt import Adaptation, TransformedFeatures, alignment_model, train_lda_mllt, train_sat
from asrkit.gmm.config import GmmConfig
from asrkit.gmm.feats import GmmFeatures
from asrkit.gmm.lang import Lang
from asrkit.gmm.train import (
    AlignResult,
    GmmSystem,
    build_triphone_tree,
    train_mono,
    train_triphone,
    write_alignment_dir,
)

__all__ = ["GmmSystems", "system_names", "train_systems"]

log = logging.getLogger(__name__)


def system_names(cfg: GmmConfig) -> list[str]:
    """The systems in training order: ``mono``, ``tri1``, ..."""
    return ["mono"] + [f"tri{k + 1}" for k in range(len(cfg.tri_leaves))]


@dataclass
class GmmSystems:
    """What :func:`train_systems` trained.

    Attributes:
        systems: name -> system, in training order (``mono``, ``tri1``, ...).
        last: the last system's final alignment of the training texts.
        seconds: name -> training seconds (``tree<k>`` for the k-th triphone tree alone,
            ``tri<k>`` for the rest of its system; a LDA+MLLT or SAT system's tree is in
            its ``tri<k>``).
        adaptations: name -> the transforms of each speaker-adapted system.
        features: the last system's speaker-independent training features.
    """

    systems: dict[str, GmmSystem] = field(default_factory=dict)
    last: AlignResult | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    adaptations: dict[str, Adaptation] = field(default_factory=dict)
    features: GmmFeatures | TransformedFeatures | None = None

    @property
    def final(self) -> GmmSystem:
        return list(self.systems.values())[-1]


def train_systems(
    lang: Lang,
    feats: GmmFeatures,
    texts: Mapping[str, str],
    cfg: GmmConfig,
    *,
    seed: int,
    where: str = "text",
    out_dir: Path | None = None,
) -> GmmSystems:
    """Train the monophone system and every triphone system of ``cfg``.

    Args:
        lang: the lang dir (phones, lexicon FSTs, topology).
        feats: the training set's GMM features.
        texts: utterance -> transcript (the utterances the systems learn from).
        cfg: the ``gmm`` settings.
        seed: the monophone system's seed; triphone system k (1-based) gets ``seed + k``.
        where: the transcripts' file, named in errors.
        out_dir: where each system is written as a Kaldi dir (``<out_dir>/<name>/``:
            ``final.mdl``, ``tree``, ``ali.1.gz``); None: not written.
    """
    out = GmmSystems()
    began = time.perf_counter()
    system, result = train_mono(lang, feats, texts, cfg, where=where, seed=seed)
    out.seconds["mono"] = time.perf_counter() - began
    _done(out, "mono", system, result, out_dir)
    base = feats.with_delta_order(0)
    current: GmmFeatures | TransformedFeatures = feats
    for k, (kind, leaves, gauss) in enumerate(zip(cfg.kinds, cfg.tri_leaves, cfg.tri_gauss, strict=True), 1):
        began = time.perf_counter()
        sizes = {"num_leaves": leaves, "num_gauss": gauss, "where": where, "seed": seed + k}
        alimdl = None
        if kind == "lda_mllt":
            system, result, current = train_lda_mllt(
                lang,
                base,
                texts,
                system,
                result.alignments,
                cfg,
                dim=cfg.lda_dim,
                context=cfg.splice_context,
                mllt_rounds=cfg.mllt_rounds,
                **sizes,  # type: ignore[arg-type]
            )
        elif kind == "sat":
            assert isinstance(current, TransformedFeatures), "GmmConfig.check: sat follows lda_mllt"
            si = current.unadapted()
            system, result, current = train_sat(
                lang,
                si,
                texts,
                system,
                result.alignments,
                cfg,
                fmllr_rounds=cfg.fmllr_rounds,
                silence_weight=cfg.fmllr_silence_weight,
                **sizes,  # type: ignore[arg-type]
            )
            alimdl = alignment_model(system, si, current, result.alignments)
        else:
            current = feats
            tree = build_triphone_tree(lang, feats, system, result.alignments, num_leaves=leaves)
            out.seconds[f"tree{k}"] = time.perf_counter() - began
            began = time.perf_counter()
            system, result, _ = train_triphone(
                lang,
                feats,
                texts,
                system,
                result.alignments,
                cfg,
                tree=tree,
                **sizes,  # type: ignore[arg-type]
            )
        out.seconds[f"tri{k}"] = time.perf_counter() - began
        if isinstance(current, TransformedFeatures):
            out.adaptations[f"tri{k}"] = Adaptation.of(current, alimdl)
        _done(out, f"tri{k}", system, result, out_dir)
    out.last = result
    out.features = current.unadapted() if isinstance(current, TransformedFeatures) else current
    return out


def _done(out: GmmSystems, name: str, system: GmmSystem, result: AlignResult, out_dir: Path | None) -> None:
    out.systems[name] = system
    if out_dir is not None:
        adaptation = out.adaptations.get(name)
        write_alignment_dir(out_dir / name, system, result, files=adaptation.write if adaptation else None)
    seconds = out.seconds[name] + out.seconds.get(f"tree{name.removeprefix('tri')}", 0.0)
    log.info(
        "%s: %d %s, %d Gaussians, log-likelihood per frame %.3f (%.0f s)",
        name,
        system.am.num_pdfs,
        "states" if name == "mono" else "tied states",
        system.am.num_gauss,
        result.like_per_frame,
        seconds,
    )
