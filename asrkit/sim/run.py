"""Train N simulated learners of the real model on the real data, in one process, on a
virtual clock (:mod:`asrkit.sim.clock`).

Each learner is the :class:`~asrkit.training.trainer.Trainer` torchrun's learners run,
built the same way (:mod:`asrkit.learner`), with the real strategy class joined through
a :class:`~asrkit.sim.comm.SimCommunicator`. What differs is time: a learner's forward
pass spends the virtual compute time a :class:`StepCost` gives for its batch (a step's
time is linear in its padded frames, fitted to steps measured on this machine), and
communication spends what the :class:`~asrkit.sim.network.Network` gives for its bytes.
The strategy's straggler model (``strategy.straggler``) sleeps in virtual time, so a
slow learner slows exactly whom it would on a cluster. The learners compute one after
another, in virtual-time order, so a run is bitwise repeatable: the same settings and
cost give the same weights, whatever else the machine is doing.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from asrkit.config import AsrkitConfig
from asrkit.data.io import atomic_write
from asrkit.distributed.base import write_learner_metrics
from asrkit.distributed.strategies import join
from asrkit.errors import TrainingStopped
from asrkit.learner import LearnerParts, build_trainer, prepare_learner, write_final_model
from asrkit.progress import cpu_seconds
from asrkit.sim.clock import Clock, Event, SimAborted
from asrkit.sim.comm import SimWorld
from asrkit.sim.network import Network
from asrkit.training.allocator import SIM_MMAP_FLOOR, SIM_MMAP_THRESHOLD, map_large_blocks
from asrkit.training.stop import StopRequest
from asrkit.training.strategy import TrainState

__all__ = ["StepCost", "SimResult", "settings_digest", "simulate"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepCost:
    """Virtual compute time of one learner's passes: ``step_s + frame_s * B * T`` for a
    training step on a padded ``B x T`` batch (forward, backward and update), and
    ``eval_fraction`` of that for a forward pass without gradients (validation)."""

    step_s: float
    frame_s: float
    eval_fraction: float = 1.0 / 3.0

    def __post_init__(self) -> None:
        if self.step_s < 0 or self.frame_s < 0 or not 0 <= self.eval_fraction <= 1:
            raise ValueError(f"a step cost needs step_s, frame_s >= 0 and eval_fraction in [0, 1]: {self}")

    def seconds(self, batch: int, length: int, *, training: bool) -> float:
        full = self.step_s + self.frame_s * batch * length
        return full if training else self.eval_fraction * full


def settings_digest(settings: dict[str, Any]) -> str:
    """A short hash of a run's settings (plain data)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _ComputeTime:
    """A forward pre-hook that spends the pass's compute time on the clock."""

    def __init__(self, clock: Clock, cost: StepCost) -> None:
        self.clock, self.cost = clock, cost

    def __call__(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        feats = args[0]
        training = module.training and torch.is_grad_enabled()
        self.clock.advance(self.cost.seconds(int(feats.shape[0]), int(feats.shape[1]), training=training))


@dataclass
class SimResult:
    """What a simulated run ended with (the main learner's view; ``learners`` is the
    strategy's per-learner summary, virtual seconds throughout)."""

    state: TrainState
    learners: dict[str, Any] | None
    virtual_s: float
    real_s: float
    #: Real seconds from the first learner's start of training to the last one's end
    #: (``real_s`` less building the learners and writing the model).
    fit_real_s: float = 0.0


def simulate(
    cfg: AsrkitConfig,
    *,
    data_root: Path,
    exp_dir: Path,
    network: Network,
    cost: StepCost,
    parts: LearnerParts | None = None,
    stop: StopRequest | None = None,
    settings: dict[str, Any] | None = None,
) -> SimResult:
    """Train ``cfg.strategy.learners`` simulated learners; the main one writes ``model.pt``,
    ``train_summary.json`` (epoch times are virtual seconds), ``learners.json`` and
    ``sim.json`` in ``exp_dir``. ``parts``: the data and settings, when the caller has
    them already (several runs over one data set read it once; they must come from
    :func:`~asrkit.learner.prepare_learner` with ``train.in_memory``). ``stop``: a signal
    it records cancels the run once each learner's current computation ends, and
    :class:`~asrkit.errors.TrainingStopped` is raised (a simulation is not resumed
    half-way: the same command runs it again). ``settings``: saved in ``sim.json`` (what
    a rerun compares, :func:`asrkit.sim.experiment.run_settings`)."""
    learners = cfg.strategy.learners
    train = dataclasses.replace(cfg.train, in_memory=True, prefetch=0, adapt_threads=False)
    cfg = dataclasses.replace(cfg, train=train)
    exp_dir.mkdir(parents=True, exist_ok=True)
    if parts is None:
        parts = prepare_learner(cfg, data_root=data_root, exp_dir=exp_dir, log_it=True)
    # Many replicas' weight vectors, freed and allocated every step, would fragment the heap.
    weights = sum(p.numel() * p.element_size() for p in parts.new_model().parameters())
    map_large_blocks(max(SIM_MMAP_FLOOR, min(SIM_MMAP_THRESHOLD, weights)))
    clock = Clock()
    world = SimWorld(clock, learners, network)
    charge = _ComputeTime(clock, cost)
    fits: list[float] = []  # real times training started and ended, all learners
    # Training starts once every learner is built, so the real time of training
    # (``fit_real_s``) leaves out building the learners, which runs once per run.
    built, building = Event(clock, "every learner to be built"), [learners]

    def learner(rank: int) -> tuple[TrainState, dict[str, Any] | None, float]:
        torch.manual_seed(cfg.seed + rank)  # as each torchrun learner seeds itself
        model = parts.new_model(log_it=rank == 0)
        if rank == 0:
            parts.log_summary(model, learners=learners)
        model.register_forward_pre_hook(charge)
        strategy, comm = join(cfg.strategy, world.communicator(rank), seed=cfg.seed)
        trainer = build_trainer(
            cfg, parts, model, exp_dir=exp_dir, comm=comm, strategy=strategy, resume_states=False
        )
        building[0] -= 1
        if not building[0]:
            built.set()
        built.wait()
        fits.append(time.monotonic())
        state = trainer.fit()
        fits.append(time.monotonic())
        return state, trainer.learners_summary, clock.now()

    for rank in range(learners):
        clock.spawn(functools.partial(learner, rank), name=f"learner-{rank}")
    began, began_cpu = time.monotonic(), cpu_seconds()

    def stopped() -> BaseException | None:
        if stop is None or not stop.requested:
            return None
        return SimAborted(f"stopped by {stop.name}")

    try:
        results = clock.run(stop=stopped)
    except SimAborted:
        if stop is None or not stop.requested:
            raise
        raise TrainingStopped(
            f"stopped by {stop.name} during the simulation (a simulation is not resumed half-way); "
            "rerun the same command to simulate it again from the start"
        ) from None
    real_s = time.monotonic() - began
    # Processor time, unlike real_s, leaves out time the process was paused or waited
    # for a busy core: the figure for what a run costs the machine.
    cpu_s = cpu_seconds() - began_cpu
    state, summary, _ = results[0]
    result = SimResult(state, summary, max(r[2] for r in results), real_s, max(fits) - min(fits))
    write_learner_metrics(exp_dir, summary)
    write_final_model(cfg, state, exp_dir, learners=learners)
    record = {
        "learners": learners,
        "strategy": cfg.strategy.name,
        "network": dataclasses.asdict(network),
        "step_cost": dataclasses.asdict(cost),
        "virtual_s": result.virtual_s,
        "real_s": round(real_s, 3),
        "fit_real_s": round(result.fit_real_s, 3),
        "cpu_s": round(cpu_s, 3),
        "bytes_sent": world.bytes_sent,
        **(
            {"settings_hash": settings_digest(settings), "settings": settings} if settings is not None else {}
        ),
    }
    atomic_write(exp_dir / "sim.json", json.dumps(record, indent=2) + "\n")
    log.info(
        "simulated %d %s learners: %.1f virtual s in %.1f real s",
        learners,
        cfg.strategy.name,
        result.virtual_s,
        real_s,
    )
    return result
