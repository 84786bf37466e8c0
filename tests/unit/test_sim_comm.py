"""The simulated network: collectives and exchanges give the real results and take the
virtual time the alpha-beta model says, stragglers hold up exactly whom they should, and a
collective called out of order stops the simulation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from asrkit.sim.clock import Clock, SimDeadlock
from asrkit.sim.comm import SimWorld
from asrkit.sim.network import NETWORKS, Network

#: A slow, simple link: 1 byte per microsecond (8 Mbit/s), 1 ms per message.
SLOW = Network("toy", bandwidth_gbps=0.008, latency_us=1000.0)


def _run(size: int, learner, network: Network = SLOW) -> list:
    clock = Clock()
    world = SimWorld(clock, size, network)
    for rank in range(size):
        comm = world.communicator(rank)
        clock.spawn(lambda comm=comm: learner(clock, comm), name=f"learner-{rank}")
    return clock.run()


def test_the_alpha_beta_model() -> None:
    net = SLOW
    assert net.transfer_s(1000) == pytest.approx(0.001 + 0.001)
    # ring all-reduce of 4000 bytes among 4: 6 messages of 1000 bytes
    assert net.all_reduce_s(4000, 4) == pytest.approx(6 * (0.001 + 0.001))
    assert net.broadcast_s(1000, 8) == pytest.approx(3 * 0.002)
    assert net.all_gather_s(1000, 4) == pytest.approx(3 * 0.002)
    assert net.barrier_s(5) == pytest.approx(3 * 0.001)
    assert net.all_reduce_s(10**6, 1) == 0.0
    ib = NETWORKS["infiniband"]
    assert ib.transfer_s(12_500_000) == pytest.approx(2e-6 + 1e-3)  # 100 Gbit/s
    with pytest.raises(ValueError, match="bandwidth_gbps"):
        Network("bad", bandwidth_gbps=0.0, latency_us=1.0)


def test_an_all_reduce_sums_and_completes_after_the_last_arrival() -> None:
    def learner(clock: Clock, comm) -> tuple[list[float], float]:
        clock.advance(1.0 + comm.rank)  # learner r computes 1 + r seconds
        t = torch.tensor([float(comm.rank), 1.0])
        comm.all_reduce(t)
        return t.tolist(), clock.now()

    results = _run(4, learner)
    cost = SLOW.all_reduce_s(8, 4)
    for values, when in results:
        assert values == [6.0, 4.0]
        assert when == pytest.approx(4.0 + cost)  # the slowest arrived at 4 s


def test_straggler_arithmetic_lockstep_versus_pairwise() -> None:
    """Four learners, 1 s steps, learner 3 twice as slow, 10 steps. In lock-step (a barrier
    every step) everyone moves at the straggler's pace; exchanging only within fixed pairs
    (0-1, 2-3), learners 0 and 1 are not held up at all, and 2 by its partner only."""
    steps, step_s = 10, 1.0

    def lockstep(clock: Clock, comm) -> float:
        for _ in range(steps):
            clock.advance(step_s * (2.0 if comm.rank == 3 else 1.0))
            comm.barrier().wait()
        return clock.now()

    barrier = SLOW.barrier_s(4)
    assert _run(4, lockstep) == pytest.approx([steps * (2.0 + barrier)] * 4)

    def pairwise(clock: Clock, comm) -> float:
        partner = comm.rank ^ 1
        for _ in range(steps):
            clock.advance(step_s * (2.0 if comm.rank == 3 else 1.0))
            comm.exchange(torch.zeros(250), partner).wait()  # 1000 bytes: 2 ms each way
        return clock.now()

    message = SLOW.transfer_s(1000)
    # 0 and 1: 1 s steps, each waiting for the other's 2-ms message. 3 (the straggler) never
    # waits: 2's message of each step was sent a second before 3 needs it. 2 waits for 3's
    # message every step and ends one message after 3's last step.
    finished = _run(4, pairwise)
    assert finished == pytest.approx([steps * (1.0 + message)] * 2 + [steps * 2.0 + message, steps * 2.0])


def test_an_exchange_started_before_a_step_costs_nothing_more_when_it_hides_behind_it() -> None:
    def overlapped(clock: Clock, comm) -> tuple[float, list[float]]:
        pending = comm.exchange(torch.full((250,), float(comm.rank)), comm.rank ^ 1)
        clock.advance(1.0)  # the step: longer than the 2-ms message
        theirs = pending.wait()
        return clock.now(), theirs[:1].tolist()

    assert _run(2, overlapped) == [(1.0, [1.0]), (1.0, [0.0])]


def test_broadcast_gather_and_groups() -> None:
    def learner(clock: Clock, comm) -> tuple:
        w = torch.full((3,), float(comm.rank))
        comm.broadcast(w, src=0)
        evens = comm.new_group([0, 2])
        odd_sum = None
        if evens is not None:
            t = torch.tensor([float(comm.rank + 1)])
            evens.all_reduce(t)
            odd_sum = t.item()
        return w.tolist(), comm.all_gather_object({"rank": comm.rank}), odd_sum

    results = _run(3, learner)
    for rank, (w, gathered, evens) in enumerate(results):
        assert w == [0.0, 0.0, 0.0]
        assert gathered == [{"rank": 0}, {"rank": 1}, {"rank": 2}]
        assert evens == (4.0 if rank in (0, 2) else None)


def test_collectives_called_in_different_orders_stop_the_simulation() -> None:
    def learner(clock: Clock, comm) -> None:
        if comm.rank == 0:
            comm.all_reduce(torch.zeros(1))
        else:
            comm.barrier().wait()

    with pytest.raises(RuntimeError, match="collectives in different orders"):
        _run(2, learner)


def test_a_learner_that_never_joins_is_a_deadlock() -> None:
    def learner(clock: Clock, comm) -> None:
        if comm.rank == 0:
            comm.all_reduce(torch.zeros(1))

    with pytest.raises(SimDeadlock, match="all_reduce #0 of group world"):
        _run(2, learner)


def test_data_parallel_averages_gradients_as_ddp_does() -> None:
    torch.manual_seed(0)
    reference = nn.Linear(5, 3)
    inputs = [torch.randn(4, 5) for _ in range(2)]

    def learner(clock: Clock, comm) -> list[torch.Tensor]:
        model = nn.Linear(5, 3)
        model.load_state_dict(reference.state_dict())
        wrapped = comm.data_parallel(model)
        wrapped(inputs[comm.rank]).pow(2).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    grads = _run(2, learner)
    expected = []
    for x in inputs:
        model = nn.Linear(5, 3)
        model.load_state_dict(reference.state_dict())
        model(x).pow(2).sum().backward()
        expected.append([p.grad.clone() for p in model.parameters()])
    for rank in range(2):
        for got, a, b in zip(grads[rank], expected[0], expected[1], strict=True):
            assert torch.equal(got, a / 2 + b / 2)
    assert math.isclose(SLOW.all_reduce_s(4 * (15 + 3), 2), 2 * (0.001 + 36e-6), rel_tol=1e-9)


def test_exponential_stragglers_in_lock_step_scale_each_learners_own_work() -> None:
    """16 learners, 1 s of work a step, all-reduce, then every learner's exponential extra
    (factor 2: 1 s on average). A step lasts 1 s plus the largest of 16 extras (H_16 = 3.38
    s on average). Scaling the elapsed step instead, which includes waiting for the last
    step's slowest, fed the extras back into themselves and grew them without bound."""
    from asrkit.distributed.base import Straggler
    from asrkit.distributed.config import StragglerConfig
    from asrkit.sim.runtime import ClockRuntime

    cfg, steps = StragglerConfig(mode="exponential", factor=2.0, seed=3), 40

    def learner(clock: Clock, comm) -> tuple[float, float]:
        straggler = Straggler(cfg, rank=comm.rank, world_size=16, runtime=ClockRuntime(clock))
        for step in range(steps):
            straggler.start_step()
            clock.advance(1.0)
            comm.all_reduce(torch.ones(1))
            straggler.end_step(step)
        return clock.now(), straggler.delayed_s

    results = _run(16, learner, NETWORKS["infiniband"])
    step_s = max(t for t, _ in results) / steps
    harmonic = sum(1 / k for k in range(1, 17))
    assert step_s == pytest.approx(1.0 + harmonic, rel=0.25)
    extra = sum(d for _, d in results) / (16 * steps)
    assert extra == pytest.approx(1.0, rel=0.15)  # (factor - 1) x 1 s of own work
