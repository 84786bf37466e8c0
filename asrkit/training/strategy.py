"""The seam between the training loop and a distributed strategy.

:class:`Trainer.fit <asrkit.training.trainer.Trainer.fit>` calls a :class:`Strategy` at
six points and nowhere else: ``wrap`` once, ``before_step``, ``after_backward`` and
``after_step`` every step, ``finish`` at the end (or when a signal stops training), and
``state_dict``/``load_state_dict`` for resume states. The rest of what learners do
together is not the strategy's: the trainer's sums, resume agreement and save barriers
go through the :class:`~asrkit.comm.Communicator` it is handed, and how the
training set is shared is the batch planner's (a
:class:`~asrkit.loader.planning.Sharding` the strategy declares). A single process uses
this class itself, where every point is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from asrkit.loader.planning import Sharding


@dataclass
class TrainState:
    """Progress of a run: what checkpoints store and strategies may read."""

    epoch: int = 0
    step: int = 0
    samples: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    best: dict[str, float] | None = None
    #: Utterances in the latest step's batch across the learners that shared it (a
    #: learner's own ``samples`` count only its share).
    batch_utts: int = 0
    #: Seconds the training steps of this process waited for their batches, and the
    #: seconds its training loop ran (both since this process started).
    data_wait_s: float = 0.0
    train_s: float = 0.0
    #: Wall-clock time (``time.time()``) at which this process's first step ended.
    first_step_time: float | None = None

    @property
    def data_wait_fraction(self) -> float:
        return self.data_wait_s / self.train_s if self.train_s > 0 else 0.0


class Strategy:
    """How learners combine their work: a single process's (no-ops) and the base of the
    distributed strategies (:mod:`asrkit.distributed`).

    Attributes:
        sharding: how this learner's batches are cut from the training set.
        lockstep: every learner takes the same steps (so a stop or a resume state may
            fall mid-epoch); strategies that average asynchronously meet only at epoch
            ends and save barriers. Read from ``sharding`` (:attr:`Sharding.lockstep`),
            the one place it is decided.
        gradient_share: the share of the global batch in the gradient this learner's
            optimizer steps on: 1 alone and for SYNC (the global batch's mean), 1/n for
            the learners of ADPSGD and delay-by-one, G/n for HYBRID's groups of G. The
            trainer clips a gradient of a share s at ``train.clip_grad_norm / sqrt(s)``: a
            smaller batch's gradient is noisier by that factor, and clipping it at the
            global batch's threshold would make the averaged steps shorter than SYNC's.
    """

    gradient_share: float = 1.0

    def __init__(self) -> None:
        self.sharding = Sharding()

    @property
    def lockstep(self) -> bool:
        return self.sharding.lockstep

    def wrap(self, model: nn.Module, *, resumed: bool) -> nn.Module:
        """Called once, before the first step; returns the module the loop calls (e.g. a
        DDP wrapper). ``resumed``: the replicas hold restored weights of their own."""
        return model

    def before_step(self, state: TrainState) -> None:
        """Before the forward pass."""

    def after_backward(self, model: nn.Module, state: TrainState) -> None:
        """Gradients are ready, not yet clipped or applied."""

    def after_step(self, model: nn.Module, state: TrainState) -> None:
        """Weights updated and ``state.step``/``samples``/``batch_utts`` counted."""

    def finish(self, model: nn.Module, state: TrainState, *, stopped: bool = False) -> dict[str, Any] | None:
        """The last steps are done: complete (and apply) what is in flight; unless
        ``stopped`` by a signal, also combine the replicas into the final model. Returns
        the learners' summary for ``learners.json`` (None for a single process)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """The strategy's own part of a resume state (tensors, numbers, strings)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; called before :meth:`wrap`."""
