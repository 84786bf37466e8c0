"""Ctrl-C to a process group reaches every pool worker too (features, GMM alignment,
lattice decoding with nj > 1): the parent stops the pool; a worker must not print a
``KeyboardInterrupt`` traceback of its own (seen with ``gmm.nj=2``)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from asrkit.sigstack import quiet_worker


def test_a_pool_worker_leaves_ctrl_c_to_its_parent(capfd: pytest.CaptureFixture[str]) -> None:
    with multiprocessing.get_context("fork").Pool(1, initializer=quiet_worker) as pool:
        pid = pool.apply(os.getpid)
        os.kill(pid, signal.SIGINT)
        time.sleep(0.3)
        assert pool.apply(os.getpid) == pid  # the same worker, alive
    assert "KeyboardInterrupt" not in capfd.readouterr().err
