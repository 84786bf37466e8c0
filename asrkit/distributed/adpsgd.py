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

The thread runs on its own gloo group (a :class:`~asrkit.distributed.comm.Communicator`)
with a finite timeout (never NCCL from a second thread). Every ``check_every`` rounds
it all-reduces ``[samples, done]`` with the others: that gives global progress (which
drives epochs and the learning rate: a global epoch ends when all learners together
have processed the training set once) and tells it when every learner has finished.
At the end the replicas are averaged into one model (consensus) before anything is
saved.
"""

from __future__ import annotations

import functools
import logging
import threading
import time

import torch
from torch import nn

from asrkit.data.stream import BucketBatches, UtteranceSource
from asrkit.distributed.base import StrategyHooks, add_flat_, flatten
from asrkit.distributed.comm import Communicator
from asrkit.distributed.config import AdpsgdConfig
from asrkit.distributed.topology import partner_of
from asrkit.errors import UserError
from asrkit.training.config import TrainConfig
from asrkit.training.trainer import TrainState

log = logging.getLogger(__name__)


class PairwiseAverager:
    """The communication thread of one learner among ``comm.members``.

    Args:
        params: the learner's parameters (only the compute thread changes them).
        comm: a gloo group of the learners that average with each other (pairing order:
            ``comm.members``), used by this thread alone.
        pattern: ``fixed`` or ``random``.
        seed: shared seed of the random pattern.
        period: local steps per averaging round (pacing).
        check_every: rounds between progress/stop all-reduces.
    """

    def __init__(
        self,
        params: list[nn.Parameter],
        *,
        comm: Communicator,
        pattern: str,
        seed: int,
        period: int,
        check_every: int,
    ) -> None:
        self.params, self.comm = params, comm
        self.members, self.rank, self.index = comm.members, comm.rank, comm.index
        self.pattern, self.seed, self.period, self.check_every = pattern, seed, period, check_every
        self.snapshot = flatten(params)
        self.pending = torch.zeros_like(self.snapshot)
        self.cond = threading.Condition()
        self.local_steps = 0
        self.local_samples = 0
        self.done = False
        self.global_samples = 0.0
        self._samples_at_check = 0
        self._checked_at: float | None = None
        self._paused_s = 0.0  # time since the last all-reduce when no learner was computing
        self._rate: float | None = None  # global samples/s between the last two all-reduces
        self.rounds = 0
        self.wait_s = 0.0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"adpsgd-comm-{self.rank}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def paused(self, seconds: float) -> None:
        """Every learner waited ``seconds`` (at an epoch-end save): leave that time out of
        the progress extrapolation, or the learners would think others kept computing."""
        with self.cond:
            self._paused_s += seconds

    def restore(self, local_samples: int) -> None:
        """Continue a resumed run: this learner had processed ``local_samples``. The global
        total is exact after the thread's first all-reduce, which comes before any round."""
        self.local_samples = self._samples_at_check = local_samples
        self.global_samples = float(local_samples * len(self.members))

    # -- compute-thread side -------------------------------------------------------------

    def publish(self, samples: int) -> None:
        """After a local step: apply the pending delta, publish a new snapshot."""
        add_flat_(self.params, self.take_pending())
        self.publish_snapshot(samples)

    def take_pending(self) -> torch.Tensor:
        """The averaging delta accumulated since the last call (the caller applies it)."""
        self._raise_if_failed()
        with self.cond:
            delta = self.pending.clone()
            self.pending.zero_()
            # Until the next snapshot, snapshot + pending must still equal the weights the
            # caller is about to have, or a round in between would miss this delta.
            self.snapshot += delta
        return delta

    def publish_snapshot(self, samples: int) -> None:
        """The compute loop's weights after a step (and its delta): the next round's ``x_i``."""
        with self.cond:
            self.snapshot = flatten(self.params)
            self.local_steps += 1
            self.local_samples += samples
            self.cond.notify_all()

    def progress_samples(self) -> float:
        """Samples processed by all learners, estimated between all-reduces.

        The last all-reduced total plus what the learners have added since: extrapolated
        with the global rate measured between the last two all-reduces (so a slow learner
        counts the fast ones' work too), and never less than its own samples since then.
        Before a rate is known, its own samples count once per learner.
        """
        with self.cond:
            own = self.local_samples - self._samples_at_check
            if self._rate is None:
                return self.global_samples + own * len(self.members)
            assert self._checked_at is not None  # set with _rate
            since = max(0.0, time.monotonic() - self._checked_at - self._paused_s)
            return self.global_samples + max(float(own), self._rate * since)

    def finish(self, timeout_s: float) -> None:
        """Stop computing; keep averaging until every learner is done; apply what is pending."""
        with self.cond:
            self.done = True
            self.cond.notify_all()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise UserError(
                f"learner {self.rank}: the ADPSGD communication thread did not stop "
                f"within {timeout_s:.0f} s; another learner is stuck or dead"
            )
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise UserError(
                f"learner {self.rank}: ADPSGD averaging failed "
                f"({type(self.error).__name__}: {str(self.error).splitlines()[0][:200]}); "
                "another learner died or timed out — see its log"
            ) from self.error

    # -- communication thread ------------------------------------------------------------

    def _partner(self, round_index: int) -> int:
        return self.members[partner_of(self.pattern, len(self.members), round_index, self.seed, self.index)]

    def _run(self) -> None:
        try:
            k = 0
            while True:
                if k % self.check_every == 0 and self._all_done():
                    return
                with self.cond:
                    # Pacing: round k waits for this learner's (k+1)*period-th local step.
                    self.cond.wait_for(functools.partial(self._paced, (k + 1) * self.period))
                    # The learner's weights are its snapshot plus what is still pending
                    # (not yet applied by the compute loop, e.g. after it has finished).
                    mine = self.snapshot + self.pending
                theirs = self._exchange(mine, self._partner(k))
                with self.cond:
                    self.pending += 0.5 * (theirs - mine)
                self.rounds += 1
                k += 1
        except BaseException as err:  # reported to the compute thread at its next step
            self.error = err

    def _paced(self, steps: int) -> bool:
        """The averaging thread may go on: training is done, or ``steps`` local steps were
        taken (called with ``cond`` held)."""
        return self.done or self.local_steps >= steps

    def _exchange(self, mine: torch.Tensor, partner: int) -> torch.Tensor:
        began = time.monotonic()
        theirs = self.comm.exchange(mine, partner).wait()
        self.wait_s += time.monotonic() - began
        return theirs

    def _all_done(self) -> bool:
        with self.cond:
            status = torch.tensor([float(self.local_samples), float(self.done)], dtype=torch.float64)
            local = self.local_samples
        began = time.monotonic()
        self.comm.all_reduce(status)
        self.wait_s += time.monotonic() - began
        now = time.monotonic()
        with self.cond:
            total = float(status[0])
            if self._checked_at is not None and now > self._checked_at and total > self.global_samples:
                self._rate = (total - self.global_samples) / (now - self._checked_at)
            self.global_samples, self._samples_at_check, self._checked_at = total, local, now
            self._paused_s = 0.0
        return int(status[1]) == len(self.members)


class AdpsgdHooks(StrategyHooks):
    """ADPSGD among all learners.

    Resume: every learner saves its own replica at epoch ends; a resumed run continues
    from the replicas (not from the main learner's) with the samples each had processed.
    The averaging delta still in flight at the save is not kept (the learners' mean may
    move by that much once); the run is asynchronous, so it is not bitwise reproducible.
    """

    lockstep = False
    cfg: AdpsgdConfig

    def __init__(self, cfg: AdpsgdConfig, comm: Communicator, *, seed: int) -> None:
        super().__init__(cfg, comm, seed=seed)
        self.total = 0
        self._restored_samples: int | None = None
        # The communication thread's own group, made by every rank before any thread starts.
        pairs = comm.new_group(backend="gloo")
        assert pairs is not None
        self.pairs = pairs

    def make_batches(self, source: UtteranceSource, cfg: TrainConfig, *, seed: int) -> BucketBatches:
        self.total = len(source)
        return self.own_shard(
            source, cfg, seed=seed, shards=self.world_size, shard=self.rank, progress=self.global_samples
        )

    def global_samples(self) -> float:
        return self.averager.progress_samples() if self.averager is not None else 0.0

    def progress_step(self, state: TrainState, steps_per_epoch: int) -> float:
        return self.global_samples() / max(1, self.total) * steps_per_epoch

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
