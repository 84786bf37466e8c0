"""N simulated learners in one process: the in-process :class:`Communicator`.

:class:`FakeWorld` runs one thread per learner; their communicators meet in shared
memory instead of sockets. Collectives rendezvous by (group, sequence number), as
torch.distributed's do, so a learner that calls them in another order than its peers
hangs here as it would there — until ``timeout_s``, when every learner fails with an
error that says so. Exchanges are FIFO channels per (group, sender, receiver). Sums
add the members' tensors in rank order, so every learner gets bitwise the same result.

    world = FakeWorld(4)
    means = world.run(lambda comm: my_learner(comm))   # one result per rank

It is meant for tests and for studying the strategies' arithmetic, not for speed.
"""

from __future__ import annotations

import copy
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import nn

from asrkit.comm import Communicator, Pending

T = TypeVar("T")

_UNSET = object()


class FakeWorldError(RuntimeError):
    """A simulated learner failed or a collective timed out; the other learners stop."""


class _Slot:
    def __init__(self, expected: int) -> None:
        self.values: dict[int, Any] = {}
        self.expected = expected
        self.result: Any = _UNSET
        self.unread = expected


class FakeWorld:
    """The shared state of ``size`` simulated learners.

    Args:
        size: the number of learners.
        timeout_s: how long an operation waits for its peers before every learner fails.
    """

    def __init__(self, size: int, *, timeout_s: float = 20.0) -> None:
        if size < 1:
            raise ValueError(f"a fake world needs at least one learner, got {size}")
        self.size, self.timeout_s = size, timeout_s
        self._cond = threading.Condition()
        self._slots: dict[tuple, _Slot] = {}
        self._mail: defaultdict[tuple, deque[torch.Tensor]] = defaultdict(deque)
        self._failure: str | None = None

    def communicator(self, rank: int) -> FakeCommunicator:
        """Learner ``rank``'s communicator for the whole world."""
        return FakeCommunicator(self, group=(), members=range(self.size), rank=rank)

    def run(self, learner: Callable[[FakeCommunicator], T]) -> list[T]:
        """Run ``learner(comm)`` for every rank, each in its own thread; return their
        results by rank. The first learner to raise makes the others fail too, and its
        exception is raised here."""
        results: list[Any] = [None] * self.size
        errors: list[tuple[int, BaseException]] = []

        def body(rank: int) -> None:
            try:
                results[rank] = learner(self.communicator(rank))
            except BaseException as err:
                errors.append((rank, err))
                self.fail(f"learner {rank} failed: {type(err).__name__}: {err}")

        threads = [
            threading.Thread(target=body, args=(r,), name=f"fake-learner-{r}", daemon=True)
            for r in range(self.size)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            first = [e for e in errors if not isinstance(e[1], FakeWorldError)] or errors
            raise first[0][1]
        return results

    def fail(self, why: str) -> None:
        """Stop the world: every waiting or later operation raises :class:`FakeWorldError`."""
        with self._cond:
            if self._failure is None:
                self._failure = why
            self._cond.notify_all()

    # -- rendezvous -------------------------------------------------------------------

    def _wait_for(self, ready: Callable[[], bool], what: str) -> None:
        """Wait (holding ``_cond``) until ``ready()``; raise if the world failed first."""
        if not self._cond.wait_for(lambda: ready() or self._failure is not None, self.timeout_s):
            self._failure = f"{what} waited {self.timeout_s:.0f} s for its peers"
            self._cond.notify_all()
        if self._failure is not None:
            raise FakeWorldError(self._failure)

    def post(
        self, key: tuple, rank: int, value: Any, expected: int, combine: Callable[[dict[int, Any]], Any]
    ) -> None:
        """Contribute ``value`` to collective ``key``; the last contributor combines them."""
        with self._cond:
            if self._failure is not None:
                raise FakeWorldError(self._failure)
            slot = self._slots.setdefault(key, _Slot(expected))
            slot.values[rank] = value
            if len(slot.values) == slot.expected:
                slot.result = combine(slot.values)
                slot.values = {}
                self._cond.notify_all()

    def collect(self, key: tuple, what: str) -> Any:
        """The combined result of collective ``key`` (waits for every contribution)."""
        with self._cond:
            slot = self._slots[key]
            self._wait_for(lambda: slot.result is not _UNSET, what)
            slot.unread -= 1
            if slot.unread == 0:
                del self._slots[key]
            return slot.result

    def send(self, channel: tuple, tensor: torch.Tensor) -> None:
        with self._cond:
            self._mail[channel].append(tensor.detach().clone())
            self._cond.notify_all()

    def receive(self, channel: tuple, what: str) -> torch.Tensor:
        with self._cond:
            box = self._mail[channel]
            self._wait_for(lambda: len(box) > 0, what)
            return box.popleft()


class _Later:
    def __init__(self, finish: Callable[[], Any]) -> None:
        self._finish, self._done, self._result = finish, False, None

    def wait(self) -> Any:
        if not self._done:
            self._result, self._done = self._finish(), True
        return self._result


class FakeCommunicator(Communicator):
    """One simulated learner's view of one group of a :class:`FakeWorld`."""

    def __init__(self, world: FakeWorld, *, group: tuple, members: Sequence[int], rank: int) -> None:
        self.world, self.group, self.rank = world, group, rank
        self.members = sorted(members)
        self._sequence = 0  # collectives this learner has started on this group
        self._groups_made = 0

    def new_group(
        self, members: Sequence[int] | None = None, *, backend: str | None = "gloo"
    ) -> FakeCommunicator | None:
        # torch.distributed makes groups collectively over the whole world, so groups are
        # made from the world communicator only (here as there); they are named by the
        # order they were made in, as every learner makes the same groups in the same order.
        if self.group != ():
            raise RuntimeError(
                "make groups from the world communicator (torch.distributed.new_group is world-wide)"
            )
        name = (self._groups_made,)
        self._groups_made += 1
        ranks = sorted(self.members if members is None else members)
        if self.rank not in ranks:
            return None
        return FakeCommunicator(self.world, group=name, members=ranks, rank=self.rank)

    def _start(self, op: str, value: Any, combine: Callable[[dict[int, Any]], Any]) -> _Later:
        key = (self.group, self._sequence)
        self._sequence += 1
        self.world.post(key, self.rank, value, self.size, combine)
        what = f"learner {self.rank}: {op} #{key[1]} on group {self.group or 'world'}"
        return _Later(lambda: self.world.collect(key, what))

    def all_reduce(self, tensor: torch.Tensor) -> None:
        def total(values: dict[int, Any]) -> torch.Tensor:
            out = values[self.members[0]].clone()
            for r in self.members[1:]:
                out += values[r]
            return out

        tensor.copy_(self._start("all_reduce", tensor.detach().clone(), total).wait())

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        result = self._start(
            "broadcast", tensor.detach().clone() if self.rank == src else None, lambda values: values[src]
        ).wait()
        if self.rank != src:
            tensor.copy_(result)

    def all_gather_object(self, obj: Any) -> list[Any]:
        gathered = self._start(
            "all_gather_object", copy.deepcopy(obj), lambda values: [values[r] for r in self.members]
        ).wait()
        return copy.deepcopy(gathered)

    def barrier(self) -> Pending:
        later = self._start("barrier", None, lambda values: None)
        return _Later(lambda: (later.wait(), None)[1])

    def exchange(self, tensor: torch.Tensor, partner: int) -> Pending:
        self.world.send((self.group, self.rank, partner), tensor)
        what = f"learner {self.rank}: exchange with {partner} on group {self.group or 'world'}"
        return _Later(lambda: self.world.receive((self.group, partner, self.rank), what))

    def data_parallel(self, model: nn.Module, *, ordered_sum: bool = False) -> nn.Module:
        return _AveragedGradients(model, self)  # adds in rank order either way


class _AveragedGradients(nn.Module):
    """DDP's contract without DDP: each parameter's gradient is replaced by the group's
    mean as soon as ``backward()`` has accumulated it (a hook per parameter). The learners'
    hooks meet in the order they fire; each contribution carries its parameter's index, so
    learners whose backward passes fire in different orders fail instead of mixing up
    gradients. CPU models only (CUDA autograd runs every learner's hooks on one thread)."""

    def __init__(self, module: nn.Module, comm: FakeCommunicator) -> None:
        super().__init__()
        self.module = module
        for index, param in enumerate(module.parameters()):
            if param.device.type != "cpu":
                raise RuntimeError("the fake communicator's data_parallel takes CPU models only")
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self._averager(comm, index))

    @staticmethod
    def _averager(comm: FakeCommunicator, index: int) -> Callable[[torch.Tensor], None]:
        def mean(values: dict[int, Any]) -> torch.Tensor:
            indices = {i for i, _ in values.values()}
            if len(indices) != 1:
                raise RuntimeError(f"learners averaged different parameters at once: {sorted(indices)}")
            total = values[comm.members[0]][1].clone()
            for r in comm.members[1:]:
                total += values[r][1]
            return total / comm.size

        def hook(param: torch.Tensor) -> None:
            assert param.grad is not None
            later = comm._start("gradient all_reduce", (index, param.grad.detach().clone()), mean)
            param.grad.copy_(later.wait())

        return hook

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)
