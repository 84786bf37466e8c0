"""The stop request's handlers: one signal recorded, and a process that does not act on it
in time prints where each thread is (so a hang under torchrun or Slurm leaves a trace
before SIGKILL)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from asrkit.training.stop import StopRequest


def _wait_until(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.01)
    return True


def _stuck_in_a_wait(release: threading.Event) -> None:
    release.wait()


def test_a_process_still_running_after_a_stop_prints_every_threads_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stop = StopRequest()
    stop.stuck_after_s = 0.2
    assert stop.install()
    release = threading.Event()
    waiter = threading.Thread(target=_stuck_in_a_wait, args=(release,), name="stuck-reader")
    waiter.start()
    printed: list[str] = []  # readouterr() consumes what it returns

    def reported() -> bool:
        printed.append(capsys.readouterr().err)
        text = "".join(printed)
        return "thread MainThread:" in text and "thread stuck-reader:" in text

    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert _wait_until(lambda: stop.requested)
        assert stop.name == "SIGTERM"
        assert _wait_until(reported)
    finally:
        stop.restore()
        release.set()
        waiter.join()
    text = "".join(printed)
    assert f"process {os.getpid()} is still running 0.2 s after SIGTERM" in text, text
    assert "_stuck_in_a_wait" in text and "release.wait()" in text, text


def test_a_stop_acted_on_in_time_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN in a background job
    stop = StopRequest()
    stop.stuck_after_s = 0.3
    assert stop.install()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        assert _wait_until(lambda: stop.requested)
    finally:
        stop.restore()  # what the learner does once it has saved and is leaving
    time.sleep(0.6)
    assert "still running" not in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before
