"""ADPSGD: asynchronous decentralized parallel SGD (Lian et al., 2018).

Each learner trains on its own shard with local batches of ``1/n`` of the global
batch and its own optimizer (momentum stays local). A communication thread per
learner repeatedly averages weights with one partner from the ``fixed`` ring or a
seeded ``random`` matching (:mod:`asrkit.distributed.topology`); even ranks are
active, odd ranks passive, so every round is a perfect matching and cannot deadlock.

The thread never touches the live weights while the compute loop runs a step. After
every local step the compute loop publishes a snapshot ``x_i^snap`` and applies the
pending averaging delta; the thread exchanges snapshots with its partner and adds
``(x_j^snap - x_i^snap) / 2`` to the pending delta. The two deltas of a pair are exact
negatives of each other, so the learners' mean is preserved, and local steps taken
during the exchange are kept (the delta form of the update).

The thread runs on its own gloo group (a :class:`~asrkit.comm.Communicator`)
with a finite timeout (never NCCL from a second thread). Every ``check_every`` rounds
it all-reduces ``[samples, done]`` with the others: that gives global progress (which
drives epochs and the learning rate: a global epoch ends when all learners together
have processed the training set once) and tells it when every learner has finished.
At the end the replicas are averaged into one model (consensus) before anything is
saved.
"""

from __future__ import annotations

import logging

from torch import nn

from asrkit.distributed.averager import PairwiseAverager
from asrkit.distributed.base import DistributedStrategy
from asrkit.distributed.config import AdpsgdConfig
from asrkit.distributed.flat import add_flat_
from asrkit.distributed.groups import Groups
from asrkit.loader.planning import Sharding
from asrkit.training.strategy import TrainState

log = logging.getLogger(__name__)


class AveragerProgress:
    """The global progress (:class:`~asrkit.loader.planning.Progress`) as a learner's
    averaging thread knows it; nothing was processed before the thread starts."""

    def __init__(self) -> None:
        self.averager: PairwiseAverager | None = None

    def samples(self) -> float:
        return self.averager.progress_samples() if self.averager is not None else 0.0


class Adpsgd(DistributedStrategy):
    """ADPSGD among all learners.

    Resume: every learner saves its own replica at epoch ends; a resumed run continues
    from the replicas (not from the main learner's) with the samples each had processed.
    The averaging delta still in flight at the save is not kept (the learners' mean may
    move by that much once); the run is asynchronous, so it is not bitwise reproducible.
    """

    cfg: AdpsgdConfig

    def __init__(self, cfg: AdpsgdConfig, groups: Groups, *, seed: int) -> None:
        super().__init__(cfg, groups, seed=seed)
        self.gradient_share = 1.0 / self.world_size
        self._restored_samples: int | None = None
        assert groups.pairs is not None  # the communication thread's own group
        self.pairs = groups.pairs
        # A shard per learner, cycled until all learners together have done an epoch.
        self.progress = AveragerProgress()
        self.sharding = Sharding(shards=self.world_size, shard=self.rank, progress=self.progress)

    def state_dict(self) -> dict:
        return {"local_samples": self.averager.local_samples if self.averager else 0}

    def load_state_dict(self, state: dict) -> None:
        self._restored_samples = int(state["local_samples"])

    def attach(self, model: nn.Module) -> nn.Module:
        self.averager = PairwiseAverager(
            self.params,
            comm=self.pairs,
            pattern=self.cfg.pattern,
            seed=self.seed,
            period=self.cfg.averaging_period,
            check_every=self.cfg.check_every,
        )
        if self._restored_samples is not None:
            self.averager.restore(self._restored_samples)
        self.progress.averager = self.averager
        self.averager.start()
        return model

    def after_step(self, model: nn.Module, state: TrainState) -> None:
        super().after_step(model, state)
        assert self.averager is not None
        self.averager.publish(state.samples - self.averager.local_samples)

    def drain(self, model: nn.Module) -> None:
        assert self.averager is not None
        self.averager.finish(self.cfg.timeout_s)
        add_flat_(self.params, self.averager.take_pending())
