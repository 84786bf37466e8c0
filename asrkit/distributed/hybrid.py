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

import torch
from torch import nn

from asrkit.distributed.averager import PairwiseAverager
from asrkit.distributed.base import DistributedStrategy
from asrkit.distributed.config import HybridConfig
from asrkit.distributed.flat import add_flat_
from asrkit.distributed.groups import Groups
from asrkit.loader.planning import Sharding
from asrkit.training.strategy import TrainState


class GroupProgress:
    """The global progress as a group knows it: its leader's (a lower bound), handed to the
    members with each step's averaging delta (so all end their epochs on the same step)."""

    def __init__(self) -> None:
        self.value = 0.0

    def samples(self) -> float:
        return self.value


class Hybrid(DistributedStrategy):
    """In-group DDP + ADPSGD among group leaders (resumes from epoch ends, as ADPSGD)."""

    cfg: HybridConfig

    def __init__(self, cfg: HybridConfig, groups: Groups, *, seed: int) -> None:
        super().__init__(cfg, groups, seed=seed)
        size = cfg.group_size
        self.gradient_share = size / self.world_size
        self.group_count = self.world_size // size
        self.group_index, self.index_in_group = divmod(self.rank, size)
        self.leader = self.group_index * size
        self.is_leader = self.rank == self.leader
        assert groups.group is not None  # every learner is in a group
        self.intra = groups.group
        self.leaders = groups.leaders
        self.progress = GroupProgress()
        # The group's shard, batched like SYNC inside the group (1/groups of the global batch).
        self.sharding = Sharding(
            rank=self.index_in_group,
            world=size,
            shards=self.group_count,
            shard=self.group_index,
            progress=self.progress,
        )
        self._group_samples = 0
        self._restored_leader_samples: int | None = None

    def state_dict(self) -> dict:
        return {
            "progress": self.progress.value,
            "group_samples": self._group_samples,
            "leader_samples": self.averager.local_samples if self.averager else 0,
        }

    def load_state_dict(self, state: dict) -> None:
        self.progress.value, self._group_samples = float(state["progress"]), int(state["group_samples"])
        self._restored_leader_samples = int(state["leader_samples"])

    def attach(self, model: nn.Module) -> nn.Module:
        if self.is_leader and self.group_count > 1:
            assert self.leaders is not None  # a leader is a member
            self.averager = PairwiseAverager(
                self.params,
                comm=self.leaders,
                pattern=self.cfg.pattern,
                seed=self.seed,
                period=self.cfg.averaging_period,
                check_every=self.cfg.check_every,
            )
            if self._restored_leader_samples is not None:
                self.averager.restore(self._restored_leader_samples)
            self.averager.start()
        if self.cfg.group_size == 1:
            return model
        return self.intra.data_parallel(model)

    def _share_with_group(self, delta: torch.Tensor, progress: float) -> None:
        """Leader -> group: the averaging delta and the global progress; all apply the delta."""
        message = torch.cat([delta, torch.tensor([progress], dtype=delta.dtype)])
        if self.cfg.group_size > 1:
            began = self.runtime.now()
            self.intra.broadcast(message, src=self.leader)
            self.wait_s += self.runtime.now() - began
        add_flat_(self.params, message[:-1])
        self.progress.value = float(message[-1])

    def after_step(self, model: nn.Module, state: TrainState) -> None:
        super().after_step(model, state)
        group_samples = state.batch_utts  # the whole group's batch, not this slice
        self._group_samples += group_samples
        if self.averager is not None:
            delta, progress = self.averager.take_pending(), self.averager.progress_samples()
        else:  # a single group: every learner took the same step, progress is exact
            delta = torch.zeros(sum(p.numel() for p in self.params))
            progress = float(self._group_samples)
        self._share_with_group(delta, progress)
        if self.averager is not None:
            self.averager.publish_snapshot(group_samples)

    def drain(self, model: nn.Module) -> None:
        delta = torch.zeros(sum(p.numel() for p in self.params))
        if self.averager is not None:
            self.averager.finish(self.cfg.timeout_s)
            delta = self.averager.take_pending()
        self._share_with_group(delta, self.progress.value)
