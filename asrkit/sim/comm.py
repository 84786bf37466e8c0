"""The simulated learners' :class:`~asrkit.comm.Communicator`: collectives and
pairwise exchanges between tasks of one :class:`~asrkit.sim.clock.Clock`, each taking the
virtual time the :class:`~asrkit.sim.network.Network` says.

A collective completes when its last member has started it, plus the algorithm's time on
the network (``t = max(arrivals) + cost``); every member resumes at ``t`` (or later, if it
waits later). A pairwise exchange is a message each way: the partner's tensor arrives
``latency + bytes / bandwidth`` after the partner sent it, whenever this learner waits
for it — so an exchange with a slow partner costs the waiting, and an exchange started
before a step and waited for after it costs nothing more than the step (delay-by-one's
overlap), as on a real network. Sums add the members' tensors in rank order, so every
learner gets bitwise the same result, run after run. As in torch.distributed, the
members of a group must start its collectives in the same order: a mismatch stops the
simulation with an error that says which learners disagreed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from asrkit.comm import Communicator, Pending
from asrkit.sim.clock import Clock, Event
from asrkit.sim.network import Network
from asrkit.sim.runtime import ClockRuntime

__all__ = ["OBJECT_BYTES", "SimCommunicator", "SimWorld"]

#: The size an object of ``all_gather_object`` counts as on the network.
OBJECT_BYTES = 1024


class _Collective:
    def __init__(self, op: str, expected: int, event: Event) -> None:
        self.op, self.expected, self.event = op, expected, event
        self.values: dict[int, Any] = {}
        self.last = 0.0


class SimWorld:
    """The network between ``size`` simulated learners on ``clock``.

    Attributes:
        bytes_sent: bytes each learner has put on the network (for reports; as charged,
            ``Network.bytes_scale`` included).
    """

    def __init__(self, clock: Clock, size: int, network: Network) -> None:
        if size < 1:
            raise ValueError(f"a simulated world needs at least one learner, got {size}")
        self.clock, self.size, self.network = clock, size, network
        self.runtime = ClockRuntime(clock)
        self._collectives: dict[tuple, _Collective] = {}
        self._messages: dict[tuple, Event] = {}
        self._sent: dict[tuple, int] = {}
        self._received: dict[tuple, int] = {}
        self.bytes_sent = [0] * size

    def communicator(self, rank: int) -> SimCommunicator:
        """Learner ``rank``'s communicator of the whole world."""
        return SimCommunicator(self, group=(), members=range(self.size), rank=rank)

    # -- used by the communicators ------------------------------------------------------

    def post(
        self,
        key: tuple,
        op: str,
        rank: int,
        value: Any,
        members: Sequence[int],
        combine: Callable[[dict[int, Any]], Any],
        cost_s: float,
    ) -> Event:
        """Learner ``rank`` starts collective ``key``; the returned event happens when it
        completes, with the combined value."""
        slot = self._collectives.get(key)
        if slot is None:
            slot = _Collective(
                op, len(members), Event(self.clock, f"{op} #{key[1]} of group {key[0] or 'world'}")
            )
            self._collectives[key] = slot
        elif slot.op != op:
            others = sorted(slot.values)
            raise RuntimeError(
                f"learner {rank} started {op} as collective #{key[1]} of group {key[0] or 'world'} where "
                f"learner(s) {others} started {slot.op}: the learners call collectives in different orders"
            )
        slot.values[rank] = value
        slot.last = max(slot.last, self.clock.now())
        if len(slot.values) == slot.expected:
            del self._collectives[key]
            slot.event.set(combine(slot.values), at=slot.last + cost_s)
        return slot.event

    def message(self, channel: tuple, index: int) -> Event:
        """The ``index``-th message of ``channel`` (made by whichever side comes first)."""
        key = (channel, index)
        event = self._messages.get(key)
        if event is None:
            event = self._messages[key] = Event(self.clock, f"message {index} on {channel}")
        return event

    def send(self, channel: tuple, sender: int, tensor: torch.Tensor) -> None:
        index = self._sent.get(channel, 0)
        self._sent[channel] = index + 1
        nbytes = self.network.tensor_bytes(tensor.numel() * tensor.element_size())
        self.bytes_sent[sender] += nbytes
        # Not copied: neither side may change an exchanged tensor in place, ever (the
        # Communicator.exchange contract); the receiver gets this very object.
        self.message(channel, index).set(
            tensor.detach(), at=self.clock.now() + self.network.transfer_s(nbytes)
        )

    def receive(self, channel: tuple) -> tuple[int, Event]:
        """The next message of ``channel`` to be received: its index and event."""
        index = self._received.get(channel, 0)
        self._received[channel] = index + 1
        return index, self.message(channel, index)

    def delivered(self, channel: tuple, index: int) -> None:
        self._messages.pop((channel, index), None)


class _Waiting:
    """A started operation (:class:`~asrkit.comm.Pending`)."""

    def __init__(self, event: Event, then: Callable[[Any], Any] = lambda value: value) -> None:
        self.event, self.then = event, then
        self._done, self._result = False, None

    def wait(self) -> Any:
        if not self._done:
            self._result, self._done = self.then(self.event.wait()), True
        return self._result


class SimCommunicator(Communicator):
    """One simulated learner's view of one group of a :class:`SimWorld`."""

    def __init__(self, world: SimWorld, *, group: tuple, members: Sequence[int], rank: int) -> None:
        self.world, self.group, self.rank = world, group, rank
        self.runtime = world.runtime
        self.members = sorted(members)
        self._sequence = 0
        self._groups_made = 0

    def new_group(
        self, members: Sequence[int] | None = None, *, backend: str | None = "gloo"
    ) -> SimCommunicator | None:
        if self.group != ():
            raise RuntimeError("make groups from the world communicator (as torch.distributed requires)")
        name = (self._groups_made,)
        self._groups_made += 1
        ranks = sorted(self.members if members is None else members)
        if self.rank not in ranks:
            return None
        return SimCommunicator(self.world, group=name, members=ranks, rank=self.rank)

    def _start(self, op: str, value: Any, combine: Callable[[dict[int, Any]], Any], cost_s: float) -> Event:
        key = (self.group, self._sequence)
        self._sequence += 1
        return self.world.post(key, op, self.rank, value, self.members, combine, cost_s)

    def _sum(self, values: dict[int, Any]) -> torch.Tensor:
        total = values[self.members[0]].clone()
        for r in self.members[1:]:
            total += values[r]
        return total

    def _nbytes(self, tensor: torch.Tensor) -> int:
        """What ``tensor`` counts as on the network (its bytes, scaled: ``Network.bytes_scale``)."""
        return self.world.network.tensor_bytes(tensor.numel() * tensor.element_size())

    def all_reduce(self, tensor: torch.Tensor) -> None:
        cost = self.world.network.all_reduce_s(self._nbytes(tensor), self.size)
        # Not copied: this learner waits until every member has given its tensor and the
        # sum (a new tensor) is made, so nothing changes it in between.
        tensor.copy_(self._start("all_reduce", tensor.detach(), self._sum, cost).wait())

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        value = tensor.detach().clone() if self.rank == src else None
        cost = self.world.network.broadcast_s(self._nbytes(tensor), self.size)
        result = self._start("broadcast", value, lambda values: values[src], cost).wait()
        if self.rank != src:
            tensor.copy_(result)

    def all_gather_object(self, obj: Any) -> list[Any]:
        # Small objects (resume positions, metrics): a nominal size, not their own, which
        # would make virtual time depend on what they hold (measured seconds, say).
        cost = self.world.network.all_gather_s(OBJECT_BYTES, self.size)
        gathered = self._start(
            "all_gather_object", copy.deepcopy(obj), lambda values: [values[r] for r in self.members], cost
        ).wait()
        return copy.deepcopy(gathered)

    def barrier(self) -> Pending:
        event = self._start("barrier", None, lambda values: None, self.world.network.barrier_s(self.size))
        return _Waiting(event)

    def exchange(self, tensor: torch.Tensor, partner: int) -> Pending:
        if partner not in self.members or partner == self.rank:
            raise RuntimeError(f"learner {self.rank} cannot exchange with {partner} in group {self.members}")
        self.world.send((self.group, self.rank, partner), self.rank, tensor)
        channel = (self.group, partner, self.rank)
        index, event = self.world.receive(channel)

        def received(value: torch.Tensor) -> torch.Tensor:
            self.world.delivered(channel, index)
            return value

        return _Waiting(event, received)

    def data_parallel(self, model: nn.Module, *, ordered_sum: bool = False) -> nn.Module:
        return _SimDataParallel(model, self)  # adds in rank order either way


class _SimDataParallel(nn.Module):
    """DDP's contract in virtual time: once ``backward()`` has accumulated the gradient of
    every parameter, they are all-reduced as one flat bucket (DDP's buckets are one on
    these models) and replaced by their mean. As DDP does, each learner's contribution is
    divided by the group size before the sum."""

    def __init__(self, module: nn.Module, comm: SimCommunicator) -> None:
        super().__init__()
        self.module, self.comm = module, comm
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._ready = 0
        for param in self._params:
            if param.device.type != "cpu":
                raise RuntimeError("the simulator's data_parallel takes CPU models only")
            param.register_post_accumulate_grad_hook(self._accumulated)

    def _accumulated(self, param: torch.Tensor) -> None:
        self._ready += 1
        if self._ready < len(self._params):
            return
        self._ready = 0
        grads: list[torch.Tensor] = []
        for p in self._params:
            assert p.grad is not None  # every hook fired: every gradient is there
            grads.append(p.grad)
        flat = torch.cat([g.reshape(-1) for g in grads]).div_(self.comm.size)
        self.comm.all_reduce(flat)
        offset = 0  # the gradients become views of the mean (no copy back)
        for p in self._params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p)
            offset += n

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._ready:  # as DDP: every parameter that requires a gradient must get one
            missed = [n for n, p in self.module.named_parameters() if p.requires_grad and p.grad is None]
            raise RuntimeError(
                f"the last backward pass gave no gradient to {missed or 'some parameters'}: "
                "mark parameters the loss does not use with requires_grad_(False)"
            )
        return self.module(*args, **kwargs)
