"""The HMM pipeline's speed (``asrkit bench hybrid``, ``pipeline=hybrid``): GMM training
per stage, HCLG build, and decoding real-time factors next to the CTC beam search's, all
measured in one run on one thread.

Three parts, each timed with the library's own functions (those of stages 4, 5 and 7 of
``pipeline=hybrid``):

1. GMM training on a training data dir (default: the AN4 recipe's ``data/train``) with the
   :class:`~asrkit.gmm.config.GmmConfig` defaults (``quick``: fewer iterations): the lang
   dir, MFCC + CMVN + delta features, the monophone system, the decision tree, the triphone
   system and a Viterbi alignment of the training set with it. The tree is built on its own
   (timed as ``tree``) and handed to :func:`~asrkit.gmm.train.train_triphone` (``triphone``
   is the training after it). Figures within the run: each stage's seconds; per iteration (a stage's
   seconds over its rounds, realignments and the final alignment included) seconds and
   training frames per second; the alignment's and the features' real-time factors; the
   tree build against one monophone iteration.
2. HCLG (:func:`~asrkit.gmm.graph.make_graph`) for the monophone and the (last) triphone
   system with the AN4 LM (stage 3's ``lang/lm.arpa`` of the hybrid or the CTC experiment),
   G built once beforehand; seconds and graph sizes.
3. Decoding the same utterances (default: the AN4 test set): (a) this run's triphone
   system, GMM log-likelihoods and a lattice search through its HCLG; (b) a trained hybrid
   experiment (``recipes/an4/exp/an4_hybrid``): the BLSTM's forward pass, log-prior
   subtraction and the same search through its own HCLG; (c) the CTC demo experiment's
   forward pass and beam search + lexicon + LM (:func:`~asrkit.bench.decoding.bench_decoding`).
   (b) and (c) are skipped, with the reason in the result, when their experiment is not
   there. Each real-time factor is seconds of compute per second of audio; reading features
   is outside the timed part for all three (the GMM's MFCC extraction of the set is reported
   apart as ``features_rtf``). The lattice search is the one stages 5 and 7 run; its best path
   is taken at the LM weight and word penalty the hybrid experiment's stage 5 (GMM) or 7
   (hybrid) chose, when recorded (else ``1 / acoustic_scale`` and 0), and scored when the
   data dir has a ``text``.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from asrkit.data.datadir import read_data_dir, read_utt2num_frames
from asrkit.errors import ConfigError
from asrkit.gmm.config import GmmConfig, WfstConfig

DEFAULT_HYBRID_EXP = "recipes/an4/exp/an4_hybrid"
DEFAULT_CTC_EXP = "recipes/an4/exp/an4_fbank_demo"
DEFAULT_TRAIN = "recipes/an4/data/train"

#: ``quick``: fewer training rounds (the Gaussian targets stay), realigning in proportion.
QUICK_GMM: dict[str, Any] = {
    "mono_iters": 10,
    "mono_realign": [1, 2, 3, 4, 6, 8],
    "tri_iters": 10,
    "tri_realign": [5],
}

_PREPARE = "run recipes/an4/run.sh --stop-stage 1 first (it prepares the AN4 data dirs)"


def _default_lexicon() -> Path:
    """AN4's dictionary where ``conf/data/an4.yaml`` finds it (``../shared`` beside the checkout)."""
    from asrkit.config import PROJECT_ROOT

    return PROJECT_ROOT.parent / "shared" / "data" / "an4" / "etc" / "an4.dic"


def _check_data_dir(path: Path, what: str) -> None:
    for name in ("wav.scp", "text", "utt2spk"):
        if not (path / name).is_file():
            raise ConfigError(f"{path}/{name}: not found; the {what} data dir needs it ({_PREPARE})")


def _find_lm(lm: str | Path | None, exp_dirs: list[Path]) -> Path:
    if lm is not None:
        if not Path(lm).is_file():
            raise ConfigError(f"{lm}: no ARPA LM there; give the stage-3 LM (exp/<name>/lang/lm.arpa)")
        return Path(lm)
    for exp_dir in exp_dirs:
        if (exp_dir / "lang" / "lm.arpa").is_file():
            return exp_dir / "lang" / "lm.arpa"
    raise ConfigError(
        f"no AN4 LM for HCLG: none of {', '.join(str(e / 'lang' / 'lm.arpa') for e in exp_dirs)} "
        "exists; run the recipe's stage 3 (recipes/an4/run.sh --stop-stage 3), or pass lm="
    )


def _setting(paths: list[Path], acoustic_scale: float) -> dict[str, float]:
    """The LM weight and word penalty a decoding stage chose (its ``setting`` file)."""
    for path in paths:
        fields = dict(item.split("=") for item in path.read_text().split())
        return {"lm_weight": float(fields["lm_weight"]), "word_penalty": float(fields["word_penalty"])}
    return {"lm_weight": round(1.0 / acoustic_scale, 3), "word_penalty": 0.0}


def _frames(data_dir: Path, fallback: Path) -> dict[str, int]:
    source = data_dir if (data_dir / "utt2num_frames").is_file() else fallback
    return read_utt2num_frames(source / "utt2num_frames")


def _frame_shift(data_dir: Path) -> float:
    return float((data_dir / "frame_shift").read_text()) if (data_dir / "frame_shift").is_file() else 0.01


def _wer(data_dir: Path, hyps: dict[str, str]) -> float | None:
    if not (data_dir / "text").is_file():
        return None
    from asrkit.scoring.wer import read_text, score_texts

    ref = read_text(data_dir / "text")
    return round(score_texts(ref, {u: h.split() for u, h in hyps.items() if u in ref}).words.wer, 2)


@contextlib.contextmanager
def _work(work_dir: str | Path | None) -> Iterator[Path]:
    if work_dir is not None:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        yield Path(work_dir)
        return
    with tempfile.TemporaryDirectory(prefix="asrkit-bench-hybrid-") as tmp:
        yield Path(tmp)


# ---------------------------------------------------------------- 1. GMM training


def _train(
    train_dir: Path,
    lexicon: Path,
    cfg: GmmConfig,
    work: Path,
    *,
    threads: int,
    seed: int = 1,  # the recipe's default seed
) -> tuple[dict[str, Any], Any, Any]:
    """Every training stage timed; returns ``(figures, lang, the trained GmmSystems)``."""
    from asrkit.features.extractors import FeatureConfig
    from asrkit.gmm.adapt import TransformedFeatures, align_adapted
    from asrkit.gmm.feats import GmmFeatures, make_gmm_data_dir
    from asrkit.gmm.lang import prepare_lang
    from asrkit.gmm.pipeline import train_systems
    from asrkit.gmm.train import GraphCompiler, align, write_alignment_dir
    from asrkit.targets.phones import read_pronunciations
    from asrkit.targets.tokenizer import TokenizerConfig

    where = str(train_dir / "text")
    stages: dict[str, float] = {}
    began = time.perf_counter()

    t = time.perf_counter()
    # The lexicon as stage 4 reads it with the recipe's default tokenizer settings.
    lang = prepare_lang(
        read_pronunciations(lexicon, keep_stress=TokenizerConfig().keep_stress), work / "lang"
    )
    stages["lang"] = time.perf_counter() - t

    t = time.perf_counter()
    # The MFCCs stage 4 computes: 23 mel bins, 13 cepstra, the recipe's other settings.
    mfcc = FeatureConfig(kind="mfcc", num_mel_bins=23, num_ceps=13, nj=threads)
    make_gmm_data_dir(train_dir, work / "data" / "train", work / "mfcc", mfcc)
    feats = GmmFeatures(work / "data" / "train").in_memory()  # as stage 4 reads them
    stages["features"] = time.perf_counter() - t
    texts = read_data_dir(work / "data" / "train").text or {}
    frames = sum(read_utt2num_frames(work / "data" / "train" / "utt2num_frames").values())

    # Stage 4's own function (and its seeds), the tree timed apart from its system; the
    # systems written as stage 4 writes them (a SAT system's transforms and alignment model).
    trained = train_systems(lang, feats, texts, cfg, seed=seed, where=where, out_dir=work / "systems")
    mono, system = trained.systems["mono"], trained.final
    stages["mono"] = trained.seconds["mono"]
    tree_s = sum(v for k, v in trained.seconds.items() if k.startswith("tree"))
    tri_s = sum(v for k, v in trained.seconds.items() if k.startswith("tri"))
    stages["tree"], stages["triphone"] = tree_s, tri_s

    t = time.perf_counter()
    graphs = GraphCompiler(system).compile(texts, where=where)
    last = list(trained.systems)[-1]
    adaptation = trained.adaptations.get(last)
    if adaptation is not None and adaptation.alimdl is not None:
        # Stage 4's alignment with a SAT system: speaker-independent, fMLLR, adapted.
        assert isinstance(trained.features, TransformedFeatures)
        aligned, _ = align_adapted(
            system,
            adaptation.alimdl,
            trained.features,
            graphs,
            cfg,
            silence_weight=cfg.fmllr_silence_weight,
            where=where,
        )
    else:
        aligned = align(system, trained.features or feats, graphs, cfg, where=where)  # type: ignore[arg-type]
    stages["align"] = time.perf_counter() - t
    total = time.perf_counter() - began
    write_alignment_dir(work / "ali_train", system, aligned)  # the hybrid network's targets

    audio_s = frames * 0.01
    tri_iters = cfg.tri_iters * len(cfg.tri_leaves)
    mono_iter_s = stages["mono"] / cfg.mono_iters
    tri_iter_s = tri_s / tri_iters if tri_iters else 0.0
    figures = {
        "training_data": {
            "dir": str(train_dir),
            "utterances": len(texts),
            "frames": frames,
            "audio_s": round(audio_s, 1),
            "mono_pdfs": mono.am.num_pdfs,
            "triphone_pdfs": system.am.num_pdfs,
            "triphone_gaussians": system.am.num_gauss,
            "aligned": len(aligned.alignments),
            "tree_leaves": system.am.num_pdfs,
        },
        "training_s": {**{k: round(v, 3) for k, v in stages.items()}, "total": round(total, 3)},
        # Each system's own seconds (tri<k> of a LDA+MLLT or SAT system includes its tree).
        "system_s": {k: round(v, 3) for k, v in trained.seconds.items()},
        "per_iteration": {
            "mono_s": round(mono_iter_s, 4),
            "mono_frames_per_s": round(frames / mono_iter_s),
            "triphone_s": round(tri_iter_s, 4),
            "triphone_frames_per_s": round(frames / tri_iter_s) if tri_iter_s > 0 else None,
        },
        "features_rtf": round(stages["features"] / audio_s, 5),
        "align_rtf": round(stages["align"] / audio_s, 5),
        "tree_over_mono_iter": round(tree_s / mono_iter_s, 3),
    }
    return figures, lang, trained


# ---------------------------------------------------------------- 2. HCLG


def _graphs(lang: Any, systems: dict[str, Any], lm: Path, work: Path, wfst: WfstConfig) -> tuple[dict, dict]:
    """G once, then HCLG per system; returns ``(figures, name -> GraphDir)``."""
    from asrkit.gmm.graph import fst_size, make_g, make_graph

    t = time.perf_counter()
    g = make_g(lm, lang)
    figures: dict[str, Any] = {"lm": str(lm), "g_s": round(time.perf_counter() - t, 3)}
    figures["g_states"], figures["g_arcs"] = fst_size(g)
    dirs = {}
    for name, system in systems.items():
        t = time.perf_counter()
        dirs[name] = make_graph(
            lang,
            system.ctx_dep,
            system.trans_model,
            g,
            work / name / "graph",
            self_loop_scale=wfst.self_loop_scale,
            transition_scale=wfst.transition_scale,
        )
        figures[f"{name}_s"] = round(time.perf_counter() - t, 3)
        figures[f"{name}_states"], figures[f"{name}_arcs"] = fst_size(dirs[name].hclg)
    figures["tri_over_mono"] = round(figures["tri_s"] / figures["mono_s"], 3)
    return figures, dirs


# ---------------------------------------------------------------- 3. decoding


def _decode_gmm(
    system: Any,
    graph: Any,
    data_dir: Path,
    work: Path,
    *,
    wfst: WfstConfig,
    acoustic_scale: float,
    setting: dict[str, float],
    threads: int,
    system_dir: Path | None = None,
    gmm: GmmConfig | None = None,
) -> tuple[dict[str, Any], float]:
    """GMM scoring + lattice search of ``data_dir`` (stage 5's :class:`GmmDecoder` at
    ``setting``; a SAT system's ``system_dir``: two passes, the first one's share timed
    apart); returns ``(figures, audio seconds)``."""
    from asrkit.decoding.hclg import GmmDecoder
    from asrkit.decoding.wfst import WfstDecoder
    from asrkit.features.extractors import FeatureConfig
    from asrkit.gmm.feats import make_gmm_data_dir

    t = time.perf_counter()
    mfcc = FeatureConfig(kind="mfcc", num_mel_bins=23, num_ceps=13, nj=threads)
    if not (work / "data" / data_dir.name / "feats.scp").is_file():
        make_gmm_data_dir(data_dir, work / "data" / data_dir.name, work / "mfcc", mfcc)
    features_s = time.perf_counter() - t
    frames = _frames(data_dir, work / "data" / data_dir.name)
    audio_s = sum(frames.values()) * _frame_shift(data_dir)
    search = WfstDecoder.from_graph_dir(
        graph,
        system.trans_model,
        beam=wfst.beam,
        lattice_beam=wfst.lattice_beam,
        max_active=wfst.max_active,
        acoustic_scale=acoustic_scale,
    )
    decoder = GmmDecoder(
        system,
        search,
        [(setting["lm_weight"], setting["word_penalty"])],
        name="tri",
        features_root=work / "data",
        sample_rate=mfcc.sample_rate,
        graph=graph.path,
        transitions=graph.path / "final.mdl",
        system_dir=system_dir,
        adapt=gmm,
    )
    prepared = decoder.prepare(data_dir)
    first_s = prepared.extra.get("first_pass_seconds", 0.0)
    scoring_s = prepared.seconds - first_s
    hyps = decoder.transcripts(prepared)
    search_s = prepared.seconds - first_s - scoring_s
    passes = {}
    if decoder.two_pass:
        # The speaker-independent pass, the transforms' estimation from its hypotheses, and
        # the adapted pass (scoring + search), each over the audio.
        passes = {
            "first_pass_rtf": round(first_s / audio_s, 5),
            "second_pass_rtf": round((scoring_s + search_s) / audio_s, 5),
        }
    return {
        "utterances": len(hyps),
        "features_rtf": round(features_s / audio_s, 5),
        "scoring_rtf": round(scoring_s / audio_s, 5),
        "search_rtf": round(search_s / audio_s, 5),
        **passes,
        "total_rtf": round((first_s + scoring_s + search_s) / audio_s, 5),
        **setting,
        "partial": search.num_partial,
        "wer": _wer(data_dir, hyps),
    }, audio_s


def _decode_hybrid(exp_dir: Path, data_dir: Path, audio_s: float) -> dict[str, Any]:
    """The hybrid experiment's decoder as its stage 7 tuned it (the BLSTM's forward pass +
    log-prior subtraction, then the lattice search through its GMM system's HCLG);
    ``{"skipped": why}`` without the experiment."""
    from asrkit.decoding.decoder import DecodingRecord, load_decoder

    run = "run recipes/an4/run.sh +experiment=an4_hybrid (stages 0-7)"
    if not (exp_dir / "model.pt").is_file():
        return {"skipped": f"{exp_dir}: no trained hybrid model (model.pt); {run}"}
    record = DecodingRecord.load(exp_dir, "hybrid")
    if record is None:
        return {"skipped": f"{exp_dir}: no tuned hybrid decoder (stage 7 has not run); {run}"}
    decoder = load_decoder(exp_dir, "hybrid")
    prepared = decoder.prepare(data_dir)
    forward_s = prepared.seconds
    hyps = decoder.transcripts(prepared)
    search_s = prepared.seconds - forward_s
    return {
        "exp_dir": str(exp_dir),
        "graph": record.settings["graph"],
        "utterances": len(hyps),
        "forward_rtf": round(forward_s / audio_s, 5),
        "search_rtf": round(search_s / audio_s, 5),
        "total_rtf": round((forward_s + search_s) / audio_s, 5),
        "lm_weight": record.point[0],
        "word_penalty": record.point[1],
        "acoustic_scale": record.settings["acoustic_scale"],
        "partial": decoder.search.num_partial,  # type: ignore[attr-defined]
        "wer": _wer(data_dir, hyps),
    }


def _decode_ctc(exp_dir: Path, data_dir: Path, threads: int) -> dict[str, Any]:
    """:func:`~asrkit.bench.decoding.bench_decoding`; ``{"skipped": why}`` without the experiment."""
    missing = [p for p in ("model.pt", "lang/lexicon.txt", "lang/lm.arpa") if not (exp_dir / p).is_file()]
    if missing:
        return {"skipped": f"{exp_dir}: no {', '.join(missing)}; run make demo (recipes/an4/run.sh)"}
    from asrkit.bench.decoding import bench_decoding

    return bench_decoding(data_dir, exp_dir=exp_dir, threads=threads)


def _ratio(a: dict, key_a: str, b: dict, key_b: str) -> float | None:
    if key_a not in a or key_b not in b:
        return None  # a part was skipped (its reason is in the result)
    return round(a[key_a] / b[key_b], 3)


def bench_hybrid(
    data_dir: str | Path,
    *,
    train_dir: str | Path = DEFAULT_TRAIN,
    exp_dir: str | Path = DEFAULT_HYBRID_EXP,
    ctc_exp_dir: str | Path = DEFAULT_CTC_EXP,
    lexicon: str | Path | None = None,
    lm: str | Path | None = None,
    gmm: GmmConfig | None = None,
    wfst: WfstConfig | None = None,
    quick: bool = False,
    adapted: bool = True,
    threads: int = 1,
    work_dir: str | Path | None = None,
) -> dict:
    """GMM training time per stage, HCLG build time, and GMM / hybrid / CTC decoding
    real-time factors of ``data_dir``'s utterances, in one run (see the module docstring).

    Args:
        data_dir: the data dir decoded (``wav.scp``, ``text``; ``feats.scp`` of the
            experiments' features, or they are computed from the audio).
        train_dir: the data dir the GMM systems train on.
        exp_dir: a trained hybrid experiment (part b; skipped when absent).
        ctc_exp_dir: a trained CTC experiment with stage 3's lexicon and LM (part c; skipped
            when absent).
        lexicon: the pronunciation lexicon; None: AN4's ``etc/an4.dic``.
        lm: the ARPA LM for HCLG; None: ``lang/lm.arpa`` of ``exp_dir``, else of ``ctc_exp_dir``.
        gmm: the GMM settings; None: the defaults (``quick``: :data:`QUICK_GMM` rounds).
            ``nj`` is set to ``threads``.
        wfst: the decoder and HCLG settings for this run's systems; None: the defaults.
        quick: fewer training rounds when ``gmm`` is None.
        adapted: with ``gmm`` None, Kaldi's tri1 (deltas), tri2 (LDA+MLLT) and tri3 (SAT),
            each with the default leaves and Gaussians; tri3 decodes in two passes too.
        threads: torch threads, alignment and feature jobs.
        work_dir: where the lang dir, features, systems and graphs go (kept); None: a
            temporary dir, removed.

    Raises:
        ConfigError: a missing data dir, lexicon or LM, naming what to run.
    """
    data_dir, train_dir = Path(data_dir), Path(train_dir)
    exp_dir, ctc_exp_dir = Path(exp_dir), Path(ctc_exp_dir)
    _check_data_dir(train_dir, "training")
    _check_data_dir(data_dir, "test")
    lexicon = Path(lexicon) if lexicon is not None else _default_lexicon()
    if not lexicon.is_file():
        raise ConfigError(f"{lexicon}: no pronunciation lexicon there; pass lexicon= (AN4's etc/an4.dic)")
    lm = _find_lm(lm, [exp_dir, ctc_exp_dir])
    cfg = gmm if gmm is not None else replace(GmmConfig(), **(QUICK_GMM if quick else {}))
    if gmm is None and adapted:
        cfg = replace(
            cfg,
            tri_kinds=["deltas", "lda_mllt", "sat"],
            tri_leaves=cfg.tri_leaves[:1] * 3,
            tri_gauss=cfg.tri_gauss[:1] * 3,
            mllt_rounds=[r for r in cfg.mllt_rounds if r < cfg.tri_iters],
            fmllr_rounds=[r for r in cfg.fmllr_rounds if r < cfg.tri_iters],
        )
    cfg = replace(cfg, nj=threads)
    cfg.check()
    if not cfg.tri_leaves:
        raise ConfigError("gmm.tri_leaves is empty: the benchmark times a triphone pass; give at least one")
    wfst = wfst or WfstConfig()

    import torch

    torch.set_num_threads(threads)
    with _work(work_dir) as work:
        training, lang, trained = _train(train_dir, lexicon, cfg, work, threads=threads)
        names = list(trained.systems)
        # The first triphone system (MFCC + deltas) as "tri", and a SAT system as "sat".
        sat = next((n for n in names if trained.adaptations.get(n) and trained.adaptations[n].alimdl), None)
        chosen = {"mono": trained.systems["mono"], "tri": trained.systems[names[1]]}
        if sat is not None:
            chosen["sat"] = trained.systems[sat]
        graphs, graph_dirs = _graphs(lang, chosen, lm, work, wfst)
        setting = _setting(sorted(exp_dir.glob("gmm/tri*/decode_*/setting")), cfg.acoustic_scale)
        decode = partial(
            _decode_gmm,
            data_dir=data_dir,
            work=work,
            wfst=wfst,
            acoustic_scale=cfg.acoustic_scale,
            threads=threads,
        )
        gmm_decoding, audio_s = decode(
            chosen["tri"], graph_dirs["tri"], setting=setting, system_dir=work / "systems" / names[1], gmm=cfg
        )
        gmm_decoding["system"] = names[1]
        if sat is not None:
            sat_setting = _setting(sorted(exp_dir.glob(f"gmm/{sat}/decode_*/setting")), cfg.acoustic_scale)
            gmm_decoding["sat"], _ = decode(
                chosen["sat"],
                graph_dirs["sat"],
                setting=sat_setting,
                system_dir=work / "systems" / sat,
                gmm=cfg,
            )
    hybrid = _decode_hybrid(exp_dir, data_dir, audio_s)
    ctc = _decode_ctc(ctc_exp_dir, data_dir, threads)
    return {
        "threads": threads,
        "test_audio_s": round(audio_s, 1),
        "gmm": {
            k: getattr(cfg, k)
            for k in ("mono_iters", "mono_gauss", "tri_kinds", "tri_leaves", "tri_gauss", "tri_iters")
        },
        **training,
        "graphs": graphs,
        "gmm_decoding": gmm_decoding,
        "hybrid_decoding": hybrid,
        "ctc_decoding": ctc,
        "hybrid_over_ctc": _ratio(hybrid, "total_rtf", ctc, "beam_lm_total_rtf"),
        "gmm_over_ctc": _ratio(gmm_decoding, "total_rtf", ctc, "beam_lm_total_rtf"),
        "hybrid_over_gmm": _ratio(hybrid, "total_rtf", gmm_decoding, "total_rtf"),
    }
