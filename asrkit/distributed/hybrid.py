"""HYBRID (hierarchical ADPSGD, "super learners").

Learners form groups of ``group_size`` consecutive ranks. Inside a group gradients
are all-reduced every step (DDP on the group's process group), so group members stay
identical. One leader per group (its first rank) runs ADPSGD's communication thread
against the other groups' leaders on a gloo group of leaders, and hands each step's
averaging delta to its group by a broadcast, together with the global progress, so
that members apply the same delta and end their epochs on the same step.

``group_size == learners`` is SYNC (one group, nothing to average); ``group_size == 1``
is ADPSGD (every learner its own group).
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from asrkit.data.stream import BucketBatches, UtteranceSource
from asrkit.distributed.adpsgd import PairwiseAverager, ProgressBatches
from asrkit.distributed.base import (
    StrategyHooks,
    add_flat_,
    broadcast_params,
    check_enough,
    consensus_average,
)
from asrkit.distributed.config import StrategyConfig
from asrkit.distributed.launch import DistContext
from asrkit.training.config import TrainConfig
from asrkit.training.trainer import TrainState, loader_settings


class HybridHooks(StrategyHooks):
    """In-group DDP + ADPSGD among group leaders (resumes from epoch ends, as ADPSGD)."""

    lockstep = False

    def __init__(self, cfg: StrategyConfig, ctx: DistContext, *, seed: int) -> None:
        super().__init__(cfg, ctx, seed=seed)
        size = cfg.group_size
        self.groups = self.world_size // size
        self.group_index, self.index_in_group = divmod(self.rank, size)
        self.leader = self.group_index * size
        self.is_leader = self.rank == self.leader
        timeout = datetime.timedelta(seconds=cfg.timeout_s)
        # Every rank must create every group, in the same order.
        self.intra = None
        for g in range(self.groups):
            group = dist.new_group(list(range(g * size, (g + 1) * size)), timeout=timeout)
            if g == self.group_index:
                self.intra = group
        self.leaders = dist.new_group([g * size for g in range(self.groups)], backend="gloo",
                                      timeout=timeout)
        self.averager: PairwiseAverager | None = None
        self.params: list[nn.Parameter] = []
        self.progress = 0.0
        self.total = 0
        self._group_samples = 0
        self.batches: ProgressBatches | None = None
        self._restored_leader_samples: int | None = None

    def make_batches(self, source: UtteranceSource, cfg: TrainConfig, *,
                     seed: int) -> BucketBatches:
        # The group's shard, batched like SYNC inside the group (1/groups of the global batch).
        check_enough(source, self.groups)
        self.total = len(source)
        self.batches = ProgressBatches(source, total=len(source), progress=lambda: self.progress,
                                       indices=range(self.group_index, len(source), self.groups),
                                       seed=seed + self.group_index, rank=self.index_in_group,
                                       world=self.cfg.group_size,
                                       **loader_settings(cfg, parts=self.groups))
        return self.batches

    def progress_step(self, state: TrainState, steps_per_epoch: int) -> float:
        return self.progress / max(1, self.total) * steps_per_epoch

    def comm_wait_s(self) -> float | None:
        return self.averager.wait_s if self.averager is not None else None

    def averagings(self) -> int:
        return self.averager.rounds if self.averager is not None else 0

    def state_dict(self) -> dict:
        return {"progress": self.progress, "group_samples": self._group_samples,
                "leader_samples": self.averager.local_samples if self.averager else 0}

    def paused(self, seconds: float) -> None:
        if self.averager is not None:
            self.averager.paused(seconds)

    def load_state_dict(self, state: dict) -> None:
        self.progress, self._group_samples = float(state["progress"]), int(state["group_samples"])
        self._restored_leader_samples = int(state["leader_samples"])

    def wrap_model(self, model: nn.Module) -> nn.Module:
        self.params = list(model.parameters())
        if not self.resumed:
            broadcast_params(self.params, self.world_group)
        if self.is_leader and self.groups > 1:
            self.averager = PairwiseAverager(
                self.params, members=[g * self.cfg.group_size for g in range(self.groups)],
                rank=self.rank, group=self.leaders, pattern=self.cfg.pattern, seed=self.seed,
                period=self.cfg.averaging_period, check_every=self.cfg.check_every)
            if self._restored_leader_samples is not None:
                self.averager.restore(self._restored_leader_samples)
            self.averager.start()
        if self.cfg.group_size == 1:
            return model
        device_ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids, process_group=self.intra,
                                       broadcast_buffers=False)

    def _share_with_group(self, delta: torch.Tensor, progress: float) -> None:
        """Leader -> group: the averaging delta and the global progress; all apply the delta."""
        message = torch.cat([delta, torch.tensor([progress], dtype=delta.dtype)])
        if self.cfg.group_size > 1:
            # The group's backend may be NCCL, which only moves device tensors.
            on_device = message.to(self.ctx.device)
            dist.broadcast(on_device, src=self.leader, group=self.intra)
            message = on_device.cpu()
        add_flat_(self.params, message[:-1])
        self.progress = float(message[-1])

    def after_step(self, model: nn.Module, state: TrainState) -> None:
        super().after_step(model, state)
        assert self.batches is not None  # made before the first step
        group_samples = self.batches.last_bucket  # the whole group's batch, not this slice
        self._group_samples += group_samples
        if self.averager is not None:
            delta, progress = self.averager.take_pending(), self.averager.progress_samples()
        else:  # a single group: every learner took the same step, progress is exact
            delta = torch.zeros(sum(p.numel() for p in self.params))
            progress = float(self._group_samples)
        self._share_with_group(delta, progress)
        if self.averager is not None:
            self.averager.publish_snapshot(group_samples)

    def finish(self, model: nn.Module, state: TrainState) -> None:
        delta = torch.zeros(sum(p.numel() for p in self.params))
        if self.averager is not None:
            self.averager.finish(self.cfg.timeout_s)
            delta = self.averager.take_pending()
        self._share_with_group(delta, self.progress)
        super().finish(model, state)
        if self.cfg.final_consensus:
            consensus_average(self.params, self.world_group, self.world_size)
