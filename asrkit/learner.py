"""One learner's training, as a library function: the train stage calls it in-process (one
learner, or as the learner a user's own torchrun started), the torchrun entry point
:mod:`asrkit.stages.learner_process` calls it in each learner, and the data benchmark's worker
does too, so what it measures is the stage's own path.

:func:`train_learner` sets up the process group (several learners), the threads, the data
(streamed or in memory, with frame targets for CE), the model, the strategy and the
:class:`~asrkit.training.trainer.Trainer`, trains, and has the main learner write
``model.pt`` (the best or averaged checkpoint) and ``train_summary.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from asrkit.comm import Communicator
from asrkit.config import AsrkitConfig
from asrkit.data.datadir import read_frame_shift
from asrkit.data.io import atomic_write, atomic_writer
from asrkit.device import pick_device
from asrkit.distributed.base import write_learner_metrics
from asrkit.distributed.config import WEIGHT_AVERAGING
from asrkit.distributed.launch import (
    DistContext,
    check_world,
    init_process_group,
    shutdown_process_group,
)
from asrkit.distributed.strategies import join_torchrun
from asrkit.errors import ConfigError, DataError, TrainingStopped
from asrkit.features.cmvn import read_cmvn
from asrkit.loader.batch import CmvnNormalizer
from asrkit.loader.opening import open_data_dir
from asrkit.loader.sources import InMemorySource, UtteranceSource, attach_alignments
from asrkit.models.checkpoint import (
    average_checkpoints,
    init_from,
    load_checkpoint,
    save_checkpoint,
)
from asrkit.models.lstm import LSTMAcousticModel, ModelConfig, build_model, model_args
from asrkit.targets.alignments import check_alignments, read_alignments
from asrkit.targets.tokenizer import Tokenizer
from asrkit.threads import ThreadGovernor
from asrkit.training.allocator import retain_freed_memory
from asrkit.training.config import TrainConfig
from asrkit.training.curves import plot_training_curves
from asrkit.training.objectives import Objective, build_objective
from asrkit.training.resume import FaultInjection
from asrkit.training.stop import StopRequest
from asrkit.training.strategy import Strategy, TrainState
from asrkit.training.trainer import Trainer

log = logging.getLogger(__name__)


def train_learner(
    cfg: AsrkitConfig, *, data_root: Path, exp_dir: Path, dctx: DistContext, resume_key: str
) -> None:
    """Train as learner ``dctx.rank``; the main learner writes the outputs. SIGINT and
    SIGTERM from here on stop training after a step, with a resume state saved
    (:mod:`asrkit.training.stop`). ``resume_key``: the hash of the settings that shape
    training (:func:`asrkit.stages.registry.training_resume_key`); resume states saved under
    another are not resumed from."""
    stop = StopRequest()
    installed = stop.install()
    try:
        _train_learner(cfg, data_root=data_root, exp_dir=exp_dir, dctx=dctx, stop=stop, resume_key=resume_key)
    finally:
        if installed:
            stop.wind_down()
    if stop.requested:  # the signal came as training ended: it is whole, but stop here
        raise TrainingStopped(
            f"stopped by {stop.name} after training finished ({exp_dir / 'model.pt'} written); "
            "rerun the same command to continue",
            quiet=not dctx.is_main,
        )


def _thread_governor(train: TrainConfig) -> ThreadGovernor | None:
    """``train.adapt_threads`` on CPU, starting from (and capped at) the threads set."""
    if not train.adapt_threads or pick_device(train.device).type != "cpu":
        return None
    return ThreadGovernor(torch.get_num_threads())


def _train_learner(
    cfg: AsrkitConfig,
    *,
    data_root: Path,
    exp_dir: Path,
    dctx: DistContext,
    stop: StopRequest,
    resume_key: str,
) -> None:
    retain_freed_memory()  # batches reuse freed pages (asrkit.training.allocator)
    if dctx.world_size > 1:
        check_world(cfg.strategy, dctx)
        torch.set_num_threads(cfg.strategy.threads_per_learner)
        init_process_group(dctx, timeout_s=cfg.strategy.timeout_s)
    elif cfg.train.num_threads > 0:
        torch.set_num_threads(cfg.train.num_threads)
    # Per-learner RNG (dropout) so learners do not draw identical masks; the initial
    # weights are rank 0's for every strategy (broadcast), so they do not depend on it.
    torch.manual_seed(cfg.seed + dctx.rank)
    parts = prepare_learner(cfg, data_root=data_root, exp_dir=exp_dir, log_it=dctx.is_main)
    model = parts.new_model(log_it=dctx.is_main)
    if dctx.is_main:
        parts.log_summary(model, learners=dctx.world_size)
    strategy, comm = join_torchrun(cfg.strategy, dctx, seed=cfg.seed)
    trainer = build_trainer(
        cfg,
        parts,
        model,
        exp_dir=exp_dir,
        comm=comm,
        strategy=strategy,
        resume=_resume_mode(cfg.resume, restart=dctx.restart),
        resume_key=resume_key,
        fault=FaultInjection.parse(dctx.fault_kill, rank=dctx.rank, restart=dctx.restart),
        stop=stop,
        threads=_thread_governor(cfg.train),
    )
    try:
        state = trainer.fit()
        if dctx.is_main:
            write_learner_metrics(exp_dir, trainer.learners_summary)
    except BaseException:
        if dctx.world_size > 1 and dist.is_initialized():
            dist.destroy_process_group()  # no barrier: the others may be gone
        raise
    if dctx.world_size > 1:
        shutdown_process_group()
    if dctx.is_main:
        write_final_model(cfg, state, exp_dir, learners=dctx.world_size)


@dataclass
class LearnerParts:
    """What every learner of a run shares: the data (metadata, or in memory), the
    tokenizer, the objective and the model's settings (:func:`prepare_learner`)."""

    cfg: AsrkitConfig
    train_set: UtteranceSource
    dev_set: UtteranceSource
    tokenizer: Tokenizer
    model_cfg: ModelConfig
    objective: Objective
    #: The checkpoints' ``meta`` but for the model's own arguments (:meth:`meta_for`).
    meta: dict[str, Any]
    frame_shift: tuple[float, float]
    #: The network's input dimension (the features', plus the fMLLR features' with
    #: ``align.fmllr``; 0: ``features.dim``).
    input_dim: int = 0

    def meta_for(self, model: LSTMAcousticModel) -> dict[str, Any]:
        """What checkpoints of ``model`` carry to rebuild and use it without a config."""
        return {"model": model.args, **self.meta}

    def new_model(self, *, log_it: bool = False) -> LSTMAcousticModel:
        """A freshly initialised model (from the global RNG; ``train.init_from`` copied in)."""
        cfg = self.cfg
        model = build_model(
            self.model_cfg, input_dim=self.input_dim or cfg.features.dim, num_tokens=self.tokenizer.num_tokens
        )
        if cfg.train.init_from:
            copied = init_from(model, cfg.train.init_from)
            if log_it:
                log.info(
                    "initialised %d of %d parameter tensors from %s",
                    len(copied),
                    len(model.state_dict()),
                    cfg.train.init_from,
                )
        return model

    def log_summary(self, model: LSTMAcousticModel, *, learners: int) -> None:
        cfg = self.cfg
        advice = averaging_optimizer_advice(cfg, learners)
        if advice:
            log.warning("%s", advice)
        log.info(
            "model: %s size, %.2fM parameters; %d train / %d dev utterances (%.1f / %.1f "
            "hours, %s); strategy %s with %d learner(s)",
            cfg.model.size,
            sum(p.numel() for p in model.parameters()) / 1e6,
            len(self.train_set),
            len(self.dev_set),
            _hours(self.train_set, self.frame_shift[0]),
            _hours(self.dev_set, self.frame_shift[1]),
            "in memory" if cfg.train.in_memory else f"streamed, {cfg.train.prefetch} batches read ahead",
            cfg.strategy.name,
            learners,
        )


#: An averaging learner whose Adam sees fewer utterances than this per step is warned.
ADAM_AVERAGING_MIN_BATCH = 16


def averaging_optimizer_advice(cfg: AsrkitConfig, learners: int) -> str | None:
    """A warning for a weight-averaging strategy with Adam at a few utterances per
    optimizer step (None when the combination is not that): each learner's Adam normalises
    its own small, noisy gradient, so the average of the learners' steps is not one step on
    the global batch, and the study's averaging runs at a few utterances a learner ended
    well behind SYNC (with either optimizer: docs/study.md). The warning says what was
    measured and points to the advice; it does not tell the user to switch optimizers,
    since with the papers' SGD recipe the same runs did worse still."""
    if learners < 2 or cfg.strategy.name not in WEIGHT_AVERAGING or cfg.optim.name != "adam":
        return None
    # A HYBRID group's learners sum their gradients: its optimizer sees the group's batch.
    per_step = cfg.train.max_batch // learners * int(getattr(cfg.strategy, "group_size", 1) or 1)
    if per_step >= ADAM_AVERAGING_MIN_BATCH:
        return None
    return (
        f"strategy={cfg.strategy.name} averages the weights of learners whose Adam steps on "
        f"{per_step} utterance(s) each (train.max_batch={cfg.train.max_batch} over {learners} "
        "learners): each learner's Adam normalises its own small-batch gradient, so the averaged "
        "steps are not one step on the global batch. In the study (AN4, 64 learners at 2 "
        "utterances each, docs/study.md) ADPSGD and delay-by-one ended 13-16 points of dev WER "
        "behind SYNC with Adam (17-50 with the papers' SGD recipe) and HYBRID 4-6; prefer SYNC "
        "or HYBRID at a few utterances per learner, or fewer learners (docs/distributed-training.md)"
    )


def prepare_learner(cfg: AsrkitConfig, *, data_root: Path, exp_dir: Path, log_it: bool) -> LearnerParts:
    """Open the training and dev sets (with frame targets for CE; read into memory with
    ``train.in_memory``), check the tokenizer, and settle the model's and objective's
    settings. ``log_it``: this learner reports (the main one)."""
    tokenizer = Tokenizer(exp_dir / "tokenizer")
    if (tokenizer.kind == "phone") != (cfg.tokenizer.kind == "phone"):
        # e.g. a tokenizer dir copied from another experiment: its units are not the config's.
        raise ConfigError(
            f"{exp_dir / 'tokenizer'} holds a {tokenizer.kind} tokenizer but tokenizer.kind="
            f"{cfg.tokenizer.kind}; run stage 3 again (--stage 3) to build the config's units"
        )
    dim = cfg.features.dim
    if cfg.align.fmllr:
        # The joined fbank + fMLLR features the training stage wrote (asrkit.gmm.nnet_input).
        from asrkit.gmm.nnet_input import fmllr_data_root, fmllr_dim

        data_root = fmllr_data_root(Path(cfg.align.inputs_from) if cfg.align.inputs_from else exp_dir)
        if cfg.align.inputs_from and not (data_root / cfg.data.train_set).is_dir():
            raise DataError(
                f"align.inputs_from={cfg.align.inputs_from}: {data_root / cfg.data.train_set} not found; "
                "name a hybrid experiment whose training stage (stage 6) has run with align.fmllr=true"
            )
        dim = dim if cfg.align.fbank else 0  # align.fbank=false: the fMLLR features alone
        dim += fmllr_dim(Path(alignment_source(cfg, exp_dir, "train"))) + cfg.align.ivector_dim
    train_dir, dev_dir = data_root / cfg.data.train_set, data_root / cfg.data.dev_set
    stats = None
    if cfg.features.cmvn == "global":
        # The training set's stats normalise every set, and travel with the model.
        stats = read_cmvn(train_dir / "cmvn_global.ark")  # a clear error when it is missing
        if log_it:
            with atomic_writer(exp_dir / "cmvn_global.ark", "wb") as out:
                out.write((train_dir / "cmvn_global.ark").read_bytes())
    normalize = CmvnNormalizer(cfg.features.cmvn, global_stats=stats, norm_vars=cfg.features.norm_vars)
    # Metadata only: features are read batch by batch as training uses them (or, with
    # train.in_memory, all at once here).
    train_set: UtteranceSource = open_data_dir(train_dir, normalize, tokenizer=tokenizer, input_dim=dim)
    dev_set: UtteranceSource = open_data_dir(
        dev_dir, normalize, tokenizer=tokenizer, input_dim=dim, keep_text=True
    )
    model_cfg, token_classes = cfg.model, False
    if cfg.objective == "ce":
        train_set, num_classes, token_classes = _with_alignments(
            cfg, exp_dir, train_set, "train", num_classes=cfg.model.num_classes, log_it=log_it
        )
        model_cfg = dataclasses.replace(cfg.model, num_classes=num_classes)
    if cfg.train.in_memory:
        train_set, dev_set = InMemorySource(train_set.read_all()), InMemorySource(dev_set.read_all())
    if cfg.objective == "ce":
        dev_set, _, _ = _with_alignments(
            cfg, exp_dir, dev_set, "dev", num_classes=model_cfg.num_classes, log_it=log_it
        )
    objective = build_objective(cfg.objective, token_classes=token_classes)
    meta = {
        "features": dataclasses.asdict(cfg.features),
        "cmvn": cfg.features.cmvn,
        "tokenizer": "tokenizer",
        "units": tokenizer.signature(),
        "objective": cfg.objective,
        "decode_head": objective.decodes_from,
        "fmllr": cfg.align.fmllr,
        "fbank": cfg.align.fbank,
        "ivector_dim": cfg.align.ivector_dim,
    }
    return LearnerParts(
        cfg,
        train_set,
        dev_set,
        tokenizer,
        model_cfg,
        objective,
        meta,
        (read_frame_shift(train_dir), read_frame_shift(dev_dir)),
        dim,
    )


def build_trainer(
    cfg: AsrkitConfig,
    parts: LearnerParts,
    model: LSTMAcousticModel,
    *,
    exp_dir: Path,
    comm: Communicator,
    strategy: Strategy,
    resume: str = "false",
    resume_key: str = "",
    fault: FaultInjection | None = None,
    stop: StopRequest | None = None,
    threads: ThreadGovernor | None = None,
    resume_states: bool = True,
) -> Trainer:
    """One learner's :class:`~asrkit.training.trainer.Trainer` over ``parts``."""
    return Trainer(
        model,
        parts.train_set,
        parts.dev_set,
        tokenizer=parts.tokenizer,
        exp_dir=exp_dir,
        cfg=cfg.train,
        optim=cfg.optim,
        schedule=cfg.schedule,
        specaug=cfg.specaug,
        meta=parts.meta_for(model),
        comm=comm,
        strategy=strategy,
        seed=cfg.seed,
        objective=parts.objective,
        resume=resume,
        fault=fault,
        stop=stop,
        threads=threads,
        resume_key=resume_key,
        resume_states=resume_states,
    )


def write_final_model(cfg: AsrkitConfig, state: TrainState, exp_dir: Path, *, learners: int) -> None:
    """The main learner's last act: ``model.pt`` (the best or averaged checkpoint) and
    ``train_summary.json``."""
    # Replicas of the averaging strategies differ until the final consensus average, so
    # their model is the last epoch's (the consensus); otherwise the best dev epoch's.
    averaged = learners > 1 and cfg.strategy.name in WEIGHT_AVERAGING
    ckpt_dir, last = exp_dir / "checkpoints", state.epoch
    averaging = min(cfg.train.average_last, last)  # a shorter run averages all its epochs
    if averaging > 1:
        first = last - averaging + 1
        chosen = f"the average of epochs {first}-{last}"
        bundle = average_checkpoints([ckpt_dir / f"epoch{e}.pt" for e in range(first, last + 1)])
    else:
        chosen = f"epoch{last}.pt" if averaged else "best.pt"
        best = load_checkpoint(ckpt_dir / chosen)
        bundle = {"model": best["model"], "meta": best["meta"]}
    save_checkpoint(exp_dir / "model.pt", bundle)
    atomic_write(
        exp_dir / "train_summary.json",
        json.dumps(
            {
                "strategy": cfg.strategy.name,
                "learners": learners,
                "steps": state.step,
                "data_wait_s": round(state.data_wait_s, 3),
                "train_s": round(state.train_s, 3),
                "first_step_time": state.first_step_time,
                "history": state.history,
                "best": state.best,
            },
            indent=2,
        )
        + "\n",
    )
    plot_training_curves(state.history, exp_dir / "curves.png", title=f"{exp_dir.name} ({cfg.strategy.name})")
    assert state.best is not None  # fit() validated at least once
    metric = "wer" if "wer" in state.best else "loss"
    log.info(
        "%s saved as %s (best dev %s %.3f at epoch %d)",
        chosen,
        exp_dir / "model.pt",
        metric,
        state.best[metric],
        state.best["epoch"],
    )


def _resume_mode(setting: str, *, restart: int) -> str:
    """``resume``, except that a learner torchrun restarted after a failure always resumes
    (``resume=false``, as ``--force`` sets it, means the run's first attempt starts over)."""
    if setting == "false" and restart:
        return "auto"
    return setting


def alignment_source(cfg: AsrkitConfig, exp_dir: Path, which: str) -> str:
    """``align.train`` / ``align.dev``, or this experiment's forced-alignment dir (the GMM
    stage's ``gmm/ali_<set>`` in the hybrid pipeline)."""
    setting = cfg.align.train if which == "train" else cfg.align.dev
    name = cfg.data.train_set if which == "train" else cfg.data.dev_set
    if cfg.pipeline == "hybrid":
        return setting or str(exp_dir / "gmm" / f"ali_{name}")
    return setting or str(exp_dir / f"ali_{name}")


def adopt_alignment_tokenizer(source: str, exp_dir: Path) -> None:
    """Alignments made by the forced-alignment stage carry their tokenizer (their classes
    are its units): use it when this experiment has none, refuse a different one."""
    theirs, mine = Path(source) / "tokenizer", exp_dir / "tokenizer"
    if not (theirs / "units.txt").is_file():
        return
    if not (mine / "units.txt").is_file():
        shutil.copytree(theirs, mine, dirs_exist_ok=True)
        log.info("tokenizer: %s (the alignments' classes are its units)", theirs)
    elif (mine / "units.txt").read_bytes() != (theirs / "units.txt").read_bytes():
        raise ConfigError(
            f"{theirs}: the alignments' classes are this tokenizer's units, but "
            f"{mine} differs; remove {mine} to use the alignments' tokenizer"
        )


def _with_alignments(
    cfg: AsrkitConfig, exp_dir: Path, data: UtteranceSource, which: str, *, num_classes: int, log_it: bool
) -> tuple[UtteranceSource, int, bool]:
    """Check the set's alignments against its frame counts (no features are read) and
    attach them; returns the utterances that have them, the number of classes and whether
    the classes are tokenizer units."""
    source = alignment_source(cfg, exp_dir, which)
    check = cfg.align.check_config(num_classes=num_classes)
    setting = cfg.align.train if which == "train" else cfg.align.dev
    if cfg.pipeline == "hybrid" and not setting:
        # The GMM stage's own alignments: it already allowed (and reported) up to
        # gmm.max_fail of utterances that would not align; they are left out here too, as
        # Kaldi's nnet training leaves out utterances without alignments.
        check = dataclasses.replace(check, max_missing=max(check.max_missing, cfg.gmm.max_fail))
    frames = dict(zip(data.ids, data.lengths.tolist(), strict=True))
    fixed, report = check_alignments(read_alignments(source), frames, check, source=source)
    report.raise_if_unusable()
    if log_it:
        log.info(
            "%s alignments: %s",
            which,
            "; ".join(" ".join(line.split()) for line in report.summary().splitlines()),
        )
    kept = attach_alignments(
        data,
        fixed,
        factor=report.subsampling_factor,
        model_subsample=model_args(cfg.model)["subsample"],
        source=source,
    )
    token_classes = (Path(source) / "tokenizer" / "units.txt").is_file()
    return kept, report.num_classes, token_classes


def _hours(data: UtteranceSource, shift_s: float) -> float:
    return float(data.lengths.sum()) * shift_s / 3600.0
