"""The papers' optimizer recipe (docs/distributed-training.md): the learning rate scaled
linearly with the global batch, warm-up over the first epoch counted in samples, x 1/sqrt(2)
per epoch late; SGD momentum buffers local to each learner, never averaged; communication
charged at another model's scale; and the warning for Adam under weight averaging."""

from __future__ import annotations

import math

import pytest
import torch

from asrkit.config import compose, to_object
from asrkit.distributed.config import strategy_config
from asrkit.distributed.flat import flatten
from asrkit.distributed.strategies import join
from asrkit.errors import ConfigError
from asrkit.learner import averaging_optimizer_advice
from asrkit.sim.clock import Clock
from asrkit.sim.comm import SimWorld
from asrkit.sim.network import NETWORKS, Network
from asrkit.training.config import OptimConfig, ScheduleConfig
from asrkit.training.schedule import LRSchedule

pytestmark = pytest.mark.timeout(120)


def test_the_learning_rate_follows_the_global_batch_linearly_or_by_its_square_root() -> None:
    sgd = OptimConfig(name="sgd", lr=0.1, base_batch=32)
    assert sgd.peak_lr(32) == pytest.approx(0.1)
    assert sgd.peak_lr(128) == pytest.approx(0.4)  # 4x the batch, 4x the rate
    assert sgd.peak_lr(8) == pytest.approx(0.025)
    adam = OptimConfig(name="adam", lr=3e-3, base_batch=8, lr_scaling="sqrt")
    assert adam.peak_lr(128) == pytest.approx(3e-3 * 4)  # 16x the batch, 4x the rate
    assert OptimConfig(lr=1e-3).peak_lr(1024) == 1e-3  # no base batch: the rate as given
    with pytest.raises(ConfigError, match="optim.lr_scaling='cube'"):
        OptimConfig(lr_scaling="cube").check()
    with pytest.raises(ConfigError, match="optim.base_batch=-1"):
        OptimConfig(base_batch=-1).check()


def test_warm_up_spans_one_epoch_of_samples_at_every_batch_then_holds_then_decays() -> None:
    cfg = ScheduleConfig(warmup_epochs=1, anneal="exponential", decay=0.7071, decay_start_epoch=3)
    epochs = 5
    for steps_per_epoch in (80, 20, 5):  # batch 32, 128, 512 over the same 2,560 samples
        schedule = LRSchedule(
            cfg, peak_lr=1.0, total_steps=epochs * steps_per_epoch, steps_per_epoch=steps_per_epoch
        )
        lrs = [schedule(step) for step in range(epochs * steps_per_epoch)]
        # Linear ramp: after a quarter of the epoch's samples, a quarter of the rate.
        quarter = steps_per_epoch // 4
        assert lrs[quarter - 1] == pytest.approx(quarter / steps_per_epoch)
        assert all(b > a for a, b in zip(lrs[: steps_per_epoch - 1], lrs[1:steps_per_epoch], strict=True))
        # Epoch 2: held at the peak; epochs 3-5: x 0.7071 each.
        per_epoch = [lrs[e * steps_per_epoch + steps_per_epoch // 2] for e in range(epochs)]
        assert per_epoch[1] == 1.0
        assert per_epoch[2:] == pytest.approx([0.7071, 0.7071**2, 0.7071**3])
    # A learner that does not step in lock-step reads the schedule at its global progress,
    # in its own steps per epoch: a fractional position lands on the ramp too.
    schedule = LRSchedule(cfg, peak_lr=2.0, total_steps=100, steps_per_epoch=20)
    assert schedule(9.0) == pytest.approx(2.0 * 10 / 20)
    # warmup_epochs=0 keeps the warm-up in steps.
    steps = LRSchedule(
        ScheduleConfig(warmup_steps=10, anneal="none"), peak_lr=1.0, total_steps=100, steps_per_epoch=50
    )
    assert steps(4) == pytest.approx(0.5) and steps(50) == 1.0


def _trainer(tmp_path, rank: int, comm, strategy, optim: OptimConfig, *, max_batch: int = 4, epochs: int = 2):
    from tests.unit.test_ce_training import tiny_ce_trainer

    return tiny_ce_trainer(tmp_path, rank, comm, strategy, optim, max_batch=max_batch, epochs=epochs)


def test_the_trainer_steps_at_the_rate_scaled_to_its_global_batch(tmp_path) -> None:
    optim = OptimConfig(name="sgd", lr=0.05, base_batch=2)
    trainer = _trainer(tmp_path, 0, None, None, optim, max_batch=8, epochs=1)
    trainer.fit()
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    "name, own",
    [
        ("adpsgd", {"pattern": "fixed"}),
        ("adpsgd", {"pattern": "random"}),
        ("delay_by_one", {}),
        ("hybrid", {"group_size": 2}),
    ],
)
def test_weight_averaging_never_touches_the_momentum_buffers(tmp_path, name: str, own: dict) -> None:
    """Each learner's SGD momentum is its own: the strategy's averaging after a step moves
    the weights and leaves every momentum buffer exactly as the optimizer left it."""
    learners = 4 if name == "hybrid" else 2
    cfg = strategy_config(name, learners=learners, **own)
    clock = Clock()
    world = SimWorld(clock, learners, NETWORKS["infiniband"])
    optim = OptimConfig(name="sgd", lr=0.05, momentum=0.9, nesterov=True)

    def learner(rank: int):
        strategy, comm = join(cfg, world.communicator(rank), seed=0)
        trainer = _trainer(tmp_path, rank, comm, strategy, optim, max_batch=2 * learners, epochs=4)
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        # Compute takes virtual time, as in a simulation: the averaging runs meanwhile.
        trainer.model.register_forward_pre_hook(lambda module, args: clock.advance(0.01))
        checked, moved = [0], [0]

        def watched(hook):
            def run(*args):
                state = trainer.optimizer.state
                buffers = [state[p]["momentum_buffer"].clone() for p in params if p in state]
                before = flatten(params).clone()
                hook(*args)
                after = [state[p]["momentum_buffer"] for p in params if p in state]
                assert len(after) == len(buffers)
                assert all(torch.equal(a, b) for a, b in zip(buffers, after, strict=True))
                checked[0] += bool(buffers)
                moved[0] += int(bool(buffers) and not torch.equal(before, flatten(params)))

            return run

        # Averaging is applied in these hooks (before a step, after it, at the end).
        strategy.before_step = watched(strategy.before_step)
        strategy.after_step = watched(strategy.after_step)
        trainer.fit()
        return checked[0], moved[0]

    for rank in range(learners):
        clock.spawn(lambda rank=rank: learner(rank), name=f"learner-{rank}")
    results = clock.run()
    assert all(checked > 0 for checked, _ in results)
    # The check could fail: averaging did move the weights after some steps.
    assert sum(moved for _, moved in results) > 0


def test_communication_is_charged_at_the_chosen_scale_on_the_virtual_clock() -> None:
    """A toy link of 1 byte/us and 1 ms latency: a 250-float (1,000-byte) tensor charged
    at 10x takes 1 ms + 10 ms to arrive; an all-reduce of it among 2 takes 2 x (1 ms + 5 ms)."""
    toy = Network("toy", bandwidth_gbps=0.008, latency_us=1000.0, bytes_scale=10.0)
    clock = Clock()
    world = SimWorld(clock, 2, toy)

    def learner(rank: int):
        comm = world.communicator(rank)
        received = comm.exchange(torch.full((250,), float(rank)), 1 - rank).wait()
        arrived = clock.now()
        total = torch.ones(250)
        comm.all_reduce(total)
        return float(received[0]), arrived, clock.now() - arrived, float(total[0])

    for rank in range(2):
        clock.spawn(lambda rank=rank: learner(rank), name=f"learner-{rank}")
    results = clock.run()
    assert [r[0] for r in results] == [1.0, 0.0]
    assert [r[1] for r in results] == pytest.approx([0.011, 0.011])
    assert [r[2] for r in results] == pytest.approx([2 * (0.001 + 0.005)] * 2)
    assert [r[3] for r in results] == [2.0, 2.0]
    assert world.bytes_sent == [10_000, 10_000]  # the exchange's bytes, as charged


def test_a_communication_ratio_gives_the_scale_that_makes_an_exchange_that_long() -> None:
    ib = NETWORKS["infiniband"]
    model_bytes, step_s = 3_200_000, 0.05
    at = ib.at_ratio(0.15, model_bytes=model_bytes, step_s=step_s)
    assert at.transfer_s(at.tensor_bytes(model_bytes)) == pytest.approx(0.15 * step_s, rel=1e-6)
    assert at.bytes_scale == pytest.approx((0.0075 - 2e-6) * 12.5e9 / model_bytes)
    assert at.name == "infiniband@ratio0.15" and at.latency_us == ib.latency_us
    with pytest.raises(ValueError, match="latency"):
        NETWORKS["10gbe"].at_ratio(1e-6, model_bytes=model_bytes, step_s=step_s)
    with pytest.raises(ValueError, match="bytes_scale"):
        Network("bad", bandwidth_gbps=1.0, latency_us=1.0, bytes_scale=math.nan)


@pytest.mark.parametrize(
    "overrides, warned",
    [
        (["strategy=adpsgd", "strategy.learners=16", "train.max_batch=64"], True),  # Adam, 4 each
        (["strategy=delay_by_one", "strategy.learners=16", "train.max_batch=64"], True),
        (["strategy=hybrid", "strategy.learners=16", "strategy.group_size=2", "train.max_batch=64"], True),
        (["strategy=adpsgd", "strategy.learners=16", "train.max_batch=64", "optim=sgd"], False),
        (["strategy=sync", "strategy.learners=16", "train.max_batch=64"], False),  # one optimizer step
        (["strategy=adpsgd", "strategy.learners=4", "train.max_batch=64"], False),  # 16 each
    ],
)
def test_adam_under_weight_averaging_at_a_few_utterances_per_learner_is_warned(
    overrides: list[str], warned: bool
) -> None:
    cfg = to_object(compose(overrides))
    advice = averaging_optimizer_advice(cfg, cfg.strategy.learners)
    assert (advice is not None) == warned
    if warned:
        assert "docs/distributed-training.md" in advice and "docs/study.md" in advice
        per_learner = 64 // 16 * (2 if cfg.strategy.name == "hybrid" else 1)
        assert f"strategy={cfg.strategy.name}" in advice and f"steps on {per_learner} utterance" in advice


def test_a_loss_that_is_not_a_number_stops_training_with_the_step_and_a_fix(tmp_path) -> None:
    from asrkit.errors import TrainingDiverged

    trainer = _trainer(
        tmp_path, 0, None, None, OptimConfig(name="sgd", lr=math.inf, momentum=0.9), max_batch=2, epochs=3
    )
    with pytest.raises(TrainingDiverged, match="lower optim.lr") as stopped:
        trainer.fit()
    assert stopped.value.step >= 1


@pytest.mark.parametrize(
    "name, own, learners, share",
    [
        ("sync", {}, 4, 1.0),
        ("adpsgd", {}, 4, 0.25),
        ("delay_by_one", {}, 4, 0.25),
        ("hybrid", {"group_size": 2}, 4, 0.5),
    ],
)
def test_a_learner_clips_its_gradient_at_the_global_threshold_for_its_share(
    tmp_path, name: str, own: dict, learners: int, share: float
) -> None:
    """Clipping at train.clip_grad_norm / sqrt(share): a learner's gradient of 1/n of the
    batch is sqrt(n) noisier, and at the global threshold its steps would be clipped more
    often than SYNC's one step on the mean."""
    from unittest import mock

    cfg = strategy_config(name, learners=learners, **own)
    clock = Clock()
    world = SimWorld(clock, learners, NETWORKS["infiniband"])
    limits: list[float] = []
    real = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *args, **kwargs):
        limits.append(float(max_norm))
        return real(params, max_norm, *args, **kwargs)

    def learner(rank: int):
        strategy, comm = join(cfg, world.communicator(rank), seed=0)
        trainer = _trainer(
            tmp_path, rank, comm, strategy, OptimConfig(name="sgd", lr=0.01), max_batch=8, epochs=1
        )
        trainer.cfg.clip_grad_norm = 5.0
        assert strategy.gradient_share == share
        trainer.fit()

    with mock.patch("torch.nn.utils.clip_grad_norm_", spy):
        for rank in range(learners):
            clock.spawn(lambda rank=rank: learner(rank), name=f"learner-{rank}")
        clock.run()
    assert limits and all(limit == pytest.approx(5.0 / share**0.5) for limit in limits)
