"""Intra-op threads chosen against the cores that other processes leave free.

Torch starts one intra-op thread per core, and its OpenMP threads spin while they wait for
each other at every small LSTM operation. Alone that is the fastest choice; beside one busy
process at the same priority on two cores it collapses — the spinning thread keeps the
core from the thread it waits for, and a 2-thread epoch takes 3-4x as long instead of 2x
(``asrkit bench contention``). One thread per *free* core avoids that, so the trainer
asks a :class:`ThreadGovernor` between steps: every ``interval_s`` it reads the kernel's
CPU accounting (``/proc/stat`` for the cores this process may run on, ``/proc/self/stat``
for its own time), counts how many cores other processes kept busy in that window, and
sets ``torch.set_num_threads`` to the cores left (at least 1, at most the count training
started with). A competitor that goes away gives its core back at the next check.

The thread count does not change the results: the demo model's forward and backward
passes, and so its training, are bitwise the same on 1 or 2 threads
(``tests/{unit,integration}/test_threads.py``), so the governor is on by default (``train.adapt_threads``)
and is not part of any stage's settings.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU time in clock ticks (``USER_HZ``) at one moment.

    Attributes:
        total: every state's time, summed over the cores this process may run on.
        idle: idle and I/O-wait time of those cores.
        own: this process's user and system time (all its threads).
    """

    total: int
    idle: int
    own: int


def read_cpu_sample(cpus: frozenset[int], *, proc: Path = Path("/proc")) -> CpuSample | None:
    """The current :class:`CpuSample` for the cores ``cpus`` (None where ``/proc`` is not
    Linux's, e.g. on macOS: the governor then leaves the threads alone)."""
    try:
        stat = (proc / "stat").read_text()
        own_stat = (proc / "self" / "stat").read_text()
    except OSError:
        return None
    total = idle = 0
    for line in stat.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        # user nice system idle iowait irq softirq steal (guest time is inside user/nice).
        ticks = [int(f) for f in fields[:8]]
        total += sum(ticks)
        idle += ticks[3] + ticks[4]
    # Fields after the parenthesised command name: state is the 3rd field, utime the 14th.
    after = own_stat.rsplit(")", 1)[1].split()
    own = int(after[11]) + int(after[12])
    return CpuSample(total=total, idle=idle, own=own) if total else None


def threads_for(before: CpuSample, after: CpuSample, *, cores: int, most: int) -> int:
    """Threads for the cores that other processes left free between two samples: the
    window's busy time less this process's own, in cores, taken from ``cores``; rounded,
    at least 1 and at most ``most``."""
    window = after.total - before.total
    if window <= 0:
        return most
    per_core = window / cores
    busy = window - (after.idle - before.idle)
    others = max(0.0, (busy - (after.own - before.own)) / per_core)
    return max(1, min(most, int(cores - others + 0.5)))


class ThreadGovernor:
    """Keeps ``torch.get_num_threads()`` at the free cores (see the module docstring).

    Args:
        most: the most threads to use (what training was configured with).
        interval_s: seconds between checks (a check reads two small ``/proc`` files).
        cpus: the cores this process may run on (default: its affinity mask).
        read: takes a sample (tests pass a fake).
        clock: monotonic seconds (tests pass a fake).
        set_threads: applies a count (default ``torch.set_num_threads``).
    """

    def __init__(
        self,
        most: int,
        *,
        interval_s: float = 2.0,
        cpus: frozenset[int] | None = None,
        read: Callable[[frozenset[int]], CpuSample | None] = read_cpu_sample,
        clock: Callable[[], float] = time.monotonic,
        set_threads: Callable[[int], None] = torch.set_num_threads,
    ) -> None:
        self.most, self.interval_s = max(1, most), interval_s
        self.cpus = cpus if cpus is not None else frozenset(os.sched_getaffinity(0))
        self.read, self.clock, self.set_threads = read, clock, set_threads
        self.threads = self.most
        self._last = self.read(self.cpus)
        self._when = self.clock()

    def poll(self) -> int | None:
        """Between steps: a new thread count when a check is due and the free cores have
        changed (applied already), else None."""
        if self._last is None or self.clock() - self._when < self.interval_s:
            return None
        sample = self.read(self.cpus)
        if sample is None:
            return None
        wanted = threads_for(self._last, sample, cores=len(self.cpus), most=self.most)
        self._last, self._when = sample, self.clock()
        if wanted == self.threads:
            return None
        # Debug level: on a shared machine the count follows the load every few seconds,
        # which is no news for the run's log (`asrkit -v` shows it).
        log.debug(
            "%s: training on %d intra-op thread(s) of %d (train.adapt_threads)",
            "other processes keep cores busy" if wanted < self.threads else "cores freed up",
            wanted,
            self.most,
        )
        self.threads = wanted
        self.set_threads(wanted)
        return wanted
