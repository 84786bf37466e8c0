"""What every distributed strategy shares, written once: the initial broadcast, the end of
training (complete what is in flight -> metrics -> consensus), straggler simulation and
the per-learner metrics. Strategies talk only through the
:class:`~asrkit.comm.Communicator` groups of
:func:`~asrkit.distributed.groups.make_groups`."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from asrkit.comm import REAL, Communicator, Runtime
from asrkit.data.io import atomic_write
from asrkit.distributed.config import AveragingConfig, StragglerConfig, StrategyConfig
from asrkit.distributed.flat import flatten
from asrkit.distributed.groups import Groups
from asrkit.loader.planning import Sharding
from asrkit.training.strategy import Strategy, TrainState

if TYPE_CHECKING:
    from asrkit.distributed.averager import PairwiseAverager


class Straggler:
    """Slows some steps down, as a slower or busier machine would.

    ``one``: learner ``rank`` (-1 = the last) takes ``factor`` x as long for every step;
    ``random``: each step one learner, drawn from an RNG seeded by ``(seed, step)`` (the
    same on every learner), is ``factor`` x slower; ``delay``: every step of every learner
    waits a random ``[0, max_delay_ms]`` ms; ``exponential``: every step of every learner
    waits an exponentially distributed extra with mean ``(factor - 1)`` x its own time, so
    a step's time is its own shifted by an exponential (the straggler model of coded- and
    asynchronous-SGD analyses), ``factor`` x its own on average, with a long tail.

    ``random`` and ``exponential`` scale a learner's own work in the step (the runtime's
    :meth:`~asrkit.comm.Runtime.work`), not the step's elapsed time: in a
    lock-step strategy the elapsed time includes waiting for the learners the last step
    slowed, and scaling that fed the delays back into themselves, growing without bound
    (a 64-learner SYNC run's 35th step took 10^20 virtual seconds). ``one``'s slow learner
    is the one the others wait for, so its elapsed time is its own.
    """

    def __init__(self, cfg: StragglerConfig, *, rank: int, world_size: int, runtime: Runtime = REAL) -> None:
        self.cfg, self.rank, self.world_size, self.runtime = cfg, rank, world_size, runtime
        self.slow_rank = cfg.rank if cfg.rank >= 0 else world_size - 1
        self._began = self._work_began = 0.0
        self.delayed_s = 0.0

    def start_step(self) -> None:
        self._began = self.runtime.now()
        self._work_began = self.runtime.work()

    def end_step(self, step: int) -> None:
        cfg = self.cfg
        if cfg.mode == "none" or self.world_size == 1:
            return
        took = self.runtime.now() - self._began
        own = self.runtime.work() - self._work_began
        rng = random.Random(cfg.seed * 1_000_003 + step)
        pause = 0.0
        if cfg.mode == "one" and self.rank == self.slow_rank:
            pause = (cfg.factor - 1.0) * took
        elif cfg.mode == "random" and rng.randrange(self.world_size) == self.rank:
            pause = (cfg.factor - 1.0) * own
        elif cfg.mode == "delay":
            pause = self._own_rng(step).uniform(0.0, cfg.max_delay_ms / 1000.0)
        elif cfg.mode == "exponential" and cfg.factor > 1.0:
            pause = self._own_rng(step).expovariate(1.0 / ((cfg.factor - 1.0) * own)) if own > 0 else 0.0
        if pause > 0:
            self.runtime.sleep(pause)
            self.delayed_s += pause

    def _own_rng(self, step: int) -> random.Random:
        """This learner's draws for ``step`` (seeded by seed, step and rank)."""
        return random.Random((self.cfg.seed * 1_000_003 + step) * 4099 + self.rank)


def steady_rate(learners: list[dict[str, Any]]) -> float | None:
    """Aggregate samples/s between the first learner's first step and the last learner's
    last step, counting the samples after each learner's first step (start-up and the
    first step's warm-up excluded). None when no learner took two steps."""
    started = [m for m in learners if m["window"][0] is not None]
    if not started:
        return None
    span = max(m["window"][1] for m in started) - min(m["window"][0] for m in started)
    samples = sum(m["window_samples"] for m in started)
    return round(samples / span, 3) if span > 0 and samples > 0 else None


class DistributedStrategy(Strategy):
    """Base of the distributed strategies.

    What a strategy adds, it adds at these points: ``attach`` (after the replicas have
    started from the main learner's weights: wrap the model, start threads), the step
    points, ``drain`` (complete the averaging still in flight when training ends or
    stops) and its ``sharding`` (default: lock-step, as SYNC and delay-by-one). The rest
    — the initial broadcast (skipped when resumed), the metrics and the final consensus
    of weight-averaging strategies — is here. Subclasses call ``super()`` in
    ``before_step``/``after_step``.
    """

    #: Communication hides inside the backward pass (DDP): its waiting time is not
    #: separated and ``comm_wait_s`` is null in the metrics.
    overlapped_comm = False

    def __init__(self, cfg: StrategyConfig, groups: Groups, *, seed: int) -> None:
        super().__init__()
        self.cfg, self.groups, self.seed = cfg, groups, seed
        self.world = groups.world  # starting broadcast, metrics, consensus
        self.runtime = self.world.runtime
        self.rank, self.world_size = self.world.rank, self.world.size
        self.is_main = self.rank == 0
        self.sharding = Sharding(rank=self.rank, world=self.world_size)
        self.straggler = Straggler(
            cfg.straggler, rank=self.rank, world_size=self.world_size, runtime=self.runtime
        )
        self.params: list[nn.Parameter] = []
        #: ADPSGD's averaging thread (ADPSGD, HYBRID's leaders).
        self.averager: PairwiseAverager | None = None
        self.wait_s = 0.0  # communication waits outside the averager
        self.rounds = 0  # averagings outside the averager
        self._began = self.runtime.now()
        # Steady-state window: from the end of this learner's first step (after start-up and
        # warm-up) to the end of its last; wall-clock time, comparable across learners.
        self._first_step_end: float | None = None
        self._first_step_samples = 0
        self._last_step_end = 0.0
        self.final_metrics: dict[str, Any] = {}

    # -- the strategy's own points -----------------------------------------------------

    def attach(self, model: nn.Module) -> nn.Module:
        """The replicas hold their starting weights: return the module the loop calls."""
        return model

    def drain(self, model: nn.Module) -> None:
        """Training has ended or stopped: complete and apply the averaging in flight."""

    # -- shared behaviour --------------------------------------------------------------

    def wrap(self, model: nn.Module, *, resumed: bool) -> nn.Module:
        self.params = list(model.parameters())
        if not resumed:  # a resumed learner keeps its own restored replica
            broadcast_params(self.params, self.world)
        return self.attach(model)

    def finish(self, model: nn.Module, state: TrainState, *, stopped: bool = False) -> dict[str, Any] | None:
        self.drain(model)
        if stopped:
            return None
        mine = self.learner_metrics(state)
        mine["consensus_distance"] = round(self.consensus_distance(model), 6)
        gathered = self.world.all_gather_object(mine)
        total_s = max(max(m["seconds"] for m in gathered), 1e-9)  # a run of no measurable time
        self.final_metrics = {
            "strategy": self.cfg.name,
            "learners": self.world_size,
            "aggregate_samples_per_s": round(sum(m["samples"] for m in gathered) / total_s, 3),
            "steady_samples_per_s": steady_rate(gathered),
            "mean_consensus_distance": sum(m["consensus_distance"] for m in gathered) / self.world_size,
            "learners_detail": gathered,
        }
        # Replicas of weight-averaging strategies differ until now: average them into one.
        if isinstance(self.cfg, AveragingConfig) and self.cfg.final_consensus:
            consensus_average(self.params, self.world)
        return self.final_metrics

    def comm_wait_s(self) -> float | None:
        """Seconds spent waiting on communication (None where it cannot be separated)."""
        if self.overlapped_comm:
            return None
        return self.wait_s + (self.averager.wait_s if self.averager is not None else 0.0)

    def averagings(self) -> int:
        return self.rounds + (self.averager.rounds if self.averager is not None else 0)

    def before_step(self, state: TrainState) -> None:
        self.straggler.start_step()

    def after_step(self, model: nn.Module, state: TrainState) -> None:
        self.straggler.end_step(state.step)
        self._last_step_end = self.runtime.wall()
        if self._first_step_end is None:
            self._first_step_end, self._first_step_samples = self._last_step_end, state.samples

    def learner_metrics(self, state: TrainState) -> dict[str, Any]:
        wall = self.runtime.now() - self._began
        return {
            "rank": self.rank,
            "steps": state.step,
            "samples": state.samples,
            "seconds": round(wall, 3),
            "samples_per_s": round(state.samples / max(wall, 1e-9), 3),
            "window": [self._first_step_end, self._last_step_end],
            "window_samples": state.samples - self._first_step_samples,
            "comm_wait_s": None if (comm := self.comm_wait_s()) is None else round(comm, 3),
            "data_wait_s": round(state.data_wait_s, 3),
            "data_wait_fraction": round(state.data_wait_fraction, 4),
            "averagings": self.averagings(),
            "straggler_delay_s": round(self.straggler.delayed_s, 3),
        }

    @torch.no_grad()
    def consensus_distance(self, model: nn.Module) -> float:
        """This learner's ``||x_i - mean||`` (a collective: every learner calls it)."""
        flat = flatten(list(model.parameters()))
        mean = flat.clone()
        self.world.all_reduce(mean)
        mean /= self.world_size
        return float((flat - mean).norm())


def write_learner_metrics(exp_dir: Path, summary: dict[str, Any] | None) -> None:
    """``learners.json`` and per-learner TensorBoard scalars (``learner<r>/...``) from
    what a strategy's ``finish`` returned (nothing for a single process)."""
    if not summary:
        return
    atomic_write(Path(exp_dir) / "learners.json", json.dumps(summary, indent=2) + "\n")
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(Path(exp_dir) / "tensorboard")) as writer:
        for m in summary["learners_detail"]:
            for key in (
                "samples_per_s",
                "steps",
                "comm_wait_s",
                "data_wait_s",
                "averagings",
                "consensus_distance",
                "straggler_delay_s",
            ):
                if m[key] is not None:
                    writer.add_scalar(f"learner{m['rank']}/{key}", m[key], m["steps"])
        writer.add_scalar("strategy/aggregate_samples_per_s", summary["aggregate_samples_per_s"], 0)


@torch.no_grad()
def consensus_average(params: list[nn.Parameter], comm: Communicator) -> None:
    """Replace every replica by the mean of the group's replicas (one all-reduce)."""
    flat = flatten(params)
    comm.all_reduce(flat)
    flat /= comm.size
    offset = 0
    for p in params:
        n = p.numel()
        p.copy_(flat[offset : offset + n].view_as(p))
        offset += n


@torch.no_grad()
def broadcast_params(params: list[nn.Parameter], comm: Communicator) -> None:
    """Make every replica of the group start from its first member's weights."""
    for p in params:
        comm.broadcast(p.data, src=comm.members[0])
