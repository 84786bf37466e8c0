"""The communicator: the collective operations the strategies are written against.

A layer below both :mod:`asrkit.training` (the trainer's reductions) and
:mod:`asrkit.distributed` (the strategies), so neither reaches up into the other for it.

Neither the trainer nor a strategy calls ``torch.distributed`` itself. The trainer holds
a :class:`Communicator` of all learners for its reductions, resume agreement and save
barriers; the strategies hold the groups :func:`asrkit.distributed.groups.make_groups`
made. The real one, :class:`TorchCommunicator`, wraps torch.distributed process groups
(learners started by torchrun); :class:`SoloCommunicator` is a learner alone (every
collective is the identity); and :class:`asrkit.distributed.fake.FakeWorld` runs N
simulated learners as threads of one process, so the averaging arithmetic can be tested
in milliseconds.

A communicator also carries the :class:`Runtime` its learners live in: the machine's clock
and threads, or a simulator's virtual clock (:mod:`asrkit.sim`). Strategies and the
trainer read time, start threads and make conditions through it, so the same strategy
code runs for real and simulated.

Ranks are global, as in torch.distributed: a group lists the global ranks of its
members, and a pairwise exchange names its partner by global rank. Every learner must
create every group, in the same order (torch requires it), even groups it is not in.
"""

from __future__ import annotations

import datetime
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Runtime:
    """Time and threads for learners: the machine's (this class; :data:`REAL`), or virtual
    ones (:class:`asrkit.sim.runtime.ClockRuntime`)."""

    def now(self) -> float:
        """Monotonic seconds (durations, rates)."""
        return time.monotonic()

    def wall(self) -> float:
        """Seconds since the epoch (comparable across learners)."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def work(self) -> float:
        """Seconds the calling learner has spent working (not waiting on others or
        sleeping): its thread's CPU time here, the compute it was charged in a simulation."""
        return time.thread_time()

    def condition(self) -> Any:
        """A ``threading.Condition`` (``with``, ``wait_for``, ``notify_all``)."""
        return threading.Condition()

    def thread(self, target: Callable[[], None], *, name: str) -> Any:
        """An unstarted daemon thread (``start``, ``join(timeout)``, ``is_alive``)."""
        return threading.Thread(target=target, name=name, daemon=True)


#: The machine's runtime.
REAL = Runtime()


class Pending(Protocol):
    """A started operation; ``wait()`` completes it (an exchange returns the partner's
    tensor, a barrier ``None``)."""

    def wait(self) -> Any: ...


class Communicator(ABC):
    """One group of learners as seen by one of them.

    Attributes:
        rank: this learner's global rank.
        members: the global ranks in this group, in increasing order.
    """

    rank: int
    members: list[int]
    runtime: Runtime = REAL

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def index(self) -> int:
        """This learner's position in ``members``."""
        return self.members.index(self.rank)

    @abstractmethod
    def new_group(
        self, members: Sequence[int] | None = None, *, backend: str | None = "gloo"
    ) -> Communicator | None:
        """A group of ``members`` (default: this group's). Called on the world
        communicator by every learner, in the same order (torch.distributed makes groups
        world-wide); non-members get ``None``. ``backend=None`` is the
        default backend (NCCL on GPUs); ``gloo`` is safe from a second thread."""

    @abstractmethod
    def all_reduce(self, tensor: torch.Tensor) -> None:
        """Sum ``tensor`` over the group, in place."""

    @abstractmethod
    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        """Copy global rank ``src``'s ``tensor`` into every member's, in place."""

    @abstractmethod
    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every member's ``obj`` (picklable), in ``members`` order."""

    @abstractmethod
    def barrier(self) -> Pending:
        """Start a barrier; ``wait()`` returns once every member has started it."""

    @abstractmethod
    def exchange(self, tensor: torch.Tensor, partner: int) -> Pending:
        """Start sending ``tensor`` to global rank ``partner`` and receiving the tensor it
        sends here (same shape); ``wait()`` returns the received tensor. The partner
        calls ``exchange`` with this rank in the same round. Neither tensor may be changed
        in place afterwards (the partner may read this one after ``wait()`` has returned
        here; the received one may be the partner's own): make new tensors instead."""

    @abstractmethod
    def data_parallel(self, model: nn.Module, *, ordered_sum: bool = False) -> nn.Module:
        """``model`` wrapped so that its gradients are averaged over the group during
        ``backward()`` (DDP on torch.distributed). Each learner's gradient is divided by
        the group size, then they are added up; ``ordered_sum``: in rank order, whatever
        the backend (the in-process communicators always add in rank order)."""


class _Done:
    def wait(self) -> None:
        return None


class SoloCommunicator(Communicator):
    """A learner alone: sums, broadcasts and gathers of one member are the identity."""

    def __init__(self) -> None:
        self.rank, self.members = 0, [0]

    def new_group(
        self, members: Sequence[int] | None = None, *, backend: str | None = "gloo"
    ) -> SoloCommunicator | None:
        return SoloCommunicator() if members is None or 0 in members else None

    def all_reduce(self, tensor: torch.Tensor) -> None:
        pass

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        pass

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [obj]

    def barrier(self) -> Pending:
        return _Done()

    def exchange(self, tensor: torch.Tensor, partner: int) -> Pending:
        raise RuntimeError(f"a learner alone has no partner {partner} to exchange with")

    def data_parallel(self, model: nn.Module, *, ordered_sum: bool = False) -> nn.Module:
        return model


class _Requests:
    def __init__(self, requests: list[Any], result: torch.Tensor | None) -> None:
        self.requests, self.result = requests, result

    def wait(self) -> torch.Tensor | None:
        for request in self.requests:
            request.wait()
        self.requests = []
        return self.result


class TorchCommunicator(Communicator):
    """A torch.distributed process group (``group=None``: the default, world group).

    Args:
        rank: this learner's global rank.
        members: the group's global ranks.
        device: the learner's device (NCCL groups move tensors there).
        timeout_s: timeout of the groups made by :meth:`new_group`.
        group: the process group (``None``: the default group).
    """

    def __init__(
        self,
        *,
        rank: int,
        members: Sequence[int],
        device: torch.device,
        timeout_s: float,
        group: dist.ProcessGroup | None = None,
    ) -> None:
        self.rank, self.members = rank, sorted(members)
        self.device, self.timeout_s, self.group = device, timeout_s, group
        self._on_device = dist.get_backend(group) == "nccl"

    @classmethod
    def world(cls, *, device: torch.device, timeout_s: float) -> TorchCommunicator:
        """All learners of the job (the process group torchrun's rendezvous made)."""
        return cls(
            rank=dist.get_rank(), members=range(dist.get_world_size()), device=device, timeout_s=timeout_s
        )

    def new_group(
        self, members: Sequence[int] | None = None, *, backend: str | None = "gloo"
    ) -> TorchCommunicator | None:
        ranks = sorted(self.members if members is None else members)
        group = dist.new_group(ranks, backend=backend, timeout=datetime.timedelta(seconds=self.timeout_s))
        if self.rank not in ranks:
            return None
        return TorchCommunicator(
            rank=self.rank, members=ranks, device=self.device, timeout_s=self.timeout_s, group=group
        )

    def _placed(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.device) if self._on_device else tensor

    def all_reduce(self, tensor: torch.Tensor) -> None:
        placed = self._placed(tensor)
        dist.all_reduce(placed, group=self.group)
        if placed is not tensor:
            tensor.copy_(placed)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        placed = self._placed(tensor)
        dist.broadcast(placed, src=src, group=self.group)
        if placed is not tensor:
            tensor.copy_(placed)

    def all_gather_object(self, obj: Any) -> list[Any]:
        gathered: list[Any] = [None] * self.size
        dist.all_gather_object(gathered, obj, group=self.group)
        return gathered

    def barrier(self) -> Pending:
        return _Requests([dist.barrier(group=self.group, async_op=True)], None)

    def exchange(self, tensor: torch.Tensor, partner: int) -> Pending:
        if self._on_device:
            raise RuntimeError("pairwise exchanges run on gloo groups (new_group(backend='gloo'))")
        theirs = torch.empty_like(tensor)
        requests = [
            dist.isend(tensor, dst=partner, group=self.group),
            dist.irecv(theirs, src=partner, group=self.group),
        ]
        return _Requests(requests, theirs)

    def data_parallel(self, model: nn.Module, *, ordered_sum: bool = False) -> nn.Module:
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        # broadcast_buffers off: the model has no buffers that change during training.
        wrapped = DistributedDataParallel(
            model, device_ids=device_ids, process_group=self.group, broadcast_buffers=False
        )
        if ordered_sum:
            wrapped.register_comm_hook(self, _ordered_sum_hook)
        return wrapped


def _ordered_sum_hook(comm, bucket):
    """A DDP communication hook: the bucket's (a ``dist.GradBucket``) mean over the group,
    added in rank order (every learner gathers every learner's bucket). Not annotated:
    DDP checks the annotations' values, which this module's postponed annotations turn
    into strings."""
    mine = bucket.buffer().div_(comm.size)
    gathered = [torch.empty_like(mine) for _ in range(comm.size)]
    future = dist.all_gather(gathered, mine, group=comm.group, async_op=True).get_future()

    def total(_: torch.futures.Future) -> torch.Tensor:
        out = gathered[0].clone()
        for other in gathered[1:]:
            out += other
        return out

    return future.then(total)
