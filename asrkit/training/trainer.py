"""The training loop.

:class:`Trainer.fit` is the whole loop. A distributed strategy sees it only at the six
points of :class:`~asrkit.training.strategy.Strategy`; what the learners do together
besides (summing dev figures and stop flags, agreeing on a resume state, waiting for
each other's saves) goes through the :class:`~asrkit.comm.Communicator` the
trainer is handed, and the batches come from the planner
(:func:`~asrkit.loader.planning.shard_batches`) under the strategy's sharding. A single
process is a :class:`~asrkit.comm.SoloCommunicator` and the no-op
:class:`~asrkit.training.strategy.Strategy`.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from asrkit.choices import resume_mode
from asrkit.comm import Communicator, Pending, SoloCommunicator
from asrkit.device import pick_device
from asrkit.errors import ConfigError, TrainingDiverged
from asrkit.loader.batch import Batch, Utterance, chunk_batch
from asrkit.loader.planning import BucketBatches, shard_batches
from asrkit.loader.prefetch import timed
from asrkit.loader.sources import UtteranceSource, as_source
from asrkit.models.checkpoint import save_checkpoint
from asrkit.models.lstm import LSTMAcousticModel
from asrkit.targets.tokenizer import Tokenizer
from asrkit.threads import ThreadGovernor
from asrkit.training.config import OptimConfig, ScheduleConfig, SpecAugConfig, TrainConfig
from asrkit.training.objectives import CtcObjective, Objective
from asrkit.training.resume import (
    FaultInjection,
    ResumeStore,
    Tag,
    common_tag,
    rng_state,
    set_rng_state,
)
from asrkit.training.schedule import LRSchedule
from asrkit.training.specaug import spec_augment
from asrkit.training.stop import StopRequest, TrainingStopped
from asrkit.training.strategy import Strategy, TrainState

log = logging.getLogger(__name__)

#: Dev metrics as logged (in this order) when the objective reports them.
_METRIC_NAMES = {"loss": "loss", "wer": "WER", "frame_acc": "frame accuracy"}


def loader_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The batch planner's size caps (of the global batch) and read-ahead from ``cfg``."""
    return {
        "max_frames": max(1, cfg.max_frames),
        "max_batch": max(1, cfg.max_batch),
        "prefetch": cfg.prefetch,
        "workers": cfg.loader_workers,
        "loader": cfg.loader,
    }


def build_optimizer(params: Iterable[nn.Parameter], cfg: OptimConfig) -> torch.optim.Optimizer:
    """``adam`` or ``sgd`` (Nesterov momentum) from the ``optim`` settings (checked when
    the config was composed: :data:`asrkit.choices.OPTIMIZERS`)."""
    if cfg.name == "adam":
        return torch.optim.Adam(
            params,
            lr=cfg.lr,
            betas=(cfg.betas[0], cfg.betas[1]),
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            fused=cfg.fused or None,
        )
    return torch.optim.SGD(
        params,
        lr=cfg.lr,
        momentum=cfg.momentum,
        nesterov=cfg.nesterov and cfg.momentum > 0,
        weight_decay=cfg.weight_decay,
        fused=cfg.fused or None,
    )


class Trainer:
    """Trains an :class:`LSTMAcousticModel` on bucketed batches (CTC, or frame CE).

    Args:
        model: the model (moved to ``device``).
        train: the training set; dev: the validation set (streamed sources, or
            utterances in memory).
        tokenizer: turns dev hypotheses into words for the dev WER.
        exp_dir: where ``checkpoints/`` and ``tensorboard/`` go.
        cfg, optim, schedule, specaug: settings.
        meta: saved in every checkpoint (see :mod:`asrkit.models.checkpoint`).
        comm: all learners, for the sums, resume agreement and save barriers (default:
            a learner alone).
        strategy: the distributed strategy (default: a single process's).
        seed: seeds batch order and masking.
        objective: the loss and dev metrics (default CTC).
        resume: ``auto`` continues from the newest resume state in ``exp_dir/checkpoints/
            resume`` made with the same ``resume_key``; ``true`` requires one; ``false``
            starts over (see :mod:`asrkit.training.resume`).
        resume_key: a hash of the settings that shape training; states saved under
            another key are not resumed from.
        threads: adapts the intra-op threads to a busy CPU between steps
            (``train.adapt_threads``).
        resume_states: save resume states (off: the simulator's learners, whose run is
            resumed whole; epoch checkpoints are saved either way).
    """

    def __init__(
        self,
        model: LSTMAcousticModel,
        train: UtteranceSource | list[Utterance],
        dev: UtteranceSource | list[Utterance],
        *,
        tokenizer: Tokenizer,
        exp_dir: str | Path,
        cfg: TrainConfig,
        optim: OptimConfig,
        schedule: ScheduleConfig,
        specaug: SpecAugConfig,
        meta: dict[str, Any],
        comm: Communicator | None = None,
        strategy: Strategy | None = None,
        seed: int = 1,
        objective: Objective | None = None,
        resume: str = "false",
        resume_key: str = "",
        fault: FaultInjection | None = None,
        stop: StopRequest | None = None,
        threads: ThreadGovernor | None = None,
        resume_states: bool = True,
    ) -> None:
        self.resume, self.resume_key = resume_mode(resume), resume_key
        self.resume_states = resume_states
        self.cfg, self.specaug, self.meta, self.seed = cfg, specaug, meta, seed
        self.objective = objective or CtcObjective()
        self.device = pick_device(cfg.device)
        self.model = model.to(self.device)
        # The head the loss does not use (a CE model's CTC head) never gets a gradient:
        # say so, or DDP waits for its gradients (and fails at the next step).
        for head in ("ctc", "frame"):
            module = getattr(self.model, f"{head}_head", None)
            if module is not None and head != self.objective.trains:
                module.requires_grad_(False)
        factor = int(getattr(model, "subsample", 1))
        if cfg.chunk_frames % factor or cfg.chunk_context % factor:
            raise ConfigError(
                f"train.chunk_frames={cfg.chunk_frames} and train.chunk_context={cfg.chunk_context} must be "
                f"multiples of the model's subsampling factor {factor} (model.subsample)"
            )
        self.comm = comm or SoloCommunicator()
        self.strategy = strategy or Strategy()
        self.rank, self.world_size = self.comm.rank, self.comm.size
        self.tokenizer, self.dev, self.is_main = tokenizer, as_source(dev), self.rank == 0
        self.dev_texts = self.dev.texts()
        self.exp_dir = Path(exp_dir)
        self.batches = shard_batches(
            as_source(train), self.strategy.sharding, seed=seed, **loader_settings(cfg)
        )
        # Every learner scores whole dev batches rank::world (sharded validation), each
        # capped at a learner's share of the global caps, as its training batches are: at
        # the global caps, 64 learners' dev set made a few global-sized batches that 2-3
        # learners scored while the rest waited, longer than a training epoch.
        settings = loader_settings(cfg)
        for cap in ("max_frames", "max_batch"):
            settings[cap] = max(1, settings[cap] // self.world_size)
        self.dev_batches = BucketBatches(
            self.dev, shuffle=False, bucket_share=(self.rank, self.world_size), **settings
        )
        for batches in (self.batches, self.dev_batches):
            batches.pin_memory = self.device.type == "cuda"
        self.optimizer = build_optimizer(self.model.parameters(), optim)
        self.schedule = LRSchedule(
            schedule,
            peak_lr=optim.peak_lr(cfg.max_batch),
            total_steps=cfg.epochs * len(self.batches),
            steps_per_epoch=len(self.batches),
        )
        self.state = TrainState()
        # SpecAugment draws per learner, so learners do not mask their utterances alike.
        self.generator = torch.Generator().manual_seed(seed * 1009 + self.rank)
        self._writer = None
        self.last_dev: dict[str, float] = {}
        self.store = ResumeStore(self.exp_dir / "checkpoints" / "resume", self.rank)
        self.fault = fault
        self.stop = stop
        self.threads = threads
        #: The batch after which a signal stopped this epoch's steps (None: not stopped).
        self._stopped_after: int | None = None
        #: The replicas hold restored weights (set by :meth:`restore`).
        self.resumed = False
        #: A barrier posted after a save that the next save waits for (learners that are
        #: not in lock-step: see :meth:`_wait_for_saves`).
        self._saves_barrier: Pending | None = None
        #: What the strategy measured of its learners (``learners.json``; None alone).
        self.learners_summary: dict[str, Any] | None = None
        self._epoch_loss: list[float] = [0.0, 0]  # training loss sum and steps of the epoch
        self._last_lr = 0.0

    def fit(self) -> TrainState:
        """Train for ``cfg.epochs`` epochs, validating and checkpointing after each
        (continuing from a resume state first, as ``resume`` says)."""
        start_epoch, start_batch = self.restore()
        if start_epoch >= self.cfg.epochs:
            return self.state  # the run had finished: its last checkpoint is the final model
        with self.batches, self.dev_batches:
            # Reading workers start before the first step has grown the learner's heap.
            self.batches.start()
            self.dev_batches.start()
            self._fit(start_epoch, start_batch)
        self._wait_for_saves()
        return self.state

    def _fit(self, start_epoch: int, start_batch: int) -> None:
        model = self.strategy.wrap(self.model, resumed=self.resumed)
        for epoch in range(start_epoch, self.cfg.epochs):
            skip = start_batch if epoch == start_epoch else 0
            seconds, waited = self.train_epoch(
                model, self.batches.epoch(epoch, start=skip), epoch=epoch, first=skip
            )
            if self._stopped_after is None and self._stop_requested(collective=True):
                self._stopped_after = len(self.batches)  # the epoch's steps are done, no more
            if self._stopped_after is not None:
                self._stop_in_epoch(epoch, self._stopped_after)
            self.state.epoch = epoch + 1
            last = self.state.epoch == self.cfg.epochs or self._stop_early()
            if last:  # the last checkpoint holds the final model
                self.learners_summary = self.strategy.finish(model, self.state)
            self._end_epoch(epoch, seconds, waited)
            self.save_resume_state((epoch + 1, 0))
            if last:
                break

    def _signal_name(self) -> str:
        return self.stop.name if self.stop is not None and self.stop.requested else "a signal"

    def _stop_requested(self, *, collective: bool = False) -> bool:
        """Whether a signal stops this run here: after a step, or with ``collective`` when
        an epoch's steps are done. The learners agree by summing their flags, a collective
        that each learner enters at the same points: lock-step learners after every step
        (so all stop after the same batch); the others at each epoch end, and mid-epoch
        only once their own flag is set. A learner that stops mid-epoch so meets the others
        in their next such sum (their own stop, or their epoch end), never in another
        collective."""
        if self.stop is None:
            return False
        if self.world_size == 1:
            return self.stop.requested
        if not (self.strategy.lockstep or collective or self.stop.requested):
            return False
        return self.reduce_sums({"stop": float(self.stop.requested)})["stop"] > 0

    def _stop_in_epoch(self, epoch: int, batch: int) -> None:
        """Save where the epoch stands (``batch`` steps done) and raise
        :class:`TrainingStopped`."""
        if batch < len(self.batches):
            where = f"at epoch {epoch + 1}, batch {batch} of {len(self.batches)}"
        else:
            where = f"after the steps of epoch {epoch + 1} of {self.cfg.epochs}"
        if self.strategy.lockstep:
            self.save_resume_state((epoch, batch))
        else:
            # Learners that average asynchronously stop at their own batches: the averaging
            # in flight is completed and applied (as at the end of training), and each saves
            # its own position under a tag they share, (epoch, 1): after the epoch's start
            # state, before its end.
            self.strategy.finish(self.model, self.state, stopped=True)
            self.save_resume_state((epoch, 1), position=(epoch, batch))
        self._wait_for_saves()
        text = f"stopped by {self._signal_name()} {where}; rerun the same command to continue"
        raise TrainingStopped(text, quiet=not self.is_main)

    def _step_cap_reached(self) -> bool:
        return 0 < self.cfg.max_steps <= self.state.step

    def _stop_early(self) -> bool:
        """``train.max_steps`` ended this epoch's training, for any learner (learners that
        do not step in lock-step reach it at different times; all must stop together)."""
        if not self.cfg.max_steps:
            return False
        return self.reduce_sums({"capped": float(self._step_cap_reached())})["capped"] > 0

    def reduce_sums(self, sums: dict[str, float]) -> dict[str, float]:
        """``sums`` added up over all learners (a collective: every learner calls it)."""
        if self.world_size == 1:
            return sums
        keys = sorted(sums)
        values = torch.tensor([sums[k] for k in keys], dtype=torch.float64)
        self.comm.all_reduce(values)
        return dict(zip(keys, values.tolist(), strict=True))

    def train_epoch(
        self, model: nn.Module, batches: Iterable[Batch], *, epoch: int, first: int = 0
    ) -> tuple[float, float]:
        """One pass of optimizer steps over ``batches`` (batch ``first`` onwards of the
        epoch); returns its wall time and the part of it spent waiting for batches, in
        seconds."""
        model.train()
        if self.fault is not None and not first:
            self.fault.epoch_start(epoch)
        bar = self._progress(epoch)
        if bar is not None and first:
            bar.update(first)
        clock = self.comm.runtime  # the machine's, or a simulator's virtual one
        began, frames, waited = clock.now(), 0, 0.0
        if not first:  # a resumed epoch's curve point averages this sitting's steps only
            self._epoch_loss = [0.0, 0]
        every = self.cfg.save_every if self.strategy.lockstep else 0
        stream = timed(iter(batches))
        for index, (batch, wait) in enumerate(stream, start=first + 1):
            waited += wait
            self.strategy.before_step(self.state)
            lr = self._set_lr()
            with self._autocast():
                loss = self.objective.loss(model, self._augment(batch).to(self.device, non_blocking=True))
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.strategy.after_backward(model, self.state)
            if self.cfg.clip_grad_norm > 0:
                # At the global batch's threshold for its share (Strategy.gradient_share).
                limit = self.cfg.clip_grad_norm / self.strategy.gradient_share**0.5
                nn.utils.clip_grad_norm_(self.model.parameters(), limit)
            self.optimizer.step()
            self.state.step += 1
            self.state.samples += len(batch.utts)
            self.state.batch_utts = batch.global_utts
            self.strategy.after_step(model, self.state)
            if self.fault is not None:
                self.fault.after_step(self.state.step)
            if self.threads is not None:
                self.threads.poll()
            if every and index % every == 0 and index < len(self.batches):
                self.save_resume_state((epoch, index))
            frames += batch.frames
            elapsed = clock.now() - began
            if self.state.first_step_time is None:
                self.state.first_step_time = clock.wall()
            elapsed = max(elapsed, 1e-9)
            value = loss.item()
            self._epoch_loss[0] += value
            self._epoch_loss[1] += 1
            self._last_lr = lr
            self._log_step(bar, value, lr, frames / elapsed, waited / elapsed)
            if self._step_cap_reached():
                break
            # Lock-step learners stop before the epoch's last batch (its end is the next
            # check); the others end epochs by global progress and may go past len().
            if (not self.strategy.lockstep or index < len(self.batches)) and self._stop_requested():
                self._stopped_after = index
                break
        stream.close()  # stops read-ahead threads when the loop ends early
        if bar is not None:
            bar.close()
        seconds = clock.now() - began
        self.state.data_wait_s += waited
        self.state.train_s += seconds
        return seconds, waited

    def _set_lr(self) -> float:
        lr = self.schedule(self.batches.schedule_position(self.state.step))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _autocast(self) -> contextlib.AbstractContextManager:
        """The training step's arithmetic (``train.precision``)."""
        if self.cfg.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _augment(self, batch: Batch) -> Batch:
        feats = spec_augment(batch.feats, batch.lengths, self.specaug, self.generator)
        batch = Batch(
            batch.utts,
            feats,
            batch.lengths,
            batch.targets,
            batch.target_lengths,
            batch.norm,
            batch.frame_targets,
            batch.global_utts,
        )
        if self.cfg.chunk_frames:
            batch = chunk_batch(
                batch,
                self.cfg.chunk_frames,
                context=self.cfg.chunk_context,
                subsample=int(getattr(self.model, "subsample", 1)),
            )
        return batch

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Dev-set metrics of the objective: loss, and greedy WER (%) where it decodes.

        Every learner scores its share of the dev batches (``rank::world``) with its own
        replica and the sums are added up, so no learner waits while another validates.
        """
        self.model.eval()
        pool = self.dev_batches.pool
        outside_fit = pool is not None and not pool.started  # fit() starts and stops it
        try:
            with contextlib.closing(self.dev_batches.epoch(0)) as batches:
                sums = self.objective.accumulate(
                    self.model,
                    (b.to(self.device) for b in batches),
                    tokenizer=self.tokenizer,
                    texts=self.dev_texts,
                )
        finally:
            if outside_fit:
                self.dev_batches.close()
        return self.objective.metrics(self.reduce_sums(sums))

    def _end_epoch(self, epoch: int, seconds: float, waited: float) -> None:
        metrics = {"epoch": epoch + 1, **self.validate(), "seconds": seconds, "data_wait_s": round(waited, 3)}
        total, steps = self._epoch_loss
        if steps:  # the main learner's own batches: its shard of the epoch (the curves' train line)
            metrics["train_loss"] = total / steps
            metrics["lr"] = self._last_lr
        self.last_dev = metrics  # every learner holds the reduced dev figures
        if not self.is_main:
            return
        self.state.history.append(metrics)
        key = self.cfg.best_metric if self.cfg.best_metric in metrics else "loss"
        improved = self.state.best is None or (metrics[key], metrics["loss"]) < (
            self.state.best[key],
            self.state.best["loss"],
        )
        if improved:
            self.state.best = metrics
        shown = ", ".join(
            f"dev {name} {metrics[k]:.3f}" if k == "loss" else f"dev {name} {metrics[k]:.2f}%"
            for k, name in _METRIC_NAMES.items()
            if k in metrics
        )
        log.info(
            "epoch %d: %s, %.0f s (data wait %.1f s, %.1f%%)%s",
            epoch + 1,
            shown,
            seconds,
            waited,
            100.0 * waited / max(seconds, 1e-9),
            " (best so far)" if improved else "",
        )
        writer = self._tensorboard()
        if writer is not None:
            for k in _METRIC_NAMES:
                if k in metrics:
                    writer.add_scalar(f"dev/{k}", metrics[k], self.state.step)
            writer.flush()
        self._save(epoch + 1, best=improved)

    def checkpoint_state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "meta": self.meta,
            "progress": {
                "epoch": self.state.epoch,
                "step": self.state.step,
                "samples": self.state.samples,
                "history": self.state.history,
                "best": self.state.best,
            },
        }

    def save_resume_state(self, tag: Tag, *, position: Tag | None = None) -> None:
        """This learner's full state at ``position`` = (epoch, next batch), which the
        learners know it by as ``tag`` (the same unless they stopped at different batches)."""
        if not self.resume_states:
            return
        self._wait_for_saves()
        where = tag if position is None else position
        self.store.save(
            {
                **self.checkpoint_state(),
                "position": {"epoch": where[0], "batch": where[1]},
                "tag": {"epoch": tag[0], "batch": tag[1]},
                "settings": self.resume_key,
                "world_size": self.world_size,
                "rng": rng_state(self.generator),
                "strategy": self.strategy.state_dict(),
            }
        )
        if not self.strategy.lockstep:
            self._saves_barrier = self.comm.barrier()

    def _wait_for_saves(self) -> None:
        """Before a learner saves a resume state, and at the end of training. Learners that
        are not in lock-step (ADPSGD, HYBRID) save their next state only once every learner
        has saved its previous one, so none is ever more than one save ahead and the two
        states each keeps always include one they all hold. The barrier is posted right
        after a save, so by the next save it has normally completed."""
        if self._saves_barrier is not None:
            self._saves_barrier.wait()
            self._saves_barrier = None

    def agree_on_resume(self, tags: list[Tag]) -> Tag | None:
        """The newest resume position every learner holds (a collective)."""
        gathered = self.comm.all_gather_object([list(t) for t in tags])
        return common_tag([[tuple(t) for t in mine] for mine in gathered])

    def restore(self) -> Tag:
        """Load the resume state ``resume`` asks for; returns where training goes on."""
        if self.resume == "false":
            return (0, 0)
        found = self.store.states()
        usable = {
            tag: s
            for tag, s in found.items()
            if s.get("settings") == self.resume_key and s.get("world_size") == self.world_size
        }
        tag = self.agree_on_resume(sorted(usable))
        if tag is None:
            where = self.store.directory
            if usable:
                why = "the learners hold no state in common"
            elif found:
                why = "its states were saved with other settings or another number of learners"
            else:
                why = "it holds no state of this learner"
            if self.resume == "true":
                raise ConfigError(
                    f"resume=true but {where} cannot be resumed from ({why}); "
                    "use resume=auto or resume=false to start over"
                )
            if found and self.is_main:
                log.warning("%s cannot be resumed from (%s); starting over", where, why)
            return (0, 0)
        state = usable[tag]
        position = (int(state["position"]["epoch"]), int(state["position"]["batch"]))
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"], self.generator)
        progress = state["progress"]
        self.state = TrainState(
            epoch=progress["epoch"],
            step=progress["step"],
            samples=progress["samples"],
            history=list(progress["history"]),
            best=progress["best"],
        )
        self.strategy.load_state_dict(state["strategy"])
        self.resumed = True
        if self.is_main:
            log.info(
                "resuming from %s: epoch %d, batch %d (step %d)",
                self.store.directory,
                position[0] + 1,
                position[1],
                self.state.step,
            )
        return position

    def _save(self, epoch: int, *, best: bool) -> None:
        ckpt_dir = self.exp_dir / "checkpoints"
        state = self.checkpoint_state()
        save_checkpoint(ckpt_dir / f"epoch{epoch}.pt", state)
        if best:
            save_checkpoint(ckpt_dir / "best.pt", state)
        stale = ckpt_dir / f"epoch{epoch - self.cfg.keep_checkpoints}.pt"
        stale.unlink(missing_ok=True)

    def _tensorboard(self):
        if not self.is_main:
            return None
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.exp_dir / "tensorboard"))
        return self._writer

    def _progress(self, epoch: int):
        if not (self.cfg.progress and self.is_main):
            return None
        from tqdm import tqdm

        # disable=None: no bar when stderr is not a terminal (a log file, a pipe), where
        # every refresh would be another line.
        return tqdm(
            total=len(self.batches),
            desc=f"epoch {epoch + 1}/{self.cfg.epochs}",
            unit="batch",
            leave=False,
            dynamic_ncols=True,
            disable=None,
        )

    def _log_step(self, bar, loss: float, lr: float, fps: float, wait: float) -> None:
        if not math.isfinite(loss):
            # The step has put the loss's NaN or infinity into the weights: every later
            # step would train on garbage. A CTC batch too short for its targets does not
            # come here (zero_infinity).
            raise TrainingDiverged(
                f"step {self.state.step}: the training loss is {loss}; training diverged at learning rate "
                f"{lr:.3g}: lower optim.lr (or, at a large global batch, lengthen the warm-up: "
                "schedule.warmup_epochs / warmup_steps), or clip gradients (train.clip_grad_norm)",
                step=self.state.step,
            )
        if bar is not None:
            bar.update(1)
            bar.set_postfix(
                loss=f"{loss:.2f}", fps=f"{fps:.0f}", lr=f"{lr:.2e}", wait=f"{100 * wait:.0f}%", refresh=False
            )
        if self.state.step % self.cfg.log_every == 0:
            writer = self._tensorboard()
            if writer is not None:
                writer.add_scalar("train/loss", loss, self.state.step)
                writer.add_scalar("train/lr", lr, self.state.step)
                writer.add_scalar("train/frames_per_s", fps, self.state.step)
                writer.add_scalar("train/data_wait_fraction", wait, self.state.step)
