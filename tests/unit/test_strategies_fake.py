"""The strategies' arithmetic on the in-process fake communicator: N simulated learners as
threads of this process, no torchrun (the real path: tests/integration/test_distributed.py)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from asrkit.distributed.config import StrategyConfig, strategy_config
from asrkit.distributed.fake import FakeCommunicator, FakeWorld, FakeWorldError
from asrkit.distributed.flat import flatten
from asrkit.distributed.strategies import join
from asrkit.training.strategy import TrainState

pytestmark = pytest.mark.timeout(60)


# -- the fake itself -------------------------------------------------------------------


def test_collectives_and_exchange() -> None:
    def learner(comm: FakeCommunicator) -> tuple:
        total = torch.tensor([float(comm.rank + 1)])
        comm.all_reduce(total)
        value = torch.tensor([10.0 * comm.rank])
        comm.broadcast(value, src=2)
        names = comm.all_gather_object(f"r{comm.rank}")
        theirs = comm.exchange(torch.tensor([float(comm.rank)]), comm.rank ^ 1).wait()
        odd = comm.new_group([1, 3])
        odd_sum = None
        if odd is not None:
            odd_sum = torch.tensor([float(comm.rank)])
            odd.all_reduce(odd_sum)
        comm.barrier().wait()
        return float(total), float(value), names, float(theirs), None if odd_sum is None else float(odd_sum)

    results = FakeWorld(4).run(learner)
    assert [r[0] for r in results] == [10.0] * 4
    assert [r[1] for r in results] == [20.0] * 4
    assert all(r[2] == ["r0", "r1", "r2", "r3"] for r in results)
    assert [r[3] for r in results] == [1.0, 0.0, 3.0, 2.0]
    assert [r[4] for r in results] == [None, 4.0, None, 4.0]


def test_a_learner_that_skips_a_collective_fails_every_learner_instead_of_hanging() -> None:
    def learner(comm: FakeCommunicator) -> None:
        if comm.rank == 0:
            comm.all_reduce(torch.zeros(1))

    with pytest.raises(FakeWorldError, match="all_reduce #0 on group world waited"):
        FakeWorld(2, timeout_s=0.2).run(learner)


def test_an_error_in_one_learner_is_raised_and_stops_the_others() -> None:
    def learner(comm: FakeCommunicator) -> None:
        if comm.rank == 1:
            raise ValueError("boom")
        comm.all_reduce(torch.zeros(1))

    with pytest.raises(ValueError, match="boom"):
        FakeWorld(2, timeout_s=5).run(learner)


# -- the strategies --------------------------------------------------------------------


def _model(seed: int = 0) -> nn.Module:
    """The same small model in every learner thread (a local generator: the global RNG is
    shared by the threads)."""
    model = nn.Linear(3, 2)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    return model


def _perturb(model: nn.Module, rank: int) -> None:
    """Different weights per learner (after the strategy's initial broadcast)."""
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(torch.full_like(p, float(rank * rank + i)))


def _step(hooks, model: nn.Module, state: TrainState, optimizer=None, loss_of=None) -> None:
    """One step as :meth:`Trainer.fit` takes it (lr 0 without an optimizer)."""
    hooks.before_step(state)
    if optimizer is not None:
        optimizer.zero_grad()
        loss_of(model).backward()
        hooks.after_backward(model, state)
        optimizer.step()
    state.step += 1
    state.samples += 1
    hooks.after_step(model, state)


def _mixing_run(cfg: StrategyConfig, learners: int, steps: int) -> tuple[list[torch.Tensor], ...]:
    """lr 0, different starting weights: (starts, ends, metrics) per learner."""

    def learner(comm: FakeCommunicator):
        hooks, _ = join(cfg, comm, seed=3)
        model = _model()
        wrapped = hooks.wrap(model, resumed=False)
        _perturb(model, comm.rank)
        start = flatten(list(model.parameters()))
        state = TrainState()
        for _ in range(steps):
            _step(hooks, wrapped, state)
            _await_rounds(hooks, state.step // cfg.averaging_period)
        hooks.finish(wrapped, state)
        return start, flatten(list(model.parameters())), hooks.final_metrics

    out = FakeWorld(learners).run(learner)
    return [o[0] for o in out], [o[1] for o in out], [o[2] for o in out]


def _await_rounds(hooks, rounds: int) -> None:
    """ADPSGD's thread is not tied to steps, and steps without compute outrun it: wait until
    it has averaged once per ``averaging_period`` steps, so that the number of rounds is known."""
    deadline = time.monotonic() + 10
    while hooks.averager is not None and hooks.averager.rounds < rounds:
        assert hooks.averager.error is None, hooks.averager.error
        assert time.monotonic() < deadline, "the averaging thread stalled"
        time.sleep(0.0005)


def _spread(xs: list[torch.Tensor]) -> float:
    mean = torch.stack(xs).mean(0)
    return max(float((x - mean).norm()) for x in xs)


@pytest.mark.parametrize("learners, pattern", [(2, "fixed"), (4, "fixed"), (4, "random")])
def test_adpsgd_preserves_the_mean_and_reaches_consensus(learners: int, pattern: str) -> None:
    cfg = strategy_config("adpsgd", learners=learners, pattern=pattern, final_consensus=False, timeout_s=20)
    starts, ends, metrics = _mixing_run(cfg, learners, steps=40)
    assert torch.allclose(torch.stack(ends).mean(0), torch.stack(starts).mean(0), atol=1e-5)
    assert _spread(starts) > 1.0
    assert _spread(ends) < 1e-3 * _spread(starts)
    detail = metrics[0]["learners_detail"]
    assert all(m["averagings"] >= 40 for m in detail)


def test_adpsgd_final_consensus_leaves_one_model() -> None:
    cfg = strategy_config("adpsgd", learners=4, pattern="fixed", averaging_period=1000, timeout_s=20)
    starts, ends, _ = _mixing_run(cfg, 4, steps=3)
    mean = torch.stack(starts).mean(0)
    for end in ends:
        assert torch.allclose(end, mean, atol=1e-5)


@pytest.mark.parametrize("staleness", [0, 1])
def test_delay_by_one_follows_its_recurrence(staleness: int) -> None:
    """Two learners, lr 0: the difference d obeys d(k+1) = d(k) - 2w d(k-s) (the exchange
    started at step k-s is merged at the end of step k; none before step s), and the mean
    never moves."""
    cfg = strategy_config(
        "delay_by_one", learners=2, pattern="fixed", staleness=staleness, final_consensus=False
    )
    steps = 6
    traces: list[list[torch.Tensor]] = [[], []]

    def learner(comm: FakeCommunicator):
        hooks, _ = join(cfg, comm, seed=0)
        model = _model()
        wrapped = hooks.wrap(model, resumed=False)
        _perturb(model, comm.rank)
        state = TrainState()
        traces[comm.rank].append(flatten(list(model.parameters())))
        for _ in range(steps):
            _step(hooks, wrapped, state)
            traces[comm.rank].append(flatten(list(model.parameters())))
        hooks.finish(wrapped, state)
        return hooks.final_metrics

    FakeWorld(2).run(learner)
    w = cfg.merge_weight
    d = [a - b for a, b in zip(traces[0], traces[1], strict=True)]
    expected = [d[0]]
    for k in range(steps):
        merged = 2 * w * expected[k - staleness] if k >= staleness else 0.0
        expected.append(expected[k] - merged)
        assert torch.allclose(d[k + 1], expected[k + 1], atol=1e-5), k
    means = [(a + b) / 2 for a, b in zip(traces[0], traces[1], strict=True)]
    assert all(torch.allclose(m, means[0], atol=1e-5) for m in means)
    # Damped (w = 1/8 with staleness 1, 1/2 without): the difference shrinks.
    assert float(d[-1].norm()) < 0.5 * float(d[0].norm())


def test_sync_gradient_averaging_equals_one_process_on_the_global_batch() -> None:
    torch.manual_seed(1)
    inputs, targets = torch.randn(4, 3), torch.randn(4, 2)

    def loss_of(rows: slice):
        return lambda m: ((m(inputs[rows]) - targets[rows]) ** 2).sum() / 4 * 2

    def learner(comm: FakeCommunicator):
        hooks, _ = join(strategy_config("sync", learners=2), comm, seed=0)
        model = _model()
        wrapped = hooks.wrap(model, resumed=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        state = TrainState()
        for _ in range(3):
            _step(hooks, wrapped, state, optimizer, loss_of(slice(comm.rank, 4, 2)))
        hooks.finish(wrapped, state)
        return flatten(list(model.parameters())), hooks.final_metrics

    results = FakeWorld(2).run(learner)
    one = _model()
    optimizer = torch.optim.SGD(one.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        ((one(inputs) - targets) ** 2).sum().div(4).backward()
        optimizer.step()
    assert torch.equal(results[0][0], results[1][0])
    assert torch.allclose(results[0][0], flatten(list(one.parameters())), atol=1e-6)


def test_hybrid_groups_stay_identical_while_leaders_mix() -> None:
    cfg = strategy_config(
        "hybrid", learners=4, group_size=2, pattern="random", final_consensus=False, timeout_s=20
    )
    torch.manual_seed(2)
    inputs, targets = torch.randn(8, 3), torch.randn(8, 2)

    def learner(comm: FakeCommunicator):
        hooks, _ = join(cfg, comm, seed=0)
        model = _model()
        wrapped = hooks.wrap(model, resumed=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        state = TrainState(batch_utts=2)  # the group's batch (no data needed here)
        rows = slice(comm.rank, 8, 4)
        trace = []
        for _ in range(5):
            _step(hooks, wrapped, state, optimizer, lambda m: ((m(inputs[rows]) - targets[rows]) ** 2).sum())
            trace.append(flatten(list(model.parameters())))
        hooks.finish(wrapped, state)
        return trace, hooks.final_metrics

    results = FakeWorld(4).run(learner)
    traces = [r[0] for r in results]
    for step in range(5):  # members of a group take identical steps
        assert torch.equal(traces[0][step], traces[1][step])
        assert torch.equal(traces[2][step], traces[3][step])
    assert not torch.equal(traces[0][0], traces[2][0])  # the groups saw different data
    detail = results[0][1]["learners_detail"]
    assert detail[0]["averagings"] > 0 and detail[1]["averagings"] == 0  # leaders average


def test_hybrid_leaders_mix_the_groups_and_keep_the_mean() -> None:
    """lr 0, the two groups start apart: the leaders' averaging, handed to each group,
    brings all four replicas together without moving their mean."""
    cfg = strategy_config("hybrid", learners=4, group_size=2, final_consensus=False, timeout_s=20)

    def learner(comm: FakeCommunicator):
        hooks, _ = join(cfg, comm, seed=0)
        model = _model()
        wrapped = hooks.wrap(model, resumed=False)
        with torch.no_grad():  # one offset per group, after the initial broadcast
            for p in model.parameters():
                p.add_(float(comm.rank // 2) * 4.0)
        start = flatten(list(model.parameters()))
        state = TrainState(batch_utts=2)
        for _ in range(20):
            _step(hooks, wrapped, state)
            _await_rounds(hooks, state.step)
        hooks.finish(wrapped, state)
        return start, flatten(list(model.parameters()))

    results = FakeWorld(4).run(learner)
    starts, ends = [r[0] for r in results], [r[1] for r in results]
    assert torch.allclose(torch.stack(ends).mean(0), torch.stack(starts).mean(0), atol=1e-5)
    assert _spread(starts) > 1.0 and _spread(ends) < 1e-3 * _spread(starts)
    assert torch.equal(ends[0], ends[1]) and torch.equal(ends[2], ends[3])
