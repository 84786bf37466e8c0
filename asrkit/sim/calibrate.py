"""Measure a :class:`~asrkit.sim.run.StepCost` on this machine: real training steps of one
learner at the simulated learners' batch size, timed, and a least-squares line through
(padded frames, seconds); validation passes give the cost of a forward pass without
gradients. A simulation reads time from the fitted line only, never from the machine's
clock, so it stays deterministic; the measurement is saved and reused (``step_cost.json``)
so that runs compared with each other share one cost.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from asrkit.comm import SoloCommunicator
from asrkit.config import AsrkitConfig
from asrkit.data.io import atomic_write
from asrkit.distributed.config import StrategyConfig
from asrkit.errors import ConfigError
from asrkit.learner import LearnerParts, build_trainer
from asrkit.sim.run import StepCost
from asrkit.training.stop import StopRequest
from asrkit.training.strategy import Strategy, TrainState

__all__ = ["learner_batch_caps", "load_or_measure", "measure_step_cost"]


def learner_batch_caps(cfg: AsrkitConfig) -> tuple[int, int]:
    """One learner's share of the global batch caps (``train.max_batch``, ``max_frames``)."""
    n = cfg.strategy.learners
    return max(1, cfg.train.max_batch // n), max(1, cfg.train.max_frames // n)


class _StepTimer(Strategy):
    """A single process's strategy that times each step (perf_counter) and, through model
    hooks, records the padded batch of each training step and times each forward pass
    without gradients."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[int, float]] = []
        self.evals: list[tuple[int, float]] = []
        self._shape = 0
        self._began = 0.0
        self._eval_began = 0.0

    def hook(self, model: nn.Module) -> None:
        model.register_forward_pre_hook(self._before_forward)
        model.register_forward_hook(self._after_forward)

    def _before_forward(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        self._shape = int(args[0].shape[0]) * int(args[0].shape[1])
        self._eval_began = time.perf_counter()

    def _after_forward(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if not module.training:
            self.evals.append((self._shape, time.perf_counter() - self._eval_began))

    def before_step(self, state: TrainState) -> None:
        self._began = time.perf_counter()

    def after_step(self, model: nn.Module, state: TrainState) -> None:
        self.steps.append((self._shape, time.perf_counter() - self._began))


def _fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """``(intercept, slope)`` of seconds against frames, both kept non-negative."""
    frames = np.array([p[0] for p in points], dtype=np.float64)
    seconds = np.array([p[1] for p in points], dtype=np.float64)
    if len(points) < 2 or np.ptp(frames) == 0:
        return 0.0, float(seconds.sum() / frames.sum())
    slope, intercept = np.polyfit(frames, seconds, 1)
    if intercept < 0 or slope <= 0:  # noise: a line through the origin instead
        return 0.0, float((frames * seconds).sum() / (frames * frames).sum())
    return float(intercept), float(slope)


def measure_step_cost(
    cfg: AsrkitConfig,
    parts: LearnerParts,
    *,
    steps: int = 16,
    warmup: int = 3,
    stop: StopRequest | None = None,
) -> StepCost:
    """Train one learner for ``warmup + steps`` steps at the simulated learners' batch
    caps (the first ``warmup`` are not counted; a training set of fewer batches is gone
    through again), validating at epoch ends; fit the line."""
    if steps < 2:
        raise ConfigError(f"measuring a step cost needs at least 2 steps, got {steps}")
    max_batch, max_frames = learner_batch_caps(cfg)
    train = dataclasses.replace(
        cfg.train,
        max_batch=max_batch,
        max_frames=max_frames,
        max_steps=warmup + steps,
        epochs=warmup + steps,  # a small training set is cycled until max_steps
        in_memory=True,
        prefetch=0,
        adapt_threads=False,
        progress=False,
        average_last=1,
    )
    alone = dataclasses.replace(cfg, train=train, strategy=StrategyConfig())
    timer = _StepTimer()
    model = parts.new_model()
    timer.hook(model)
    with tempfile.TemporaryDirectory(prefix="asrkit-step-cost-") as scratch:
        trainer = build_trainer(
            alone,
            parts,
            model,
            exp_dir=Path(scratch),
            comm=SoloCommunicator(),
            strategy=timer,
            resume_states=False,
            stop=stop,
        )
        trainer.fit()
    counted = timer.steps[warmup:]
    if len(counted) < 2:
        raise ConfigError(
            f"the training set gave {len(timer.steps)} step(s) at one learner's share of the batch "
            f"(max_batch {max_batch}, max_frames {max_frames}); a step cost needs {warmup + 2}"
        )
    step_s, frame_s = _fit_line(counted)
    train_mean = float(np.mean([step_s + frame_s * f for f, _ in timer.evals])) if timer.evals else 0.0
    eval_mean = float(np.mean([s for _, s in timer.evals])) if timer.evals else 0.0
    fraction = min(1.0, eval_mean / train_mean) if train_mean > 0 else 1.0 / 3.0
    return StepCost(step_s=step_s, frame_s=frame_s, eval_fraction=fraction)


def load_or_measure(
    path: Path, cfg: AsrkitConfig, parts: LearnerParts, *, stop: StopRequest | None = None
) -> tuple[StepCost, bool]:
    """The cost saved in ``path`` (a JSON of :class:`StepCost`'s fields), or a new
    measurement saved there; and whether it was measured now (``stop``: a signal ends the
    measurement after its step, :class:`~asrkit.errors.TrainingStopped`)."""
    if path.is_file():
        try:
            return StepCost(**json.loads(path.read_text())), False
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{path}: not a step cost ({err}); remove it to measure again") from None
    cost = measure_step_cost(cfg, parts, stop=stop)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(dataclasses.asdict(cost), indent=2) + "\n")
    return cost, True
