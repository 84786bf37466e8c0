"""Strategy settings and the straggler simulation (single process, fast)."""

from __future__ import annotations

import math

import pytest

from asrkit.comm import Runtime
from asrkit.config import compose, to_object
from asrkit.distributed.base import Straggler, steady_rate
from asrkit.distributed.config import (
    STRATEGIES,
    DelayByOneConfig,
    StragglerConfig,
    StrategyConfig,
    SyncConfig,
    strategy_config,
)
from asrkit.distributed.launch import DistContext, context_from_env, torchrun_command
from asrkit.errors import ConfigError


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        ({"name": "ring"}, "strategy.name='ring'"),
        ({"name": "single", "learners": 2}, "strategy=single runs one learner"),
        ({"name": "adpsgd", "learners": 3}, "even number of learners"),
        ({"name": "delay_by_one", "learners": 2, "staleness": 2}, "strategy.staleness=2"),
        ({"name": "hybrid", "learners": 6, "group_size": 2}, "1 or an even number of groups"),
        ({"name": "hybrid", "learners": 4, "group_size": 3}, "group_size=3 does not divide n=4"),
        ({"name": "sync", "learners": 2, "timeout_s": 0}, "timeout_s=0"),
        ({"name": "adpsgd", "learners": 2, "pattern": "star"}, "strategy.pattern='star'"),
    ],
)
def test_bad_strategy_settings_are_named(settings: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        if settings["name"] == "ring":
            StrategyConfig(**settings).check()
        else:
            strategy_config(**settings).check()
    assert needle in str(err.value)


def test_each_strategy_has_its_own_settings() -> None:
    """strategy=NAME composes NAME's dataclass: another strategy's setting is unknown, and
    every bad value is reported together."""
    cfg = to_object(compose(["strategy=delay_by_one", "strategy.staleness=0"]))
    assert isinstance(cfg.strategy, DelayByOneConfig) and cfg.strategy.merge_weight == 0.5
    assert type(to_object(compose(["strategy=sync"])).strategy) is SyncConfig
    with pytest.raises(ConfigError, match="'strategy.pattern' is not a setting of strategy=sync"):
        compose(["strategy=sync", "strategy.pattern=fixed"])
    with pytest.raises(ConfigError, match="staleness") as err:
        compose(
            ["strategy=delay_by_one", "strategy.staleness=3", "strategy.pattern=star", "strategy.learners=3"]
        )
    assert "3 bad settings" in str(err.value)
    with pytest.raises(ConfigError, match="needs the AdpsgdConfig settings"):
        StrategyConfig(name="adpsgd", learners=2).check()


def test_straggler_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="straggler.mode"):
        SyncConfig(learners=2, straggler=StragglerConfig(mode="slow")).check()
    with pytest.raises(ConfigError, match="straggler.rank=5"):
        SyncConfig(learners=2, straggler=StragglerConfig(mode="one", rank=5)).check()


def test_every_strategy_config_composes_from_the_command_line() -> None:
    cfg = to_object(compose(["strategy=hybrid", "strategy.learners=4", "strategy.group_size=2"]))
    assert (cfg.strategy.name, cfg.strategy.world_size, cfg.strategy.group_size) == ("hybrid", 4, 2)
    with pytest.raises(ConfigError, match="group_size"):
        compose(["strategy=hybrid", "strategy.group_size=3"])


class _Runtime(Runtime):
    """A runtime whose clock reads ``times`` in turn and whose sleeps are recorded; its
    learner works through every step (``work`` reads the same times)."""

    def __init__(self, times: list[float]) -> None:
        self.times, self.slept = iter(times), []
        self.works = iter(list(times))

    def now(self) -> float:
        return next(self.times)

    def work(self) -> float:
        return next(self.works)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_one_slow_learner_sleeps_factor_minus_one_times_its_step() -> None:
    cfg = StragglerConfig(mode="one", factor=3.0)
    slow_rt, fast_rt = _Runtime([10.0, 10.5]), _Runtime([20.0, 20.5])
    slow = Straggler(cfg, rank=3, world_size=4, runtime=slow_rt)
    fast = Straggler(cfg, rank=0, world_size=4, runtime=fast_rt)
    slow.start_step()
    slow.end_step(0)
    fast.start_step()
    fast.end_step(0)
    assert slow_rt.slept == [pytest.approx(1.0)] and slow.delayed_s == pytest.approx(1.0)
    assert fast_rt.slept == [] and fast.delayed_s == 0.0


def test_random_straggler_is_one_learner_per_step_agreed_by_all() -> None:
    cfg = StragglerConfig(mode="random", factor=2.0, seed=7)
    picked = set()
    for step in range(30):
        slept = []
        for rank in range(4):
            runtime = _Runtime([4.0, 5.0])  # every step "took" one second
            s = Straggler(cfg, rank=rank, world_size=4, runtime=runtime)
            s.start_step()
            s.end_step(step)
            slept += [rank] * len(runtime.slept)
        assert len(slept) == 1  # exactly one learner is slow in each step
        picked.add(slept[0])
    assert len(picked) > 1  # and it is not always the same one


def test_environment_is_read_in_one_place() -> None:
    import torch

    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "x"}
    ctx = context_from_env(torch.device("cpu"), environ=env)
    assert ctx == DistContext(rank=3, world_size=4, local_rank=1, device=torch.device("cpu"), backend="gloo")
    assert context_from_env(torch.device("cpu"), environ={}).world_size == 1
    command = torchrun_command(
        SyncConfig(learners=2, nnodes=2, node_rank=1), ["asrkit.stages.learner_process", "cfg.yaml"]
    )
    assert "--nnodes=2" in command and "--node-rank=1" in command and command[-1] == "cfg.yaml"


def test_steady_rate_spans_first_step_to_last_step_of_all_learners() -> None:
    # Learner 0 steps from t=10 to t=20 (40 samples after its first step), learner 1 from
    # t=12 to t=30 (20 samples): 60 samples over 30 - 10 = 20 s.
    learners = [
        {"window": [10.0, 20.0], "window_samples": 40},
        {"window": [12.0, 30.0], "window_samples": 20},
    ]
    assert steady_rate(learners) == pytest.approx(3.0)
    # A learner that never finished a step does not count; none at all gives no rate.
    assert steady_rate(learners + [{"window": [None, 0.0], "window_samples": 0}]) == pytest.approx(3.0)
    assert steady_rate([{"window": [None, 0.0], "window_samples": 0}]) is None
    assert steady_rate([{"window": [5.0, 5.0], "window_samples": 0}]) is None


def test_delay_by_one_merge_weight() -> None:
    assert DelayByOneConfig(staleness=0).merge_weight == 0.5
    assert DelayByOneConfig(staleness=1).merge_weight == 0.125
    assert DelayByOneConfig(staleness=1, mix_weight=0.5).merge_weight == 0.5
    with pytest.raises(ConfigError, match="mix_weight"):
        DelayByOneConfig(mix_weight=0.7).check()
    # The pair-difference recurrence d(k+1) = d(k) - 2w d(k-1): marginal at w = 1/2,
    # contracting at the default 1/8.
    for w, decays in ((0.5, False), (0.125, True)):
        d = [1.0, 1.0]
        for _ in range(60):
            d.append(d[-1] - 2 * w * d[-2])
        assert (max(abs(x) for x in d[-6:]) < 1e-6) == decays, w


def test_only_communication_failures_are_reported_as_such() -> None:
    from asrkit.stages.learner_process import is_communication_error

    peer_gone = RuntimeError(
        "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500"
    )
    assert is_communication_error(peer_gone)
    assert is_communication_error(RuntimeError("Timed out waiting 30000ms for recv operation"))
    # A bug in this learner keeps its traceback instead of blaming the others.
    assert not is_communication_error(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_communication_error(RuntimeError("the batch-reading worker process 7 ended"))


def test_the_registry_names_classes_each_strategy_has_a_class() -> None:
    from asrkit.distributed.base import DistributedStrategy
    from asrkit.distributed.strategies import strategy_class

    assert strategy_class(strategy_config("single")) is None
    runners = set()
    for name in STRATEGIES:
        if name == "single":
            continue
        cfg = strategy_config(name)
        assert cfg.name == name
        runner = strategy_class(cfg)
        assert runner is not None and issubclass(runner, DistributedStrategy), name
        runners.add(runner)
    assert len(runners) == len(STRATEGIES) - 1  # a class per strategy


def test_exponential_stragglers_add_a_seeded_exponential_extra_with_mean_factor_minus_one() -> None:
    cfg = StragglerConfig(mode="exponential", factor=3.0, seed=5)
    extras: dict[int, list[float]] = {0: [], 1: []}
    for step in range(4000):
        for rank in (0, 1):
            runtime = _Runtime([1.0, 1.5])  # every step "took" half a second
            s = Straggler(cfg, rank=rank, world_size=2, runtime=runtime)
            s.start_step()
            s.end_step(step)
            assert len(runtime.slept) == 1 and runtime.slept[0] > 0
            extras[rank].append(runtime.slept[0])
    for rank in (0, 1):
        assert sum(extras[rank]) / len(extras[rank]) == pytest.approx(1.0, rel=0.06)  # (3 - 1) x 0.5 s
        ordered = sorted(extras[rank])
        assert ordered[len(ordered) // 2] == pytest.approx(math.log(2), rel=0.08)  # an exponential's median
    assert extras[0] != extras[1]  # each learner draws its own
    again = Straggler(cfg, rank=1, world_size=2, runtime=_Runtime([1.0, 1.5]))
    again.start_step()
    again.end_step(17)
    assert again.delayed_s == extras[1][17]  # seeded: the same draw again
