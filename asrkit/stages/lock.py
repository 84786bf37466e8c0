"""One run per experiment dir: ``exp/<name>/.lock``, holding the host, PID and start time
of the run that owns the dir.

Two runs of one experiment would adopt each other's resume state and overwrite each
other's checkpoints, so :func:`experiment_lock` refuses a second run with one line. A lock
whose process is gone (killed with SIGKILL, a crashed node) is *stale*: on the same host
the PID is checked, together with the process's start time so that a reused PID does not
count as the owner, and a stale lock is taken over with a warning. A lock from another
host cannot be checked from here; the message says to remove it once that run is known
to be gone.

The lock is a file created with ``O_EXCL`` (atomic on local and NFS v3+ file systems),
not ``flock``, whose behaviour on network file systems varies.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from asrkit.errors import ConfigError

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
#: The lock of a shared data root while a run builds its data dirs and features.
DATA_LOCK_NAME = ".lock.data"
#: Seconds between looks at a lock another run holds, when waiting for it.
WAIT_POLL_S = 0.5


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22),
    or None where /proc cannot tell (no such process, or not Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def _alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    now = _start_time(pid)
    return started is None or now is None or now == started


def _holder(path: Path) -> dict | None:
    try:
        holder = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # being written, or damaged: treated as held by an unknown run
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict) -> str:
    since = holder.get("since")
    when = "?"
    if isinstance(since, int | float):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
    return f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, since {when}"


def _remove_stale(path: Path, stale: dict) -> bool:
    """Remove the lock file ``path`` only if it still holds ``stale``.

    Two runs may find the same stale lock at once: the first removes it and takes the dir,
    and the second must not then remove the first's fresh lock. So the file is renamed
    away (atomic: one run gets it), and if what was renamed is not the stale holder read
    before, it is put back with ``link`` (which fails, leaving it aside, only where a third
    run took the name in that instant; the warning names the file)."""
    aside = path.with_name(f"{path.name}.stale.{os.getpid()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False  # another run removed it first
    if _holder(aside) == stale:
        aside.unlink(missing_ok=True)
        return True
    try:
        os.link(aside, path)  # a live run's lock: back where it was
    except FileExistsError:
        log.warning("%s: two runs took this lock at once; the other one's is left as %s", path, aside)
        return False
    aside.unlink(missing_ok=True)
    return False


@contextmanager
def experiment_lock(exp_dir: str | Path, *, name: str = LOCK_NAME, wait: bool = False) -> Iterator[Path]:
    """Hold ``exp_dir/<name>`` for the duration of the block.

    Args:
        wait: when a live run on this host holds it, wait for that run to let it go
            (shared data dirs: the second run then finds the stage done) instead of refusing.

    Raises:
        ConfigError: a live run (or one on another host) holds the dir.
    """
    path = Path(exp_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    me = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": _start_time(os.getpid()),
        "since": int(time.time()),
    }
    tries, waited = 0, False
    while tries < 3:
        tries += 1
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = _holder(path)
            if holder is None:
                continue  # released meanwhile: try again
            host, pid = holder.get("host"), holder.get("pid")
            if host == me["host"] and isinstance(pid, int) and not _alive(pid, holder.get("started")):
                if _remove_stale(path, holder):
                    ended = _describe(holder)
                    log.warning("%s: left by a run that has ended (%s); taking it over", path, ended)
                continue
            if wait and host == me["host"]:
                if not waited:
                    log.info(
                        "%s is being built by another run (%s); waiting for it",
                        path.parent,
                        _describe(holder),
                    )
                    waited = True
                time.sleep(WAIT_POLL_S)
                tries = 0
                continue
            if host != me["host"] and host is not None:
                fix = f"if that run has ended (a crashed node), remove {path} and run again"
            else:
                fix = "wait for it to finish or stop it, or give this run another name=..."
            raise ConfigError(
                f"{path.parent} is in use by another run ({_describe(holder)}); {fix}"
            ) from None
        try:
            with os.fdopen(fd, "w") as out:
                out.write(json.dumps(me) + "\n")
        except BaseException:
            path.unlink(missing_ok=True)  # never leave an empty lock behind
            raise
        break
    else:
        raise ConfigError(f"{path}: could not take the lock after 3 tries; another run keeps taking it")
    try:
        yield path
    finally:
        if (_holder(path) or {}).get("pid") == me["pid"]:
            path.unlink(missing_ok=True)
