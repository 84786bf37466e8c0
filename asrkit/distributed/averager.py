"""ADPSGD's communication thread: pairwise weight averaging with a partner from a fixed
ring or a seeded random matching, beside the compute loop (the protocol is described in
:mod:`asrkit.distributed.adpsgd`); HYBRID's group leaders run one too.
"""

from __future__ import annotations

import functools
import logging

import torch
from torch import nn

from asrkit.comm import Communicator
from asrkit.distributed.flat import add_flat_, flatten
from asrkit.distributed.topology import partner_of
from asrkit.errors import UserError

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
        self._pending_zero = True  # spares the arithmetic of adding zeros (often the case)
        self.runtime = comm.runtime
        self.cond = self.runtime.condition()
        self.local_steps = 0
        self.local_samples = 0
        self.done = False
        self.global_samples = 0.0  # all learners' samples at the last all-reduce
        self._samples_at_check = 0  # this learner's samples at the last all-reduce
        self.rounds = 0
        self.wait_s = 0.0
        self.error: BaseException | None = None
        self._thread = self.runtime.thread(self._run, name=f"adpsgd-comm-{self.rank}")

    def start(self) -> None:
        self._thread.start()

    def restore(self, local_samples: int) -> None:
        """Continue a resumed run: this learner had processed ``local_samples``. The global
        total is exact after the thread's first all-reduce, which comes before any round."""
        self.local_samples = self._samples_at_check = local_samples
        self.global_samples = float(local_samples * len(self.members))

    # -- compute-thread side -------------------------------------------------------------

    def publish(self, samples: int) -> None:
        """After a local step: apply the pending delta, publish a new snapshot (in one
        critical section, which spares keeping the snapshot in step with the delta between
        the two: fewer passes over the weights)."""
        self._raise_if_failed()
        with self.cond:
            if not self._pending_zero:
                add_flat_(self.params, self.pending)
                self.pending.zero_()
                self._pending_zero = True
            self._publish(samples)

    def take_pending(self) -> torch.Tensor:
        """The averaging delta accumulated since the last call (the caller applies it)."""
        self._raise_if_failed()
        with self.cond:
            delta = self.pending.clone()
            self.pending.zero_()
            self._pending_zero = True
            # Until the next snapshot, snapshot + pending must still equal the weights the
            # caller is about to have, or a round in between would miss this delta. (A new
            # tensor: the old snapshot may still be on its way to a partner.)
            self.snapshot = self.snapshot + delta
        return delta

    def publish_snapshot(self, samples: int) -> None:
        """The compute loop's weights after a step (and its delta): the next round's ``x_i``."""
        with self.cond:
            self._publish(samples)

    def _publish(self, samples: int) -> None:
        # A new tensor each time, never changed in place: a round sends it as it is.
        self.snapshot = flatten(self.params)
        self.local_steps += 1
        self.local_samples += samples
        self.cond.notify_all()

    def progress_samples(self) -> float:
        """Samples processed by all learners: at least the last all-reduced total plus this
        learner's own samples since (a lower bound, never an estimate, so no learner ends
        a global epoch before all together have processed the set).

        All learners get the same totals from the same all-reduces (one every
        ``check_every`` rounds, paced by the slowest learner), so they end an epoch within
        a round of each other; the price is at most that many extra local steps each.
        """
        with self.cond:
            return self.global_samples + (self.local_samples - self._samples_at_check)

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
                    mine = self.snapshot if self._pending_zero else self.snapshot + self.pending
                theirs = self._exchange(mine, self._partner(k))
                difference = theirs - mine  # neither changes: tensors are replaced, not updated
                with self.cond:
                    self.pending.add_(difference, alpha=0.5)  # x_i += (x_j - x_i) / 2
                    self._pending_zero = False
                self.rounds += 1
                k += 1
        except BaseException as err:  # reported to the compute thread at its next step
            self.error = err

    def _paced(self, steps: int) -> bool:
        """The averaging thread may go on: training is done, or ``steps`` local steps were
        taken (called with ``cond`` held)."""
        return self.done or self.local_steps >= steps

    def _exchange(self, mine: torch.Tensor, partner: int) -> torch.Tensor:
        began = self.runtime.now()
        theirs = self.comm.exchange(mine, partner).wait()
        self.wait_s += self.runtime.now() - began
        return theirs

    def _all_done(self) -> bool:
        with self.cond:
            status = torch.tensor([float(self.local_samples), float(self.done)], dtype=torch.float64)
            local = self.local_samples
        began = self.runtime.now()
        self.comm.all_reduce(status)
        self.wait_s += self.runtime.now() - began
        with self.cond:
            self.global_samples, self._samples_at_check = float(status[0]), local
        return int(status[1]) == len(self.members)
