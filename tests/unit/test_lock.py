"""One run per experiment dir (asrkit.stages.lock)."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from asrkit.errors import ConfigError
from asrkit.stages.lock import LOCK_NAME, _start_time, experiment_lock
from tests.helpers import assert_one_line_error, run_main


def _holder(pid: int, *, host: str | None = None, started: str | None = "auto") -> str:
    return json.dumps(
        {
            "host": host or socket.gethostname(),
            "pid": pid,
            "started": _start_time(pid) if started == "auto" else started,
            "since": 1_790_000_000,
        }
    )


@pytest.fixture
def sleeper():
    """A live process that is not this one."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_lock_is_held_for_the_block_and_released(tmp_path: Path) -> None:
    with experiment_lock(tmp_path / "exp") as path:
        held = json.loads(path.read_text())
        assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()
        with pytest.raises(ConfigError, match=rf"in use by another run \(host .*, pid {os.getpid()}"):
            with experiment_lock(tmp_path / "exp"):
                pass
        assert path.exists()
    assert not path.exists()
    with pytest.raises(RuntimeError):
        with experiment_lock(tmp_path / "exp"):
            raise RuntimeError("a failing run still lets go")
    assert not (tmp_path / "exp" / LOCK_NAME).exists()


def test_live_holder_is_refused_and_dead_or_reused_pid_is_taken_over(
    tmp_path: Path, sleeper: subprocess.Popen, caplog: pytest.LogCaptureFixture
) -> None:
    lock = tmp_path / LOCK_NAME
    lock.write_text(_holder(sleeper.pid))
    with pytest.raises(ConfigError, match=f"pid {sleeper.pid}.*wait for it to finish"):
        with experiment_lock(tmp_path):
            pass
    assert json.loads(lock.read_text())["pid"] == sleeper.pid  # untouched
    # The same PID with another start time is a reused PID: its run has ended.
    lock.write_text(_holder(sleeper.pid, started="1"))
    with caplog.at_level(logging.WARNING), experiment_lock(tmp_path):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert "taking it over" in caplog.text
    sleeper.kill()
    sleeper.wait()
    lock.write_text(_holder(sleeper.pid))
    with experiment_lock(tmp_path):
        assert json.loads(lock.read_text())["pid"] == os.getpid()


def test_lock_of_another_host_is_not_guessed_at(tmp_path: Path) -> None:
    (tmp_path / LOCK_NAME).write_text(_holder(1, host="node-that-is-elsewhere", started=None))
    with pytest.raises(ConfigError, match=f"node-that-is-elsewhere.*remove {tmp_path / LOCK_NAME}"):
        with experiment_lock(tmp_path):
            pass


def test_second_run_of_an_experiment_is_one_line_and_leaves_its_files(
    tmp_path: Path, sleeper: subprocess.Popen, capfd: pytest.CaptureFixture
) -> None:
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "config.yaml").write_text("the first run's config\n")
    (exp / LOCK_NAME).write_text(_holder(sleeper.pid))
    argv = ["run", "--stage", "3", "--stop-stage", "3", f"exp_dir={exp}", f"data_root={tmp_path / 'data'}"]
    result = run_main(argv, capfd)
    assert_one_line_error(result, str(exp), "in use by another run", f"pid {sleeper.pid}")
    assert (exp / "config.yaml").read_text() == "the first run's config\n"


def test_a_stale_lock_taken_by_another_run_meanwhile_is_not_removed(
    tmp_path: Path, sleeper: subprocess.Popen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs find the same stale lock; the other one removed it and took the dir first.
    This run, still holding its stale reading, must leave the other's fresh lock alone."""
    import asrkit.stages.lock as lock_module

    lock = tmp_path / LOCK_NAME
    stale = json.loads(_holder(999_999_999, started="1"))
    lock.write_text(_holder(sleeper.pid))  # the other run's lock, already in place
    real = lock_module._holder
    readings = iter([stale])  # this run's first look saw the stale lock

    def holder(path: Path) -> dict | None:
        return next(readings, None) or real(path)

    monkeypatch.setattr(lock_module, "_holder", holder)
    with pytest.raises(ConfigError, match=f"pid {sleeper.pid}.*wait for it to finish"):
        with experiment_lock(tmp_path):
            pass
    assert json.loads(lock.read_text())["pid"] == sleeper.pid
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_NAME]  # nothing left aside
