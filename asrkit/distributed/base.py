"""What every distributed strategy shares, written once: the initial broadcast, the end of
training (drain what is in flight -> metrics -> consensus), sharding, straggler simulation
and the per-learner metrics. Strategies talk only through a
:class:`~asrkit.distributed.comm.Communicator`."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from asrkit.data.io import atomic_write
from asrkit.distributed.comm import Communicator, Pending
from asrkit.distributed.config import AveragingConfig, StragglerConfig, StrategyConfig
from asrkit.distributed.flat import flatten
from asrkit.errors import DataError
from asrkit.loader.batch import Batch
from asrkit.loader.planning import BucketBatches
from asrkit.loader.sources import UtteranceSource
from asrkit.training.config import TrainConfig
from asrkit.training.resume import Tag, common_tag
from asrkit.training.trainer import TrainHooks, TrainState, loader_settings

if TYPE_CHECKING:
    from asrkit.distributed.averager import PairwiseAverager


class Straggler:
    """Slows some steps down, as a slower or busier machine would.

    ``one``: learner ``rank`` (-1 = the last) takes ``factor`` x as long for every step;
    ``random``: each step one learner, drawn from an RNG seeded by ``(seed, step)`` (the
    same on every learner), is ``factor`` x slower; ``delay``: every step of every learner
    waits a random ``[0, max_delay_ms]`` ms.
    """

    def __init__(self, cfg: StragglerConfig, *, rank: int, world_size: int) -> None:
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        self.slow_rank = cfg.rank if cfg.rank >= 0 else world_size - 1
        self._began = 0.0
        self.delayed_s = 0.0

    def start_step(self) -> None:
        self._began = time.monotonic()

    def end_step(self, step: int) -> None:
        cfg = self.cfg
        if cfg.mode == "none" or self.world_size == 1:
            return
        took = time.monotonic() - self._began
        rng = random.Random(cfg.seed * 1_000_003 + step)
        pause = 0.0
        if cfg.mode == "one" and self.rank == self.slow_rank:
            pause = (cfg.factor - 1.0) * took
        elif cfg.mode == "random" and rng.randrange(self.world_size) == self.rank:
            pause = (cfg.factor - 1.0) * took
        elif cfg.mode == "delay":
            pause = random.Random((cfg.seed * 1_000_003 + step) * 4099 + self.rank).uniform(
                0.0, cfg.max_delay_ms / 1000.0
            )
        if pause > 0:
            time.sleep(pause)
            self.delayed_s += pause


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


class ProgressBatches(BucketBatches):
    """A learner's own shard, cycled; global epoch ``e`` ends once all learners together
    have processed ``(e + 1) x`` the training set (so a fast learner takes more steps)."""

    def __init__(
        self, source: UtteranceSource, *, total: int, progress: Callable[[], float], **kwargs
    ) -> None:
        super().__init__(source, **kwargs)
        self.total, self.progress = total, progress
        self.last_bucket = 0  # utterances in the latest batch across its learners (HYBRID's group)

    def plan(self, epoch: int, *, start: int = 0) -> Iterator[np.ndarray]:
        # Endless: the consumer stops once the global progress says the epoch is over.
        # ``start``: batches of this epoch already taken (a learner resumed after a stop).
        rng = random.Random(self.seed * 100_003 + epoch)

        def endless() -> Iterator[np.ndarray]:
            while True:
                order = list(range(len(self.buckets)))
                if self.shuffle:
                    rng.shuffle(order)
                for b in order:
                    yield self.buckets[b]

        return itertools.islice(endless(), start, None)

    def epoch(self, epoch: int, *, start: int = 0) -> Generator[Batch, None, None]:
        goal = (epoch + 1) * self.total
        if self.progress() >= goal:
            return
        with contextlib.closing(super().epoch(epoch, start=start)) as batches:  # stops its read-ahead
            for batch in batches:
                if self.progress() >= goal:
                    return
                self.last_bucket = batch.global_utts
                yield batch


class StrategyHooks(TrainHooks):
    """Base of the distributed strategies.

    What a strategy adds, it adds at these points: ``attach`` (after the replicas have
    started from the main learner's weights: wrap the model, start threads), the step
    hooks, ``drain`` (complete the averaging still in flight when training stops) and
    ``make_batches`` (default: the lock-step sharding of SYNC and delay-by-one). The
    rest — the initial broadcast (skipped when resumed), the metrics and the final
    consensus of weight-averaging strategies, progress, waits and resume agreement — is
    here. Subclasses call ``super()`` in ``before_step``/``after_step``.
    """

    #: Communication hides inside the backward pass (DDP): its waiting time is not
    #: separated and ``comm_wait_s`` is null in the metrics.
    overlapped_comm = False

    def __init__(self, cfg: StrategyConfig, comm: Communicator, *, seed: int) -> None:
        self.cfg, self.comm, self.seed = cfg, comm, seed
        self.rank, self.world_size = comm.rank, comm.size
        self.straggler = Straggler(cfg.straggler, rank=self.rank, world_size=self.world_size)
        # Metrics, consensus and resume agreement; every rank makes every group in the
        # same order (torch requires it).
        world = comm.new_group(backend="gloo")
        assert world is not None  # every learner is a member
        self.world = world
        self.params: list[nn.Parameter] = []
        #: ADPSGD's averaging thread (ADPSGD, HYBRID's leaders).
        self.averager: PairwiseAverager | None = None
        self.wait_s = 0.0  # communication waits outside the averager
        self.rounds = 0  # averagings outside the averager
        self._began = time.monotonic()
        # Steady-state window: from the end of this learner's first step (after start-up and
        # warm-up) to the end of its last; wall-clock time, comparable across learners.
        self._first_step_end: float | None = None
        self._first_step_samples = 0
        self._last_step_end = 0.0
        self.final_metrics: dict[str, Any] = {}
        self._saves_barrier: Pending | None = None

    # -- the strategy's own points -----------------------------------------------------

    def attach(self, model: nn.Module) -> nn.Module:
        """The replicas hold their starting weights: return the module the loop calls."""
        return model

    def drain(self, model: nn.Module) -> None:
        """Training has stopped: complete and apply the averaging still in flight."""

    # -- shared behaviour --------------------------------------------------------------

    def wrap_model(self, model: nn.Module) -> nn.Module:
        self.params = list(model.parameters())
        if not self.resumed:  # a resumed learner keeps its own restored replica
            broadcast_params(self.params, self.world)
        return self.attach(model)

    def finish(self, model: nn.Module, state: TrainState) -> None:
        self.drain(model)
        mine = self.learner_metrics(state)
        mine["consensus_distance"] = round(self.consensus_distance(model), 6)
        gathered = self.world.all_gather_object(mine)
        total_s = max(m["seconds"] for m in gathered)
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

    def comm_wait_s(self) -> float | None:
        """Seconds spent waiting on communication (None where it cannot be separated)."""
        if self.overlapped_comm:
            return None
        return self.wait_s + (self.averager.wait_s if self.averager is not None else 0.0)

    def averagings(self) -> int:
        return self.rounds + (self.averager.rounds if self.averager is not None else 0)

    def paused(self, seconds: float) -> None:
        if self.averager is not None:
            self.averager.paused(seconds)

    def make_batches(self, source: UtteranceSource, cfg: TrainConfig, *, seed: int) -> BucketBatches:
        # Lock-step strategies (SYNC, delay-by-one): every learner plans the same global
        # batches and reads its share ``rank::world`` of each.
        check_enough(source, self.world_size)
        return BucketBatches(source, seed=seed, rank=self.rank, world=self.world_size, **loader_settings(cfg))

    def own_shard(
        self,
        source: UtteranceSource,
        cfg: TrainConfig,
        *,
        seed: int,
        shards: int,
        shard: int,
        progress: Callable[[], float],
        rank: int = 0,
        world: int = 1,
    ) -> ProgressBatches:
        """Batches of shard ``shard`` of ``shards`` (every ``shards``-th utterance), cycled
        until the global ``progress`` ends the epoch (ADPSGD, HYBRID: learners that do not
        step in lock-step); ``rank``/``world`` split each batch among a group's learners."""
        check_enough(source, shards)
        # Batches are 1/shards of the global batch, so optim.lr keeps SYNC's meaning.
        return ProgressBatches(
            source,
            total=len(source),
            progress=progress,
            indices=range(shard, len(source), shards),
            seed=seed + shard,
            rank=rank,
            world=world,
            **loader_settings(cfg, parts=shards),
        )

    def wait_for_saves(self) -> None:
        # Learners that do not step in lock-step (ADPSGD, HYBRID) save their next state only
        # once every learner has saved its previous one, so none is ever more than one save
        # ahead and the two states each keeps always include one they all hold. The barrier
        # is posted right after a save, so by the next save it has normally completed.
        if self._saves_barrier is not None:
            began = time.monotonic()
            self._saves_barrier.wait()
            self._saves_barrier = None
            self.paused(time.monotonic() - began)

    def after_resume_save(self) -> None:
        if not self.lockstep:
            self._saves_barrier = self.world.barrier()

    def agree_on_resume(self, tags: list[Tag]) -> Tag | None:
        gathered = self.world.all_gather_object([list(t) for t in tags])
        return common_tag([[tuple(t) for t in mine] for mine in gathered])

    def reduce_sums(self, sums: dict[str, float]) -> dict[str, float]:
        keys = sorted(sums)
        values = torch.tensor([sums[k] for k in keys], dtype=torch.float64)
        self.world.all_reduce(values)
        return dict(zip(keys, values.tolist(), strict=True))

    def before_step(self, state: TrainState) -> None:
        self.straggler.start_step()

    def after_step(self, model: nn.Module, state: TrainState) -> None:
        self.straggler.end_step(state.step)
        self._last_step_end = time.time()
        if self._first_step_end is None:
            self._first_step_end, self._first_step_samples = self._last_step_end, state.samples

    def learner_metrics(self, state: TrainState) -> dict[str, Any]:
        wall = time.monotonic() - self._began
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

    def write_metrics(self, exp_dir: Path) -> None:
        """``learners.json`` and per-learner TensorBoard scalars (``learner<r>/...``)."""
        if not (self.is_main and self.final_metrics):
            return
        atomic_write(Path(exp_dir) / "learners.json", json.dumps(self.final_metrics, indent=2) + "\n")
        from torch.utils.tensorboard import SummaryWriter

        with SummaryWriter(str(Path(exp_dir) / "tensorboard")) as writer:
            for m in self.final_metrics["learners_detail"]:
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
            writer.add_scalar(
                "strategy/aggregate_samples_per_s", self.final_metrics["aggregate_samples_per_s"], 0
            )


def check_enough(source: UtteranceSource, parts: int) -> None:
    """Every learner (or group) needs at least one utterance of its own."""
    if len(source) < parts:
        raise DataError(
            f"{len(source)} training utterances cannot be shared among {parts} learners "
            "or groups; use fewer learners or more data"
        )


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
