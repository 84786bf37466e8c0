"""Stage 4: train the acoustic model; writes ``model.pt`` and ``train_summary.json``."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil

import torch

from asrkit.data.io import atomic_write
from asrkit.features.cmvn import read_cmvn
from asrkit.models.lstm import build_model
from asrkit.stages.registry import StageContext, stage
from asrkit.targets.tokenizer import Tokenizer
from asrkit.training.checkpoint import load_checkpoint, save_checkpoint
from asrkit.training.data import CmvnNormalizer, load_utterances
from asrkit.training.trainer import Trainer

log = logging.getLogger(__name__)


@stage(4, "train", "train the (B)LSTM CTC acoustic model, validating on the dev set every epoch")
def train(ctx: StageContext) -> None:
    cfg = ctx.cfg
    torch.manual_seed(cfg.seed)
    if cfg.train.num_threads > 0:
        torch.set_num_threads(cfg.train.num_threads)
    tokenizer = Tokenizer(ctx.exp_dir / "tokenizer")
    train_dir, dev_dir = ctx.data_root / cfg.data.train_set, ctx.data_root / cfg.data.dev_set
    stats = None
    if cfg.features.cmvn == "global":
        # The training set's stats normalise every set, and travel with the model.
        shutil.copyfile(train_dir / "cmvn_global.ark", ctx.exp_dir / "cmvn_global.ark")
        stats = read_cmvn(ctx.exp_dir / "cmvn_global.ark")
    normalize = CmvnNormalizer(cfg.features.cmvn, global_stats=stats,
                               norm_vars=cfg.features.norm_vars)
    dim = cfg.features.dim
    train_utts = load_utterances(train_dir, normalize, tokenizer=tokenizer, input_dim=dim)
    dev_utts = load_utterances(dev_dir, normalize, tokenizer=tokenizer, input_dim=dim)
    model = build_model(cfg.model, input_dim=dim, num_tokens=tokenizer.num_tokens)
    log.info("model: %s size, %.2fM parameters; %d train / %d dev utterances", cfg.model.size,
             sum(p.numel() for p in model.parameters()) / 1e6, len(train_utts), len(dev_utts))
    meta = {"model": model.args, "features": dataclasses.asdict(cfg.features),
            "cmvn": cfg.features.cmvn, "tokenizer": "tokenizer"}
    trainer = Trainer(model, train_utts, dev_utts, tokenizer=tokenizer, exp_dir=ctx.exp_dir,
                      cfg=cfg.train, optim=cfg.optim, schedule=cfg.schedule, specaug=cfg.specaug,
                      meta=meta, seed=cfg.seed)
    state = trainer.fit()
    best = load_checkpoint(ctx.exp_dir / "checkpoints" / "best.pt")
    save_checkpoint(ctx.exp_dir / "model.pt", {"model": best["model"], "meta": best["meta"]})
    atomic_write(ctx.exp_dir / "train_summary.json",
                 json.dumps({"history": state.history, "best": state.best}, indent=2) + "\n")
    log.info("best epoch %d (dev WER %.2f%%) saved as %s", state.best["epoch"], state.best["wer"],
             ctx.exp_dir / "model.pt")
