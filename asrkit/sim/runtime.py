"""The :class:`~asrkit.comm.Runtime` of simulated learners: time is the
:class:`~asrkit.sim.clock.Clock`'s, a thread is a clock task, a condition wakes its
waiters in virtual time, and sleeping spends virtual time. Strategies written against
the runtime (ADPSGD's averaging thread, the straggler model, the metrics) run unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asrkit.comm import Runtime
from asrkit.sim.clock import Clock, Condition, Event

__all__ = ["ClockRuntime"]


class _ClockThread:
    """``threading.Thread``'s ``start``/``join``/``is_alive`` as a clock task."""

    def __init__(self, clock: Clock, target: Callable[[], None], name: str) -> None:
        self.clock, self.target, self.name = clock, target, name
        self._ended = Event(clock, f"thread {name} to end")

    def start(self) -> None:
        self.clock.spawn(self._body, name=self.name)

    def _body(self) -> None:
        try:
            self.target()
        finally:
            self._ended.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the end. ``timeout`` is not applied: in virtual time a thread that
        never ends is a deadlock, which the clock reports with what every task waits for."""
        self._ended.wait()

    def is_alive(self) -> bool:
        return not self._ended.is_set


class ClockRuntime(Runtime):
    """Learners on ``clock``: ``now`` and ``wall`` are virtual seconds since the start."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def now(self) -> float:
        return self.clock.now()

    def wall(self) -> float:
        return self.clock.now()

    def sleep(self, seconds: float) -> None:
        self.clock.advance(seconds, work=False)

    def work(self) -> float:
        return self.clock.work()

    def condition(self) -> Any:
        return Condition(self.clock, "a condition")

    def thread(self, target: Callable[[], None], *, name: str) -> Any:
        return _ClockThread(self.clock, target, name)
