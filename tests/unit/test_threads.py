"""Intra-op threads against a busy CPU (asrkit.threads): the arithmetic on made-up
CPU accounting, the governor's decisions over time, /proc parsing, a real competitor, and
the property that makes adapting safe (the thread count does not change the results)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from asrkit.distributed.config import StrategyConfig
from asrkit.models import ModelConfig, build_model
from asrkit.threads import CpuSample, ThreadGovernor, read_cpu_sample, threads_for
from tests.distributed_learner import make_trainer
from tests.unit.test_resume import _tokenizer

HZ = 100  # ticks per second per core, as USER_HZ


def _window(
    *, cores: int, seconds: float, busy_cores: float, own_cores: float
) -> tuple[CpuSample, CpuSample]:
    """Two samples ``seconds`` apart in which ``busy_cores`` cores were busy in all,
    ``own_cores`` of them this process's."""
    total = int(cores * seconds * HZ)
    idle = int((cores - busy_cores) * seconds * HZ)
    return CpuSample(1000, 400, 50), CpuSample(1000 + total, 400 + idle, 50 + int(own_cores * seconds * HZ))


@pytest.mark.parametrize(
    ("busy", "own", "most", "expected"),
    [
        (2.0, 2.0, 2, 2),  # alone, both threads busy (spinning included)
        (1.0, 1.0, 2, 2),  # alone on one thread: the other core is free again
        (2.0, 1.0, 2, 1),  # one competitor holds a core
        (2.0, 0.7, 2, 1),  # ... while the time-sliced 2-thread run got less than a core
        (1.3, 1.0, 2, 2),  # a light background job (0.3 of a core) is not worth a thread
        (2.0, 0.0, 2, 1),  # both cores taken by others: still one thread
        (4.0, 1.0, 2, 1),
        (1.0, 1.0, 8, 2),  # never more than the cores
    ],
)
def test_threads_are_the_cores_others_leave_free(busy: float, own: float, most: int, expected: int) -> None:
    before, after = _window(cores=2, seconds=2.0, busy_cores=min(busy, 2.0), own_cores=own)
    assert threads_for(before, after, cores=2, most=most) == expected


def test_sixteen_cores_with_five_busy_give_eleven_threads() -> None:
    before, after = _window(cores=16, seconds=2.0, busy_cores=16.0, own_cores=11.0)
    assert threads_for(before, after, cores=16, most=16) == 11
    assert threads_for(before, after, cores=16, most=8) == 8
    assert threads_for(before, before, cores=16, most=8) == 8  # an empty window changes nothing


def test_the_governor_checks_at_its_interval_and_gives_threads_back() -> None:
    now = [0.0]
    accounting = {"total": 0, "idle": 0, "own": 0}

    def read(_: frozenset[int]) -> CpuSample:
        return CpuSample(**accounting)

    def spend(seconds: float, *, busy: float, own: float) -> None:
        now[0] += seconds
        accounting["total"] += int(2 * seconds * HZ)
        accounting["idle"] += int((2 - busy) * seconds * HZ)
        accounting["own"] += int(own * seconds * HZ)

    applied: list[int] = []
    governor = ThreadGovernor(
        2, interval_s=2.0, cpus=frozenset({0, 1}), read=read, clock=lambda: now[0], set_threads=applied.append
    )
    spend(3.0, busy=2.0, own=2.0)
    assert governor.poll() is None and governor.threads == 2  # alone
    spend(1.0, busy=2.0, own=1.0)
    assert governor.poll() is None  # a competitor came, but the next check is not due yet
    spend(1.5, busy=2.0, own=1.0)
    assert governor.poll() == 1 and applied == [1]
    spend(2.0, busy=2.0, own=1.0)
    assert governor.poll() is None and governor.threads == 1  # it is still there
    spend(2.0, busy=1.0, own=1.0)
    assert governor.poll() == 2 and applied == [1, 2]  # gone: both cores again


def test_without_proc_the_threads_are_left_alone(tmp_path: Path) -> None:
    assert read_cpu_sample(frozenset({0}), proc=tmp_path) is None
    governor = ThreadGovernor(
        2, interval_s=0.0, read=lambda _: None, set_threads=lambda n: pytest.fail("set")
    )
    assert governor.poll() is None and governor.threads == 2


def test_proc_files_are_read_for_the_allowed_cores_only(tmp_path: Path) -> None:
    (tmp_path / "self").mkdir()
    (tmp_path / "stat").write_text(
        "cpu  300 0 30 600 10 0 0 0 0 0\n"
        "cpu0 100 0 10 200 5 0 0 0 0 0\n"
        "cpu1 200 0 20 400 5 1 2 3 7 0\n"
        "intr 12345 0 0\n"
    )
    # A command name with spaces and a ')' must not shift the fields: utime 41, stime 9.
    fields = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", "41", "9"] + ["0"] * 30
    (tmp_path / "self" / "stat").write_text(f"4242 (py thon) x) {' '.join(fields)}\n")
    assert read_cpu_sample(frozenset({1}), proc=tmp_path) == CpuSample(total=631, idle=405, own=50)
    assert read_cpu_sample(frozenset({0, 1}), proc=tmp_path) == CpuSample(total=946, idle=610, own=50)


def test_training_steps_are_bitwise_the_same_on_one_or_two_threads() -> None:
    """What makes adapting the threads safe: the demo model's loss and gradients do not
    depend on the intra-op thread count (a future torch that broke this would make
    results depend on the machine's load)."""
    threads = torch.get_num_threads()

    def step(n: int) -> list[torch.Tensor]:
        torch.set_num_threads(n)
        torch.manual_seed(0)
        model = build_model(ModelConfig(size="demo"), input_dim=40, num_tokens=20)
        feats, lengths = torch.randn(4, 120, 40), torch.tensor([120, 100, 90, 60])
        out = model(feats, lengths)
        out["ctc"].sum().backward()
        return [out["ctc"].detach(), *(p.grad for p in model.parameters() if p.grad is not None)]

    try:
        one, two = step(1), step(2)
    finally:
        torch.set_num_threads(threads)
    assert len(one) == len(two) > 1
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))


def test_the_trainer_asks_the_governor_after_every_step(tmp_path: Path) -> None:
    _tokenizer(tmp_path)
    trainer = make_trainer(tmp_path, StrategyConfig(), lr=0.05, epochs=1)
    polls: list[int] = []

    class Counting(ThreadGovernor):
        def poll(self) -> int | None:
            polls.append(trainer.state.step)
            return None

    trainer.threads = Counting(1, read=lambda _: None)
    state = trainer.fit()
    assert state.step == len(trainer.batches) > 1 and polls == list(range(1, state.step + 1))
