"""The hybrid pipeline's own stages (``pipeline=hybrid``): IBM's acoustic models.

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
  stage 5 (``decode_hybrid_<set>/``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from asrkit.data.datadir import read_data_dir
from asrkit.data.io import atomic_write
from asrkit.decoding.recognizer import write_and_score
from asrkit.errors import ConfigError, DataError
from asrkit.scoring.wer import read_text
from asrkit.stages.decode import decode_targets, report, sweep, tune_target
from asrkit.stages.registry import StageContext, stage

log = logging.getLogger(__name__)


def gmm_dir(ctx: StageContext) -> Path:
    return ctx.exp_dir / "gmm"


def system_names(ctx: StageContext) -> list[str]:
    """The GMM systems in training order: ``mono``, ``tri1``, ..."""
    return ["mono"] + [f"tri{k + 1}" for k in range(len(ctx.cfg.gmm.tri_leaves))]


def _lexicon_path(ctx: StageContext) -> str:
    path = ctx.cfg.tokenizer.lexicon or ctx.cfg.data.lexicon
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
    uses=("gmm", "data", "tokenizer"),
    needs=(1,),
    pipelines=("hybrid",),
    outputs=lambda ctx: [gmm_dir(ctx) / f"ali_{s}" / "ali.1.gz" for s in (ctx.cfg.data.train_set, ctx.cfg.data.dev_set)],
)
def gmm(ctx: StageContext) -> None:
    from dataclasses import replace

    from asrkit.gmm.feats import GmmFeatures, make_gmm_data_dir
    from asrkit.gmm.lang import prepare_lang
    from asrkit.gmm.train import GraphCompiler, align, train_mono, train_triphone, write_alignment_dir
    from asrkit.targets.phones import read_pronunciations

    cfg = ctx.cfg.gmm
    root = gmm_dir(ctx)
    began = time.monotonic()
    lexicon = read_pronunciations(_lexicon_path(ctx), keep_stress=ctx.cfg.tokenizer.keep_stress)
    lang = prepare_lang(lexicon, root / "lang")
    log.info("lang: %d phones, %d words -> %s", len(lang.real_phones), len(lang.words) - 4, root / "lang")
    mfcc = replace(ctx.cfg.features, kind="mfcc", num_mel_bins=23, num_ceps=13, nj=cfg.nj)
    for name in _gmm_sets(ctx):
        make_gmm_data_dir(ctx.data_root / name, root / "data" / name, root / "mfcc", mfcc)
    train_set, dev_set = ctx.cfg.data.train_set, ctx.cfg.data.dev_set
    feats = GmmFeatures(root / "data" / train_set)
    texts = read_data_dir(root / "data" / train_set).text or {}
    where = str(ctx.data_root / train_set / "text")
    timings: dict[str, float] = {"features": round(time.monotonic() - began, 1)}

    began = time.monotonic()
    system, result = train_mono(lang, feats, texts, cfg, where=where)
    write_alignment_dir(root / "mono", system, result)
    timings["mono"] = round(time.monotonic() - began, 1)
    log.info("mono: %d states, %d Gaussians, log-likelihood per frame %.3f (%.0f s)",
             system.am.num_pdfs, system.am.num_gauss, result.like_per_frame, timings["mono"])
    for k, (leaves, gauss) in enumerate(zip(cfg.tri_leaves, cfg.tri_gauss, strict=True)):
        began = time.monotonic()
        system, result, _ = train_triphone(
            lang, feats, texts, system, result.alignments, cfg, num_leaves=leaves, num_gauss=gauss, where=where
        )
        name = f"tri{k + 1}"
        write_alignment_dir(root / name, system, result)
        timings[name] = round(time.monotonic() - began, 1)
        log.info("%s: %d tied states, %d Gaussians, log-likelihood per frame %.3f (%.0f s)",
                 name, system.am.num_pdfs, system.am.num_gauss, result.like_per_frame, timings[name])
    write_alignment_dir(root / f"ali_{train_set}", system, result)
    began = time.monotonic()
    dev_feats = GmmFeatures(root / "data" / dev_set)
    dev_texts = read_data_dir(root / "data" / dev_set).text or {}
    dev_graphs = GraphCompiler(system).compile(dev_texts, where=str(ctx.data_root / dev_set / "text"))
    dev_result = align(system, dev_feats, dev_graphs, cfg, where=str(ctx.data_root / dev_set))
    write_alignment_dir(root / f"ali_{dev_set}", system, dev_result)
    timings["align_dev"] = round(time.monotonic() - began, 1)
    atomic_write(root / "timings.json", json.dumps(timings, indent=2) + "\n")
    log.info("GMM stage timings (s): %s", timings)


def _register_train() -> None:
    from asrkit.stages.train import train

    stage(
        6,
        "train",
        "train the BLSTM with frame cross-entropy on the GMM's tied states (gmm/ali_<set>), "
        "validating on the dev set every epoch",
        uses=("model", "optim", "schedule", "specaug", "train", "strategy", "objective", "seed", "align", "pipeline"),
        needs=(2, 4),
        pipelines=("hybrid",),
        outputs=lambda ctx: [ctx.exp_dir / "model.pt"],
    )(train)


_register_train()
