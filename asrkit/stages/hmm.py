"""The HMM pipeline's own stages (``pipeline=hybrid``: GMM-HMM systems, then the BLSTM as
the acoustic model of an NN-HMM hybrid, IBM's acoustic models). The module is named for
the HMM so that "hybrid" means one thing in the code: the HYBRID strategy.

Stages 0-3 are the corpus stages every pipeline shares (data, fbank features, and the
lexicon + word n-gram LM of stage 3). Then, in Kaldi's shapes, under ``<exp>/gmm/``:

- 4 ``gmm``: a lang dir from the lexicon, MFCC + CMVN + delta features, a monophone
  system (``mono/``), one triphone system per ``gmm.tri_leaves`` entry (``tri1/``, ...),
  and the last one's alignments of the training and dev sets (``ali_<set>/``: Kaldi GMM
  dirs of transition ids, with ``final.mdl`` and ``tree``);
- 5 ``gmm_decode``: HCLG for each GMM system with the stage-3 LM (``<system>/graph/``),
  the dev set decoded at every ``wfst.lm_weights`` x ``wfst.word_penalties``, the test
  sets at the best pair (``<system>/decode_<set>/``);
- 6 ``train``: the BLSTM with frame cross-entropy on the tied states of ``ali_<set>/``
  (every strategy, as the CTC pipeline's training stage);
- 7 ``decode``: the BLSTM's log posteriors minus log priors (counted from the training
  alignments) decoded through the last GMM system's HCLG, weights swept on dev as in
  stage 5 (``decode_hybrid_<set>/``);
- 8 ``combine``: with ``ensemble.members``, more networks trained on the same tied states
  and input (stage 6 in ``member<i>/``, :mod:`asrkit.stages.members`), their log
  posteriors averaged frame by frame through the same HCLG (``decode_combined_<set>/``).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from asrkit.data.datadir import read_data_dir
from asrkit.data.io import atomic_write
from asrkit.decoding.decoder import Prepared
from asrkit.errors import ConfigError, DataError
from asrkit.learner import alignment_source
from asrkit.stages.common import (
    OPEN_LEXICON,
    decode_targets,
    method_folders,
    model_input,
    pronunciation_lexicon,
    show_decoded,
    stage_recognizer,
    tune_and_decode,
    tune_target,
)
from asrkit.stages.registry import StageContext, stage

if TYPE_CHECKING:
    from asrkit.decoding.wfst import WfstDecoder
    from asrkit.gmm.graph import GraphDir
    from asrkit.gmm.lang import Lang

log = logging.getLogger(__name__)


def gmm_dir(ctx: StageContext) -> Path:
    return ctx.exp_dir / "gmm"


def system_names(ctx: StageContext) -> list[str]:
    """The GMM systems in training order: ``mono``, ``tri1``, ..."""
    from asrkit.gmm.pipeline import system_names as names

    return names(ctx.cfg.gmm)


def _lexicon_path(ctx: StageContext) -> str:
    path = pronunciation_lexicon(ctx)
    if not path:
        raise ConfigError(
            "pipeline=hybrid needs a pronunciation lexicon: set data.lexicon (or tokenizer.lexicon) "
            "to a Kaldi/CMU lexicon file (WORD phone phone ... per line)"
        )
    return path


def _gmm_sets(ctx: StageContext) -> list[str]:
    return list(dict.fromkeys([ctx.cfg.data.train_set, ctx.cfg.data.dev_set, *ctx.cfg.data.test_sets]))


@stage(
    4,
    "gmm",
    "GMM-HMM systems (lang dir, MFCC+deltas, monophone, triphones) and the last one's "
    "alignments of the training and dev sets in gmm/",
    uses=("gmm", "data", "tokenizer", "features", "seed"),
    needs=(1,),
    # With lm.general_words the lexicon is stage 3's open one: its content, not every LM
    # setting, decides whether the GMMs are trained again.
    inputs=lambda ctx: [ctx.exp_dir / "lang" / OPEN_LEXICON] if ctx.cfg.lm.general_words else None,
    pipelines=("hybrid",),
    outputs=lambda ctx: [
        gmm_dir(ctx) / f"ali_{s}" / "ali.1.gz" for s in (ctx.cfg.data.train_set, ctx.cfg.data.dev_set)
    ],
)
def gmm(ctx: StageContext) -> None:

    from asrkit.data.perturb import original_only, perturbed_factors
    from asrkit.gmm.adapt import Adaptation, TransformedFeatures, align_adapted, system_features
    from asrkit.gmm.feats import GmmFeatures, gmm_mfcc, make_gmm_data_dir
    from asrkit.gmm.lang import UNK_PHONE, UNK_WORD, prepare_lang
    from asrkit.gmm.pipeline import train_systems
    from asrkit.gmm.train import AlignResult, GraphCompiler, align, write_alignment_dir
    from asrkit.targets.phones import read_pronunciations

    cfg = ctx.cfg.gmm
    root = gmm_dir(ctx)
    began = time.monotonic()
    lexicon = read_pronunciations(_lexicon_path(ctx), keep_stress=ctx.cfg.tokenizer.keep_stress)
    # Dev words the lexicon lacks (5% of speechocean762's) align as Kaldi's recipes align
    # them: as the unknown word, a spoken-noise phone of its own. Only when there are any:
    # otherwise the lang, and every system after it, is what it was without one.
    dev_text = read_data_dir(ctx.data_root / ctx.cfg.data.dev_set).text or {}
    if any(w not in lexicon for t in dev_text.values() for w in t.split()):
        lexicon = {**lexicon, UNK_WORD: lexicon.get(UNK_WORD, [(UNK_PHONE,)])}
    lang = prepare_lang(lexicon, root / "lang", oov_word=UNK_WORD if UNK_WORD in lexicon else "")
    log.info("lang: %d phones, %d words -> %s", len(lang.real_phones), len(lang.words) - 4, root / "lang")
    mfcc = gmm_mfcc(ctx.cfg.features, nj=cfg.nj)
    for name in _gmm_sets(ctx):
        make_gmm_data_dir(ctx.data_root / name, root / "data" / name, root / "mfcc", mfcc)
    train_set, dev_set = ctx.cfg.data.train_set, ctx.cfg.data.dev_set
    feats = GmmFeatures(root / "data" / train_set).in_memory()
    all_texts = read_data_dir(root / "data" / train_set).text or {}
    # A speed-perturbed training set: the GMMs learn from the original speech, and every
    # copy is aligned by the last one (Kaldi's recipes align their _sp dirs the same way).
    factors = perturbed_factors(ctx.data_root / train_set)
    texts = original_only(all_texts, factors)
    if len(texts) < len(all_texts):
        log.info(
            "%s is speed-perturbed: GMMs trained on its %d original utterances, all %d aligned",
            train_set,
            len(texts),
            len(all_texts),
        )
    where = str(ctx.data_root / train_set / "text")
    timings: dict[str, float] = {"features": round(time.monotonic() - began, 1)}

    trained = train_systems(lang, feats, texts, cfg, seed=ctx.cfg.seed, where=where, out_dir=root)
    timings.update({name: round(seconds, 1) for name, seconds in trained.seconds.items()})
    system, result = trained.final, trained.last
    assert result is not None and trained.features is not None
    last = system_names(ctx)[-1]
    adaptation = trained.adaptations.get(last)
    si_feats = trained.features

    def align_set(name: str, texts_: Mapping[str, str], result_: AlignResult | None, **kw: object) -> None:
        """Align a set with the last system (a SAT system: each speaker's transform
        estimated first, as Kaldi's align_fmllr.sh) and write ``ali_<name>/``."""
        began = time.monotonic()
        data_where = str(ctx.data_root / name)
        feats_ = si_feats if name == train_set else system_features(root / last, root / "data" / name)
        graphs = GraphCompiler(system).compile(texts_, where=str(ctx.data_root / name / "text"), **kw)  # type: ignore[arg-type]
        may_fail = frozenset(u for u, t in texts_.items() if any(w not in lang.words for w in t.split()))
        files = adaptation.write if adaptation is not None else None
        if result_ is None and adaptation is not None and adaptation.alimdl is not None:
            assert isinstance(feats_, TransformedFeatures)
            result_, adapted = align_adapted(
                system,
                adaptation.alimdl,
                feats_,
                graphs,
                cfg,
                silence_weight=cfg.fmllr_silence_weight,
                where=data_where,
                may_fail=may_fail,
            )
            files = Adaptation.of(adapted, adaptation.alimdl).write
        elif result_ is None:
            result_ = align(system, feats_, graphs, cfg, where=data_where, may_fail=may_fail)  # type: ignore[arg-type]
        write_alignment_dir(root / f"ali_{name}", system, result_, files=files)
        timings[f"align_{name}"] = round(time.monotonic() - began, 1)

    # The alignment from training serves when it covered every utterance (with the
    # training speakers' transforms, for SAT).
    align_set(train_set, all_texts, result if len(texts) == len(all_texts) else None)
    dev_texts = read_data_dir(root / "data" / dev_set).text or {}
    align_set(dev_set, dev_texts, None, unknown_ok=True)
    atomic_write(root / "timings.json", json.dumps(timings, indent=2) + "\n")
    log.info("GMM stage timings (s): %s", timings)


# ---------------------------------------------------------------- WFST decoding


def _grid(ctx: StageContext) -> list[tuple[float, float]]:
    return [(w, p) for w in ctx.cfg.wfst.lm_weights for p in ctx.cfg.wfst.word_penalties]


def _search(ctx: StageContext, graph: GraphDir, transitions: object) -> WfstDecoder:
    from asrkit.decoding.wfst import wfst_search

    return wfst_search(graph, transitions, ctx.cfg.wfst, acoustic_scale=ctx.cfg.gmm.acoustic_scale)


def _lm(ctx: StageContext) -> Path:
    path = ctx.exp_dir / "lang" / "lm.arpa"
    if not path.is_file():
        raise DataError(f"{path}: no LM; run stage 3 (lang) first")
    return path


def _rtf(timings: dict[str, float], label: str, prepared: Mapping[str, Prepared]) -> None:
    """Each set's real-time factor (scoring and searching, over its 10 ms frames)."""
    for name, done in prepared.items():
        timings[f"{label}{name}_rtf"] = round(done.seconds / max(done.frames * 0.01, 1e-9), 4)


def _decode_dir(system_dir: Path, name: str) -> Path:
    return system_dir / f"decode_{name}"


def decoded_systems(ctx: StageContext) -> list[str]:
    """The GMM systems stage 5 decodes (``wfst.gmm_systems``): all, or the last only."""
    names = system_names(ctx)
    return names if ctx.cfg.wfst.gmm_systems == "all" else names[-1:]


def _gmm_folders(ctx: StageContext) -> list[tuple[str, Path, str]]:
    return [
        (system, gmm_dir(ctx) / system / f"decode_{name}", name)
        for system in decoded_systems(ctx)
        for name, _ in decode_targets(ctx)
    ]


@stage(
    5,
    "gmm_decode",
    "HCLG for each GMM system (wfst.gmm_systems=last: the last only) with the stage-3 LM, dev "
    "decoded at every wfst.lm_weights x wfst.word_penalties, test at the best; "
    "gmm/<system>/decode_<set>/",
    uses=("wfst", "decode", "lm"),
    needs=(3, 4),
    pipelines=("hybrid",),
    on_skip=lambda ctx: show_decoded(_gmm_folders(ctx)),
    outputs=lambda ctx: [
        *(folder / "hyp" for _, folder, _ in _gmm_folders(ctx)),
        *(gmm_dir(ctx) / name / "graph" / "HCLG.fst" for name in decoded_systems(ctx)),
        *([gmm_dir(ctx) / PRON_LANG / "L_disambig.fst"] if ctx.cfg.wfst.pron_probs else []),
    ],
)
def gmm_decode(ctx: StageContext) -> None:
    from asrkit.decoding.hclg import GmmDecoder
    from asrkit.gmm.graph import make_g, make_graph
    from asrkit.gmm.lang import load_lang
    from asrkit.gmm.train import GmmSystem

    root = gmm_dir(ctx)
    lang = load_lang(root / "lang")
    timings: dict[str, float] = {}
    began = time.monotonic()
    graph_lang = _pron_lang(ctx) if ctx.cfg.wfst.pron_probs else lang
    if ctx.cfg.wfst.pron_probs:
        timings["pron_probs"] = round(time.monotonic() - began, 2)
        began = time.monotonic()
    # G depends on the lang and the LM only: built once for every system (as Kaldi's
    # format_lm.sh, and the HMM benchmark), not once per graph.
    grammar = make_g(_lm(ctx), graph_lang)
    timings["G"] = round(time.monotonic() - began, 2)
    for system_name in decoded_systems(ctx):
        began = time.monotonic()
        system = GmmSystem.load(root / system_name, lang)
        graph = make_graph(
            graph_lang,
            system.ctx_dep,
            system.trans_model,
            grammar,
            root / system_name / "graph",
            self_loop_scale=ctx.cfg.wfst.self_loop_scale,
            transition_scale=ctx.cfg.wfst.transition_scale,
        )
        timings[f"{system_name}_graph"] = round(time.monotonic() - began, 2)
        decoder = GmmDecoder(
            system,
            _search(ctx, graph, system.trans_model),
            _grid(ctx),
            name=system_name,
            features_root=root / "data",
            sample_rate=ctx.cfg.features.sample_rate,
            graph=root / system_name / "graph",
            transitions=root / system_name / "final.mdl",
            system_dir=root / system_name,
            first_pass=tuple(ctx.cfg.wfst.first_pass),  # type: ignore[arg-type]
            fmllr_estimates=ctx.cfg.wfst.fmllr_estimates,
            adapt=ctx.cfg.gmm,
            nj=ctx.cfg.wfst.nj,
        )
        prepared: dict[str, Prepared] = {}
        tune_and_decode(
            decoder,
            tune=lambda: tune_target(ctx),
            targets=decode_targets(ctx),
            out_dir=partial(_decode_dir, root / system_name),
            prepared=prepared,
            record_dir=root / system_name,
        )
        _first_passes(ctx, root / system_name, prepared)
        _rtf(timings, f"{system_name}_", prepared)
    atomic_write(root / "decode_timings.json", json.dumps(timings, indent=2) + "\n")


#: The lang dir with pronunciation probabilities the graphs are built from
#: (``wfst.pron_probs``), beside the plain ``gmm/lang`` the GMMs train with.
PRON_LANG = "lang_pp"


def _pron_lang(ctx: StageContext) -> Lang:
    """``gmm/lang`` with the pronunciation probabilities of the last system's training
    alignments (of the original recordings, as the GMMs trained on), in ``gmm/lang_pp``."""
    from asrkit.data.perturb import original_only, perturbed_factors
    from asrkit.gmm.pronprobs import lang_with_pron_probs

    root, train_set = gmm_dir(ctx), ctx.cfg.data.train_set
    texts = read_data_dir(root / "data" / train_set).text or {}
    texts = original_only(texts, perturbed_factors(ctx.data_root / train_set))
    return lang_with_pron_probs(
        root / "lang",
        root / system_names(ctx)[-1],
        root / f"ali_{train_set}",
        {utt: text.split() for utt, text in texts.items()},
        root / PRON_LANG,
    )


def _first_passes(ctx: StageContext, system_dir: Path, prepared: Mapping[str, Prepared]) -> None:
    """A SAT system's two-pass decoding, as Kaldi leaves it: each set's test speakers'
    transforms in ``decode_<set>/trans.1`` and the speaker-independent first pass scored in
    ``decode_<set>.si/``."""
    from asrkit.data.kaldi_ark import write_ark
    from asrkit.decoding.decoder import write_and_score
    from asrkit.stages.common import report

    sets = dict([*decode_targets(ctx), tune_target(ctx)])
    for name, done in prepared.items():
        if "speakers" not in done.extra or name not in sets:
            continue
        write_ark(
            _decode_dir(system_dir, name) / "trans.1", sorted(done.extra["speakers"].items()), kind="mat"
        )
        folder = system_dir / f"decode_{name}.si"
        line = write_and_score(done.extra["first_pass"], sets[name], folder)
        report(name, f"{system_dir.name} speaker-independent first pass", line, folder)


@stage(
    7,
    "decode",
    "the BLSTM's log posteriors minus log priors decoded through the last GMM system's HCLG, "
    "weights swept on dev; decode_hybrid_<set>/",
    uses=("wfst", "decode"),
    needs=(6,),
    pipelines=("hybrid",),
    on_skip=lambda ctx: show_decoded(method_folders(ctx, "hybrid")),
    outputs=lambda ctx: [folder / "hyp" for _, folder, _ in method_folders(ctx, "hybrid")],
    inputs=model_input,
)
def hybrid_decode(ctx: StageContext) -> None:
    decode_hybrid(ctx, folder="hybrid")


def decode_hybrid(ctx: StageContext, *, folder: str, members: Sequence[Path] = ()) -> None:
    """The network's (and ``members``' experiments', averaged: stage 8) scores through
    the last GMM system's HCLG, tuned on dev; ``decode_<folder>_<set>/``."""
    from asrkit.decoding.hclg import PRIOR_COUNTS, HybridDecoder, HybridScorer
    from asrkit.decoding.recognizer import Recognizer
    from asrkit.decoding.wfst import SWEEP_JOURNAL
    from asrkit.gmm.graph import load_graph_dir
    from asrkit.gmm.model_io import read_model
    from asrkit.targets.alignments import read_alignments
    from asrkit.targets.forced_align import class_counts, log_priors, write_counts

    last = gmm_dir(ctx) / system_names(ctx)[-1]
    if not ctx.cfg.wfst.graph and not (last / "graph" / "HCLG.fst").is_file():
        raise DataError(f"{last / 'graph'}: no HCLG; run stage 5 (gmm_decode) first, or set wfst.graph")
    recognizer = stage_recognizer(ctx, ctx.cfg.decode.model)
    if recognizer.meta.get("objective") != "ce":
        raise ConfigError(
            f"{ctx.exp_dir / ctx.cfg.decode.model}: not a frame (CE) model; retrain it in stage 6"
        )
    model = recognizer.model
    source = alignment_source(ctx.cfg, ctx.exp_dir, "train")
    transitions = read_model(Path(source) / "final.mdl", with_gmm=False)
    if model.num_classes != transitions.num_pdfs:
        raise DataError(
            f"{ctx.exp_dir / ctx.cfg.decode.model}: {model.num_classes} output classes, but "
            f"{source}/final.mdl has {transitions.num_pdfs} pdfs; retrain the model (stage 6) on "
            "these alignments"
        )
    graph_dir = Path(ctx.cfg.wfst.graph) if ctx.cfg.wfst.graph else last / "graph"
    search = _search(ctx, load_graph_dir(graph_dir), transitions)  # a bad graph fails before any write
    counts = class_counts(read_alignments(source), model.num_classes)
    write_counts(ctx.exp_dir / PRIOR_COUNTS, counts)
    scorer = HybridScorer(
        log_priors(counts),
        subsample=int(getattr(model, "subsample", 1)),
        prior_floor=ctx.cfg.wfst.prior_floor,
        prior_scale=ctx.cfg.wfst.prior_scale,
    )
    adapter = None
    if ctx.cfg.align.fmllr:
        from asrkit.gmm.feats import gmm_mfcc
        from asrkit.gmm.nnet_input import SpeakerAdapter, read_ivector_extractor

        # What asrkit transcribe adapts a speaker's recordings with (the record names it).
        adapter = SpeakerAdapter(
            last,
            gmm=ctx.cfg.gmm,
            wfst=ctx.cfg.wfst,
            mfcc=gmm_mfcc(ctx.cfg.features),
            ivectors=read_ivector_extractor(ctx.exp_dir) if ctx.cfg.align.ivector_dim else None,
        )
    decoder = HybridDecoder(
        recognizer,
        scorer,
        search,
        _grid(ctx),
        counts=PRIOR_COUNTS,
        graph=graph_dir,
        transitions=Path(source) / "final.mdl",
        adapter=adapter,
        lang=gmm_dir(ctx) / "lang",
        nj=ctx.cfg.wfst.nj,
        members=[
            Recognizer(member, model="model.pt", device=recognizer.device, max_frames=recognizer.max_frames)
            for member in members
        ],
    )
    # A stopped decoding goes on where it was (a weak model's lattices are slow).
    decoder.journal = lambda name: ctx.exp_dir / f"decode_{folder}_{name}" / SWEEP_JOURNAL
    prepared: dict[str, Prepared] = {}

    def network_input(target: tuple[str, Path]) -> tuple[str, Path]:
        """A set as the network reads it: with align.fmllr, its joined fbank + fMLLR
        features (the speakers' transforms from the SAT system's two-pass decoding)."""
        if not ctx.cfg.align.fmllr:
            return target
        from asrkit.gmm.nnet_input import write_decoding_input

        name, data_dir = target
        return name, write_decoding_input(
            ctx.exp_dir,
            data_dir,
            name,
            last,
            ivectors=bool(ctx.cfg.align.ivector_dim),
            fbank=recognizer.meta.get("fbank", True),
        )

    tune_and_decode(
        decoder,
        tune=lambda: network_input(tune_target(ctx)),
        targets=[network_input(t) for t in decode_targets(ctx)],
        out_dir=lambda name: ctx.exp_dir / f"decode_{folder}_{name}",
        prepared=prepared,
        record_dir=ctx.exp_dir,  # what asrkit transcribe decodes with
    )
    timings: dict[str, float] = {}
    _rtf(timings, "", prepared)
    atomic_write(ctx.exp_dir / f"decode_{folder}_timings.json", json.dumps(timings, indent=2) + "\n")


@stage(
    8,
    "combine",
    "an ensemble of BLSTMs: train each ensemble.members entry's network (stage 6 in "
    "<exp_dir>/member<i>/, on this experiment's alignments and input) and decode the "
    "networks' averaged log posteriors through HCLG, tuned on dev; decode_combined_<set>/ "
    "(nothing without members)",
    uses=("ensemble",),
    needs=(7,),
    pipelines=("hybrid",),
    on_skip=lambda ctx: show_decoded(method_folders(ctx, "combined")),
    inputs=model_input,
)
def hybrid_combine(ctx: StageContext) -> None:
    from asrkit.decoding.recognizer import check_exp_dir
    from asrkit.stages.members import member_dir, train_members

    if not ctx.cfg.ensemble.members:
        log.info("stage 8: ensemble.members is empty; no networks to combine")
        return
    check_exp_dir(ctx.exp_dir, ctx.cfg.decode.model)
    for index in range(1, len(ctx.cfg.ensemble.members) + 1):
        # Stage 3's tokenizer (the phones the tied states belong to), which stage 6 reads.
        shutil.copytree(ctx.exp_dir / "tokenizer", member_dir(ctx, index) / "tokenizer", dirs_exist_ok=True)
    members = train_members(ctx, stages=(6, 6))
    for number, system in enumerate([ctx.exp_dir, *members]):
        summary = system / "train_summary.json"
        history = json.loads(summary.read_text()).get("history", []) if summary.is_file() else []
        last = history[-1] if history else {}
        log.info(
            "network %d (%s): last epoch's dev loss %s, dev frame accuracy %s",
            number,
            system,
            f"{last['loss']:.3f}" if "loss" in last else "?",
            f"{last['frame_acc']:.2f}%" if "frame_acc" in last else "?",
        )
    decode_hybrid(ctx, folder="combined", members=members)
