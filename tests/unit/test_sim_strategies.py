"""The real strategy classes on the simulator's communicator and virtual clock: ADPSGD's
averaging thread runs as a clock task, the mean is preserved, runs repeat bitwise, and a
straggler costs lock-step learners what the arithmetic says while ADPSGD's learners go on."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from asrkit.distributed.config import StrategyConfig, strategy_config
from asrkit.distributed.flat import flatten
from asrkit.distributed.strategies import join
from asrkit.sim.clock import Clock
from asrkit.sim.comm import SimWorld
from asrkit.sim.network import NETWORKS
from asrkit.training.strategy import TrainState

pytestmark = pytest.mark.timeout(60)

STEP_S = 0.1  # virtual seconds of compute per step


def _model() -> nn.Module:
    model = nn.Linear(3, 2)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    return model


def _run(
    cfg: StrategyConfig,
    learners: int,
    steps: int,
    *,
    lr: float = 0.0,
    slow: dict[int, float] | None = None,
    perturb: bool = True,
):
    """Each learner: its own weights (perturbed after the starting broadcast), ``steps``
    SGD steps on its own data, ``STEP_S`` each (times ``slow[rank]``). Returns per learner
    (start, end, virtual end time, metrics)."""
    clock = Clock()
    world = SimWorld(clock, learners, NETWORKS["10gbe"])

    def learner(rank: int):
        comm = world.communicator(rank)
        strategy, _ = join(cfg, comm, seed=3)
        model = _model()
        wrapped = strategy.wrap(model, resumed=False)
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                # HYBRID: a group's members start alike (its DDP keeps them so).
                who = rank // cfg.group_size if hasattr(cfg, "group_size") else rank
                p.add_(float(who * who + i) if perturb else 0.0)
        start = flatten(list(model.parameters()))
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        data = torch.randn(steps, 4, 3, generator=torch.Generator().manual_seed(100 + rank))
        state = TrainState()
        for k in range(steps):
            strategy.before_step(state)
            clock.advance(STEP_S * (slow or {}).get(rank, 1.0))
            optimizer.zero_grad()
            wrapped(data[k]).pow(2).mean().backward()
            strategy.after_backward(model, state)
            optimizer.step()
            state.step += 1
            state.samples += 4
            strategy.after_step(model, state)
        metrics = strategy.finish(wrapped, state)
        return start, flatten(list(model.parameters())), clock.now(), metrics

    for rank in range(learners):
        clock.spawn(lambda rank=rank: learner(rank), name=f"learner-{rank}")
    return clock.run()


@pytest.mark.parametrize("learners, pattern", [(2, "fixed"), (4, "fixed"), (8, "random")])
def test_adpsgd_on_the_clock_preserves_the_mean_and_reaches_consensus(learners: int, pattern: str) -> None:
    cfg = strategy_config("adpsgd", learners=learners, pattern=pattern, final_consensus=False)
    out = _run(cfg, learners, steps=60)
    starts, ends = [o[0] for o in out], [o[1] for o in out]
    assert torch.allclose(torch.stack(ends).mean(0), torch.stack(starts).mean(0), atol=1e-5)
    spread = lambda xs: max(float((x - torch.stack(xs).mean(0)).norm()) for x in xs)  # noqa: E731
    assert spread(starts) > 1.0 and spread(ends) < 1e-3 * spread(starts)
    detail = out[0][3]["learners_detail"]
    assert all(m["averagings"] >= 60 for m in detail)


def test_a_simulation_repeats_bitwise() -> None:
    cfg = strategy_config("adpsgd", learners=4, pattern="random", final_consensus=False)
    first = _run(cfg, 4, steps=30, lr=0.05, slow={2: 3.0})
    second = _run(cfg, 4, steps=30, lr=0.05, slow={2: 3.0})
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a[1], b[1])
        assert a[2] == b[2]
    assert not torch.equal(first[0][1], first[1][1])  # they did train, each its own way


def test_a_straggler_holds_up_sync_but_not_adpsgd() -> None:
    """4 learners, 40 steps of 0.1 s, learner 3 three times slower. SYNC: every learner ends
    with the straggler, after 40 x 0.3 s plus communication. ADPSGD: learner 0 is paced by
    its own steps and pairwise exchanges, so it finishes its 40 steps long before."""
    sync = _run(strategy_config("sync", learners=4), 4, steps=40, lr=0.05, slow={3: 3.0})
    sync_end = [o[2] for o in sync]
    assert min(sync_end) >= 40 * 0.3
    adpsgd = _run(strategy_config("adpsgd", learners=4, pattern="fixed"), 4, steps=40, lr=0.05, slow={3: 3.0})
    adpsgd_samples = [m["samples"] for m in adpsgd[0][3]["learners_detail"]]
    assert adpsgd_samples == [160] * 4
    # Learner 0's own steps ended far earlier: its metrics' window ends at its last step.
    windows = [m["window"][1] for m in adpsgd[0][3]["learners_detail"]]
    assert windows[0] < 0.6 * windows[3]
    assert windows[3] == pytest.approx(40 * 0.3, rel=0.05)


def test_sync_on_the_clock_averages_gradients() -> None:
    out = _run(strategy_config("sync", learners=4), 4, steps=5, lr=0.1, perturb=False)
    ends = [o[1] for o in out]
    assert all(torch.equal(e, ends[0]) for e in ends[1:])  # replicas stay identical
    # ... and equal one process taking the same steps on the global batch's mean gradient.
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [torch.randn(5, 4, 3, generator=torch.Generator().manual_seed(100 + r)) for r in range(4)]
    for k in range(5):
        optimizer.zero_grad()
        torch.stack([model(d[k]).pow(2).mean() for d in data]).mean().backward()
        optimizer.step()
    assert torch.allclose(ends[0], flatten(list(model.parameters())), atol=1e-6)


@pytest.mark.parametrize(
    "cfg",
    [
        strategy_config("delay_by_one", learners=4, pattern="fixed", staleness=1, final_consensus=False),
        strategy_config("delay_by_one", learners=4, pattern="random", staleness=0, final_consensus=False),
        strategy_config("hybrid", learners=8, group_size=2, final_consensus=False),
    ],
    ids=["delay_by_one-1", "overlapped-0", "hybrid"],
)
def test_every_averaging_strategy_runs_on_the_clock_keeps_the_mean_and_repeats(cfg: StrategyConfig) -> None:
    learners = cfg.learners
    first = _run(cfg, learners, steps=40, slow={1: 2.0})
    starts, ends = [o[0] for o in first], [o[1] for o in first]
    assert torch.allclose(torch.stack(ends).mean(0), torch.stack(starts).mean(0), atol=1e-5)
    spread = lambda xs: max(float((x - torch.stack(xs).mean(0)).norm()) for x in xs)  # noqa: E731
    assert spread(ends) < 0.1 * spread(starts)
    second = _run(cfg, learners, steps=40, slow={1: 2.0})
    assert all(torch.equal(a[1], b[1]) and a[2] == b[2] for a, b in zip(first, second, strict=True))


def test_sync_trains_a_frame_ce_model_whose_ctc_head_gets_no_gradient(tmp_path) -> None:
    """A CE model's CTC head is not in the loss: the trainer marks it so, or a data-parallel
    wrapper (DDP, or the simulator's) would wait for its gradients forever."""
    from asrkit.training.config import OptimConfig, ScheduleConfig
    from tests.unit.test_ce_training import tiny_ce_trainer

    clock = Clock()
    world = SimWorld(clock, 2, NETWORKS["infiniband"])

    def learner(rank: int):
        strategy, comm = join(strategy_config("sync", learners=2), world.communicator(rank), seed=0)
        trainer = tiny_ce_trainer(
            tmp_path,
            rank,
            comm,
            strategy,
            OptimConfig(lr=1e-2),
            epochs=3,
            clip=5.0,
            schedule=ScheduleConfig(warmup_steps=0),
        )
        trainer.fit()
        model = trainer.model
        return flatten(list(model.parameters())), [p.requires_grad for p in model.ctc_head.parameters()]

    for rank in range(2):
        clock.spawn(lambda rank=rank: learner(rank), name=f"learner-{rank}")
    results = clock.run()
    assert torch.equal(results[0][0], results[1][0])
    assert results[0][1] == [False, False]


@pytest.mark.parametrize("pattern", ["fixed", "random"])
def test_adpsgd_progress_never_runs_ahead_of_the_samples_processed(pattern: str) -> None:
    """Global epochs end on the learners' progress: it may lag the samples all learners
    have processed (by what happened since the last all-reduce) but never exceed them, even
    when a straggler makes the step rate change. (An extrapolated estimate did, and two
    learners ended their epochs early.)"""
    learners, steps = 4, 30
    clock = Clock()
    world = SimWorld(clock, learners, NETWORKS["10gbe"])
    processed = [0] * learners  # the truth, per learner (clock tasks run one at a time)
    lag = []

    def learner(rank: int) -> None:
        cfg = strategy_config("adpsgd", learners=learners, pattern=pattern)
        strategy, _ = join(cfg, world.communicator(rank), seed=3)
        model = _model()
        strategy.wrap(model, resumed=False)
        state = TrainState()
        for k in range(steps):
            strategy.before_step(state)
            # Learner 3 straggles in the second half only: the step rate drops mid-run.
            clock.advance(STEP_S * (4.0 if rank == 3 and k >= steps // 2 else 1.0))
            state.step += 1
            state.samples += 4
            processed[rank] += 4
            strategy.after_step(model, state)
            progress = strategy.progress.samples()
            assert progress <= sum(processed), (rank, k, progress, processed)
            lag.append(sum(processed) - progress)
        strategy.finish(model, state)

    for rank in range(learners):
        clock.spawn(lambda rank=rank: learner(rank), name=f"learner-{rank}")
    clock.run()
    assert sum(processed) == learners * steps * 4
    # Behind by at most what the other learners do in two of the straggler's steps (its
    # all-reduce comes after its step; the others' counts were taken as they entered it).
    assert 0 < max(lag) <= 2 * 4 * (learners - 1) * 4, max(lag)
