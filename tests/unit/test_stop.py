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


def test_a_stopped_command_never_puts_the_default_action_back_before_it_exits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """From the TrainingStopped that ends a command to the process's exit, SIGINT and SIGTERM
    are never left to their default action: the CLI used to put SIGTERM's back on its way
    out, and the tail of a signal burst landing between that and ``atexit`` killed
    ``asrkit simulate`` with status -15 after it had printed that it stopped (seen in CI)."""
    import argparse

    from asrkit.cli import main as cli
    from asrkit.errors import STOPPED_EXIT, TrainingStopped

    def stopped(args: argparse.Namespace) -> int:
        raise TrainingStopped("stopped by SIGINT; rerun the same command to continue")

    def parser(argv: object = None) -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(prog="asrkit")
        p.add_argument("-v", "--verbose", action="store_true")
        p.add_argument("command")
        p.set_defaults(func=stopped)
        return p

    real_signal = signal.signal
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    set_to: list[tuple[int, object]] = []

    def recording(sig: int, handler: object) -> object:
        set_to.append((sig, handler))
        return real_signal(sig, handler)

    monkeypatch.setattr(cli, "build_parser", parser)
    monkeypatch.setattr(signal, "signal", recording)
    try:
        assert cli.main(["train"]) == STOPPED_EXIT
        last = {sig: handler for sig, handler in set_to}
        for sig in (signal.SIGINT, signal.SIGTERM):
            assert callable(last[sig]), (sig, set_to)  # the tail handler, not SIG_DFL
    finally:
        for sig, handler in saved.items():
            real_signal(sig, handler)
    assert "stopped by SIGINT" in capsys.readouterr().err
