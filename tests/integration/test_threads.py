"""The thread governor against a real busy process.

The in-process tests of the same code are in :mod:`tests.unit.test_threads`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asrkit.threads import read_cpu_sample, threads_for


@pytest.mark.skipif(
    not Path("/proc/stat").is_file() or len(os.sched_getaffinity(0)) < 2, reason="Linux, 2+ cores"
)
def test_a_real_busy_process_takes_a_thread_away() -> None:
    cores = sorted(os.sched_getaffinity(0))[:2]
    cpus = frozenset(cores)
    code = f"import os\nos.sched_setaffinity(0, {{{cores[0]}}})\nwhile True:\n    pass\n"
    busy = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.5)
        before = read_cpu_sample(cpus)
        time.sleep(1.0)  # this process sleeps: only the competitor (and noise) is busy
        after = read_cpu_sample(cpus)
    finally:
        busy.kill()
        busy.wait()
    assert before is not None and after is not None
    assert threads_for(before, after, cores=2, most=2) == 1
    # This process's own time is read as its own (at least a fifth of the second it
    # burns, however busy the machine running the tests is).
    before = read_cpu_sample(cpus)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        pass
    after = read_cpu_sample(cpus)
    assert before is not None and after is not None
    assert after.own - before.own >= os.sysconf("SC_CLK_TCK") // 5
