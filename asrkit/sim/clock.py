"""A virtual clock on which simulated learners run, one at a time, in time order.

Each simulated activity (a learner's training loop, ADPSGD's averaging thread) is a
*task*: a real Python thread that runs only while it holds the clock's baton. The clock
hands the baton to the ready task with the smallest virtual time (ties: the task made
first), and that task runs until it advances its time (:meth:`Clock.advance`: it
computed for so long) or waits for something another task has not done yet
(:class:`Event`, :class:`Condition`). Nothing runs in parallel and nothing reads the
wall clock, so a simulation is a deterministic function of its inputs — the same seed
gives bitwise the same weights — whatever the machine's load.

Causality holds because the running task always has the smallest time of the ready
tasks: whatever it does happens "now" for everyone that could observe it, and a task
woken by an event resumes at ``max(its own time, the event's time)``.

    clock = Clock()
    clock.spawn(lambda: ..., name="learner-0")
    clock.run()          # returns when every task has ended; raises the first error

A task that waits for an event no other task can set is a deadlock: :meth:`Clock.run`
raises :class:`SimDeadlock` naming what each task was waiting for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["Clock", "Condition", "Event", "SimAborted", "SimDeadlock"]

#: Real seconds between :meth:`Clock.run`'s looks at its ``stop`` callable.
STOP_POLL_S = 0.05


class SimDeadlock(RuntimeError):
    """Every unfinished task waits for something no task can do any more."""


class SimAborted(RuntimeError):
    """Raised in a task when another task failed (the simulation stops)."""


class _Task:
    def __init__(self, clock: Clock, index: int, name: str, fn: Callable[[], Any], at: float) -> None:
        self.clock, self.index, self.name, self.fn = clock, index, name, fn
        self.time = at
        self.work = 0.0  # virtual seconds spent computing (advance), not waiting or sleeping
        self.state = "ready"  # ready | blocked | done
        self.waiting_for = ""
        self.go = threading.Semaphore(0)
        self.abort: BaseException | None = None
        self.result: Any = None
        self.rng: torch.Tensor | None = None  # the task's torch RNG state while it waits
        self.thread = threading.Thread(target=self._body, name=f"sim-{name}", daemon=True)

    def _body(self) -> None:
        self.go.acquire()
        clock = self.clock
        try:
            if self.abort is not None:
                raise self.abort
            self.result = self.fn()
        except BaseException as err:  # noqa: BLE001  handed to Clock.run
            clock._failed(self, err)
        finally:
            clock._finish(self)


class Clock:
    """The virtual clock and its scheduler.

    Args:
        own_rng: give each task its own torch default RNG stream (saved when it yields,
            restored when it resumes), as separate processes would have; a task seeds its
            own (``torch.manual_seed``) and starts from the state at :meth:`run`.
    """

    def __init__(self, *, own_rng: bool = True) -> None:
        self.own_rng = own_rng
        self._lock = threading.Lock()
        self._tasks: list[_Task] = []
        self._current: _Task | None = None
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._started = False

    # -- setting up and running ---------------------------------------------------------

    def spawn(self, fn: Callable[[], Any], *, name: str, at: float | None = None) -> _Task:
        """Add a task running ``fn()``, starting at virtual time ``at`` (default: now for a
        task spawned by a task, 0 before :meth:`run`)."""
        with self._lock:
            start = at if at is not None else (self._current.time if self._current is not None else 0.0)
            task = _Task(self, len(self._tasks), name, fn, start)
            self._tasks.append(task)
        if self._started:
            task.rng = torch.get_rng_state() if self.own_rng else None
            task.thread.start()
        return task

    def run(self, *, stop: Callable[[], BaseException | None] | None = None) -> list[Any]:
        """Run every task to its end; the results of the tasks spawned before the run, in
        spawn order (tasks spawn more: threads of their own). Raises the first task's
        error (or :class:`SimDeadlock`).

        ``stop`` is asked every :data:`STOP_POLL_S` real seconds while the tasks run; an
        exception it returns cancels the run (:meth:`cancel`) and is raised here once every
        task has ended (a Ctrl-C: no task thread is left computing as the process exits)."""
        if self._started:
            raise RuntimeError("a clock runs once")
        self._started = True
        if not self._tasks:
            return []
        roots = len(self._tasks)
        initial = torch.get_rng_state() if self.own_rng else None
        for task in self._tasks:
            task.rng = initial
            task.thread.start()
        with self._lock:
            first = self._next_ready()
            assert first is not None
            self._hand_over(first)
        while not self._done.wait(STOP_POLL_S if stop is not None else None):
            error = stop() if stop is not None else None
            if error is not None:
                self.cancel(error)
        for task in self._tasks:
            task.thread.join()
        if initial is not None:
            torch.set_rng_state(initial)
        if self._error is not None:
            raise self._error
        return [task.result for task in self._tasks[:roots]]

    def cancel(self, error: BaseException) -> None:
        """Stop the run from outside its tasks: each unfinished task raises ``error`` at its
        next call to the clock (the running one after its current computation), and
        :meth:`run` raises it."""
        with self._lock:
            if self._error is None:
                self._error = error
            for task in self._tasks:
                if task.state != "done" and task.abort is None:
                    task.abort = error
                    if task.state == "blocked":
                        task.state, task.waiting_for = "ready", ""

    # -- what a task calls ---------------------------------------------------------------

    @property
    def current(self) -> _Task:
        task = self._current
        if task is None or threading.current_thread() is not task.thread:
            raise RuntimeError("virtual time is read and spent by simulated tasks only")
        return task

    def now(self) -> float:
        """The calling task's virtual time (seconds)."""
        return self.current.time

    def advance(self, seconds: float, *, work: bool = True) -> None:
        """The calling task spends ``seconds`` of virtual time computing a step (``work``)
        or sleeping."""
        if seconds < 0:
            raise ValueError(f"time runs forward: advance({seconds})")
        task = self.current
        task.time += seconds
        if work:
            task.work += seconds
        self._yield(task)

    def work(self) -> float:
        """The calling task's computing time so far (virtual seconds)."""
        return self.current.work

    def advance_to(self, when: float) -> None:
        """The calling task waits until virtual time ``when`` (no-op if it is later)."""
        task = self.current
        task.time = max(task.time, when)
        self._yield(task)

    # -- internals (the baton) -----------------------------------------------------------

    def _next_ready(self) -> _Task | None:
        ready = [t for t in self._tasks if t.state == "ready"]
        return min(ready, key=lambda t: (t.time, t.index)) if ready else None

    def _hand_over(self, task: _Task) -> None:
        """Give ``task`` the baton (``_lock`` held)."""
        self._current = task
        if task.rng is not None:
            torch.set_rng_state(task.rng)
        task.go.release()

    def _yield(self, task: _Task) -> None:
        """``task`` (the caller) lets the earliest ready task run; returns when ``task``
        holds the baton again."""
        with self._lock:
            nxt = self._pick()
            if nxt is task:
                return self._check_abort(task)
            if self.own_rng:
                task.rng = torch.get_rng_state()
            self._hand_over(nxt)
        task.go.acquire()
        self._check_abort(task)

    def _pick(self) -> _Task:
        """The next task to run (``_lock`` held). When none is ready but some wait, that
        is a deadlock: every waiting task is aborted with :class:`SimDeadlock` and the
        earliest runs (to raise it)."""
        nxt = self._next_ready()
        if nxt is not None:
            return nxt
        blocked = [t for t in self._tasks if t.state == "blocked"]
        waits = "; ".join(f"{t.name} at {t.time:.6f} s waits for {t.waiting_for}" for t in blocked)
        error = SimDeadlock(f"every simulated task waits: {waits}")
        if self._error is None:
            self._error = error
        for t in blocked:
            t.abort, t.state = error, "ready"
        nxt = self._next_ready()
        assert nxt is not None
        return nxt

    @staticmethod
    def _check_abort(task: _Task) -> None:
        if task.abort is not None:
            raise task.abort

    def _block(self, what: str) -> None:
        """The caller waits until a :meth:`_wake` (its state becomes ready)."""
        task = self.current
        with self._lock:
            task.state, task.waiting_for = "blocked", what
        self._yield(task)

    def _wake(self, task: _Task, at: float) -> None:
        with self._lock:
            if task.state == "blocked":
                task.state, task.waiting_for = "ready", ""
                task.time = max(task.time, at)

    def _failed(self, task: _Task, err: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = err
            if isinstance(err, SimAborted | SimDeadlock):
                return
            stop = SimAborted(f"simulated task {task.name} failed: {type(err).__name__}: {err}")
            for other in self._tasks:
                if other is not task and other.state != "done":
                    other.abort, other.state = stop, "ready"

    def _finish(self, task: _Task) -> None:
        with self._lock:
            task.state = "done"
            if self.own_rng:
                task.rng = None
            if all(t.state == "done" for t in self._tasks):
                self._current = None
                self._done.set()
                return
            self._hand_over(self._pick())


class Event:
    """Something that happens once, at a virtual time: a message delivered, a collective
    completed. :meth:`wait` returns at ``max(now, the event's time)``."""

    def __init__(self, clock: Clock, what: str = "an event") -> None:
        self.clock, self.what = clock, what
        self.time: float | None = None
        self.value: Any = None
        self._waiters: list[_Task] = []

    @property
    def is_set(self) -> bool:
        return self.time is not None

    def set(self, value: Any = None, *, at: float | None = None) -> None:
        """It happens at ``at`` (default: the caller's now; may lie in the future)."""
        if self.time is not None:
            raise RuntimeError(f"{self.what} happened twice")
        self.time = self.clock.now() if at is None else at
        self.value = value
        for task in self._waiters:
            self.clock._wake(task, self.time)
        self._waiters.clear()

    def wait(self) -> Any:
        """Wait until it has happened; the caller's time moves to its time if later."""
        if self.time is None:
            self._waiters.append(self.clock.current)
            self.clock._block(self.what)
        assert self.time is not None
        self.clock.advance_to(self.time)
        return self.value


class Condition:
    """``threading.Condition``'s ``wait_for``/``notify_all`` in virtual time. Tasks never
    run at once, so the ``with`` block needs no lock; a woken task rechecks its predicate
    at the notifier's time."""

    def __init__(self, clock: Clock, what: str = "a condition") -> None:
        self.clock, self.what = clock, what
        self._waiters: list[_Task] = []

    def __enter__(self) -> Condition:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def wait_for(self, predicate: Callable[[], bool]) -> bool:
        while not predicate():
            self._waiters.append(self.clock.current)
            self.clock._block(self.what)
        return True

    def notify_all(self) -> None:
        now = self.clock.now()
        waiters, self._waiters = self._waiters, []
        for task in waiters:
            self.clock._wake(task, now)
