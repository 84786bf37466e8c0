"""The simulator's virtual clock: tasks run one at a time in virtual-time order, events
wake waiters at their time, deadlocks and failures stop every task, and each task keeps
its own torch RNG stream."""

from __future__ import annotations

import pytest
import torch

from asrkit.sim.clock import Clock, Condition, Event, SimAborted, SimDeadlock


def test_tasks_interleave_in_virtual_time_order() -> None:
    clock = Clock()
    log: list[tuple[str, float]] = []

    def worker(name: str, step: float, steps: int) -> float:
        for _ in range(steps):
            clock.advance(step)
            log.append((name, clock.now()))
        return clock.now()

    clock.spawn(lambda: worker("a", 1.0, 3), name="a")
    clock.spawn(lambda: worker("b", 0.75, 4), name="b")
    assert clock.run() == [3.0, 3.0]
    # b at 0.75, a at 1, b at 1.5, a at 2, b at 2.25, then a and b both at 3: a first (made first)
    assert log == [("b", 0.75), ("a", 1.0), ("b", 1.5), ("a", 2.0), ("b", 2.25), ("a", 3.0), ("b", 3.0)]


def test_an_event_wakes_its_waiter_at_the_event_time() -> None:
    clock = Clock()
    delivered = Event(clock, "a message")
    seen: list[float] = []

    def sender() -> None:
        clock.advance(2.0)
        delivered.set("hello", at=clock.now() + 0.5)  # in flight for 0.5 s
        clock.advance(10.0)

    def receiver() -> None:
        seen.append(clock.now())
        assert delivered.wait() == "hello"
        seen.append(clock.now())

    clock.spawn(sender, name="sender")
    clock.spawn(receiver, name="receiver")
    clock.run()
    assert seen == [0.0, 2.5]


def test_a_waiter_already_later_than_the_event_keeps_its_time() -> None:
    clock = Clock()
    done = Event(clock)
    times: list[float] = []

    def early() -> None:
        clock.advance(1.0)
        done.set()

    def late() -> None:
        clock.advance(5.0)
        done.wait()
        times.append(clock.now())

    clock.spawn(early, name="early")
    clock.spawn(late, name="late")
    clock.run()
    assert times == [5.0]


def test_a_condition_wakes_waiters_that_recheck_at_the_notifiers_time() -> None:
    clock = Clock()
    cond = Condition(clock, "steps")
    state = {"steps": 0}
    woke: list[tuple[int, float]] = []

    def computer() -> None:
        for _ in range(4):
            clock.advance(1.0)
            with cond:
                state["steps"] += 1
                cond.notify_all()

    def pacer() -> None:
        for k in (2, 4):
            with cond:
                cond.wait_for(lambda k=k: state["steps"] >= k)
            woke.append((state["steps"], clock.now()))

    clock.spawn(computer, name="computer")
    clock.spawn(pacer, name="pacer")
    clock.run()
    assert woke == [(2, 2.0), (4, 4.0)]


def test_waiting_for_what_no_task_can_do_is_a_deadlock_naming_the_waits() -> None:
    clock = Clock()
    never = Event(clock, "a reply from learner 7")

    def waiter() -> None:
        clock.advance(1.5)
        never.wait()

    clock.spawn(waiter, name="learner-0")
    clock.spawn(lambda: clock.advance(3.0), name="learner-1")
    with pytest.raises(SimDeadlock, match=r"learner-0 at 1\.500000 s waits for a reply from learner 7"):
        clock.run()


def test_a_failing_task_stops_the_others_and_its_error_is_raised() -> None:
    clock = Clock()
    reached: list[str] = []
    stuck = Event(clock, "never")

    def bad() -> None:
        clock.advance(1.0)
        raise ValueError("learner 1 read a corrupt batch")

    def good() -> None:
        try:
            stuck.wait()
        except SimAborted as err:
            reached.append(str(err))
            raise

    clock.spawn(good, name="good")
    clock.spawn(bad, name="bad")
    with pytest.raises(ValueError, match="corrupt batch"):
        clock.run()
    assert reached and "bad failed: ValueError" in reached[0]


def test_each_task_draws_from_its_own_rng_stream() -> None:
    def draws(seed: int, clock: Clock | None) -> list[torch.Tensor]:
        torch.manual_seed(seed)
        out = []
        for _ in range(3):
            out.append(torch.rand(2))
            if clock is not None:
                clock.advance(1.0)
        return out

    alone = [draws(10, None), draws(11, None)]
    clock = Clock()
    clock.spawn(lambda: draws(10, clock), name="r0")
    clock.spawn(lambda: draws(11, clock), name="r1")
    together = clock.run()
    for a, b in zip(alone, together, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_time_is_read_by_tasks_only_and_runs_forward() -> None:
    clock = Clock()
    with pytest.raises(RuntimeError, match="simulated tasks only"):
        clock.now()
    clock.spawn(lambda: clock.advance(-1.0), name="backwards")
    with pytest.raises(ValueError, match="time runs forward"):
        clock.run()
