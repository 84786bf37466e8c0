"""Stopping training cleanly on SIGINT (Ctrl-C) and SIGTERM (Slurm's time limit and
preemption, ``kill``).

:class:`StopRequest` replaces Python's default handlers while training runs: the first
signal only records itself, and the training loop looks at the record after each step
(the step in hand always finishes). The learners then agree to stop (the lock-step
strategies after every step, so they stop at the same batch), save a resume state and
raise :class:`TrainingStopped`, which the CLI turns into one line and
:data:`~asrkit.errors.STOPPED_EXIT` — the same command continues from there.

A second signal stops the process at once, with the signal's default action. One
``kill`` of a process group and torchrun's agent passing the same signal on reach a
learner twice within milliseconds: a signal within :data:`SAME_STOP_S` of the first
counts as the same request.

A process that is still running :data:`STUCK_AFTER_S` after the request (a hang: a
learner waiting for a peer or a batch that never comes) prints the stack of every thread
to stderr, before a launcher's grace period (torchrun's and Slurm's: 30 s) ends in SIGKILL,
so the log says where it was.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
import traceback
from types import FrameType
from typing import Any

from asrkit.errors import STOPPED_EXIT, TrainingStopped

__all__ = [
    "SAME_STOP_S",
    "SIGNALS",
    "STOPPED_EXIT",
    "StopRequest",
    "TrainingStopped",
    "ignore_signals_at_exit",
]

#: Seconds after a first signal in which another one is the same request, not a second one.
SAME_STOP_S = 2.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Seconds after a stop request at which a process still running prints every thread's stack.
STUCK_AFTER_S = 20.0


class StopRequest:
    """The first SIGINT/SIGTERM, recorded by handlers installed with :meth:`installed`."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._when = 0.0
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()
        self._stopped = threading.Event()  # set by restore(): no stacks to print
        self.stuck_after_s = STUCK_AFTER_S
        self._wound_down = False  # wind_down() kept our handlers after a stop

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._pid:  # a forked worker inherited this handler: default action
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        now = time.monotonic()
        if self.signum is None:
            self.signum, self._when = signum, now
            threading.Thread(target=self._report_if_stuck, name="asrkit-stop-watch", daemon=True).start()
            return
        if now - self._when < SAME_STOP_S:
            return
        if self._wound_down:  # training is over: the handler we replaced takes it
            previous = self._previous.get(signum, signal.SIG_DFL)
            self.restore()
            if callable(previous):
                previous(signum, frame)
                return
            if previous == signal.SIG_IGN:
                return
        # A second request: stop now, as the signal would have without us.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _report_if_stuck(self) -> None:
        if self._stopped.wait(self.stuck_after_s):
            return
        print(
            f"asrkit: process {os.getpid()} is still running {self.stuck_after_s:g} s after "
            f"{self.name}; where each of its threads is (please report this with the log):",
            file=sys.stderr,
            flush=True,
        )
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            stack = "".join(traceback.format_stack(frame))
            print(f"thread {names.get(ident, ident)}:\n{stack}", file=sys.stderr, end="", flush=True)

    def install(self) -> bool:
        """Take over SIGINT and SIGTERM (main thread only; elsewhere nothing is changed and
        False is returned)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self._stopped.clear()
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return True

    def restore(self) -> None:
        """Put back the handlers :meth:`install` replaced."""
        self._stopped.set()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def wind_down(self) -> None:
        """Training is over: :meth:`restore`, unless a stop was requested. Then our handlers
        stay while the process winds up and exits with the stop's status, so the rest of a
        signal burst (a process group's ``kill`` with torchrun passing it on, Slurm's
        copies) is still the same request rather than a ``KeyboardInterrupt`` in the
        middle of the exit. A signal after that window goes to the handler we replaced
        (a notebook's Ctrl-C still interrupts), which is put back then."""
        if self.requested:
            self._stopped.set()
            self._wound_down = True
            return
        self.restore()


def ignore_signals_at_exit() -> None:
    """For a process leaving after a stop, from the moment it knows it stopped: the rest of
    the signal burst (a process group's ``kill``, torchrun passing it on, Slurm's copies,
    a user's repeated Ctrl-C) within :data:`SAME_STOP_S` is ignored, a later signal takes
    its default action (a wind-up that hangs can still be killed). Once the threads are
    joined (``atexit`` runs then) both are ignored: Python's finalization sets every
    handler it installed back to the default action, so a signal that arrived during the
    teardown killed the process (status -2 or -15) after it had printed that it stopped
    and saved; ignored ones it leaves alone. Main thread only (elsewhere it does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        return
    since = time.monotonic()

    def tail(signum: int, frame: FrameType | None) -> None:
        if time.monotonic() - since < SAME_STOP_S:
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for sig in SIGNALS:
        signal.signal(sig, tail)

    def ignore() -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                signal.signal(sig, signal.SIG_IGN)

    atexit.register(ignore)
