"""Learner processes: launching them with torchrun and joining the process group.

The environment torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``TORCHELASTIC_RESTART_COUNT``, ...) and the test-only ``ASRKIT_FAULT_KILL`` are read here
and nowhere else in the library: :func:`context_from_env` turns them into a
:class:`DistContext` that is passed down explicitly.
"""

from __future__ import annotations

import ctypes
import datetime
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from asrkit.distributed.config import StrategyConfig
from asrkit.errors import STOPPED_EXIT, ConfigError, TrainingStopped, UserError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistContext:
    """Who this learner is. ``world_size == 1`` is a plain single process."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str = "gloo"
    #: torchrun's restarts of this learner so far (0: the first attempt).
    restart: int = 0
    #: The fault-tolerance tests' ``ASRKIT_FAULT_KILL`` (:class:`~asrkit.training.resume.FaultInjection`).
    fault_kill: str = ""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def under_torchrun(environ: Mapping[str, str] = os.environ) -> bool:
    """True inside a process started by torchrun."""
    return "TORCHELASTIC_RUN_ID" in environ or ("RANK" in environ and "WORLD_SIZE" in environ)


def context_from_env(
    device: torch.device, *, backend: str = "auto", environ: Mapping[str, str] = os.environ
) -> DistContext:
    """The learner's rank, world size and device from torchrun's environment."""
    restart = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    fault_kill = environ.get("ASRKIT_FAULT_KILL", "")
    if not under_torchrun(environ):
        return DistContext(device=device, backend="gloo", fault_kill=fault_kill)
    rank, world = int(environ["RANK"]), int(environ["WORLD_SIZE"])
    local = int(environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        device = torch.device("cuda", local % max(1, torch.cuda.device_count()))
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    return DistContext(
        rank=rank,
        world_size=world,
        local_rank=local,
        device=device,
        backend=backend,
        restart=restart,
        fault_kill=fault_kill,
    )


def launched_rank(environ: Mapping[str, str] = os.environ) -> str:
    """This process's rank as torchrun set it (``"0"`` outside torchrun), for messages and
    for a user's own ``torchrun -m asrkit run`` (only rank 0 writes stage records)."""
    return environ.get("RANK", "0")


def init_process_group(ctx: DistContext, *, timeout_s: float) -> None:
    """Join the default process group (torchrun's env:// rendezvous) with a finite timeout."""
    if ctx.world_size == 1 or dist.is_initialized():
        return
    if ctx.device.type == "cuda":
        torch.cuda.set_device(ctx.device)
    timeout = datetime.timedelta(seconds=timeout_s)
    if "MASTER_ADDR" not in os.environ:  # not under torchrun: torch's env:// explains what is missing
        dist.init_process_group(ctx.backend, rank=ctx.rank, world_size=ctx.world_size, timeout=timeout)
        return
    # torchrun's static rendezvous keeps one store across restarts, so restarted learners
    # would read the dead ones' addresses: every attempt gets keys of its own.
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        ctx.world_size,
        is_master=ctx.rank == 0 and not agent_store,
        timeout=timeout,
        multi_tenant=True,
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(
        ctx.backend,
        store=dist.PrefixStore(f"asrkit/attempt{attempt}", store),
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=timeout,
    )


def shutdown_process_group() -> None:
    """Leave together: tearing gloo down while a peer still talks to it can abort the process."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def torchrun_command(cfg: StrategyConfig, module_args: Sequence[str]) -> list[str]:
    """torchrun (through :mod:`asrkit.distributed.agent`) ... ``-m <module_args>`` for this node."""
    return [
        sys.executable,
        "-m",
        "asrkit.distributed.agent",
        f"--nproc-per-node={cfg.learners}",
        f"--nnodes={cfg.nnodes}",
        f"--node-rank={cfg.node_rank}",
        f"--master-addr={cfg.master_addr}",
        f"--master-port={cfg.master_port}",
        f"--max-restarts={cfg.max_restarts}",
        "-m",
        *module_args,
    ]


#: Where the main learner writes the line saying where a signal stopped it, for the
#: launcher to print once every learner has stopped.
STOP_NOTE_ENV = "ASRKIT_STOP_NOTE"


def launch_learners(
    cfg: StrategyConfig,
    module_args: Sequence[str],
    *,
    note: Path | None = None,
    finished: Callable[[], bool] | None = None,
) -> None:
    """Run ``cfg.learners`` learner processes on this node and wait for them.

    A SIGINT or SIGTERM is passed on to the learners once (they save and stop); the main
    learner writes where it stopped to ``note``, printed here once all have stopped.
    ``finished`` tells whether training had finished when a signal came anyway.

    Raises:
        UserError: a learner failed (its error is in the log above and in the
            experiment's log).
    """
    command = torchrun_command(cfg, module_args)
    log.info(
        "launching %d learner(s) on node %d/%d: %s",
        cfg.learners,
        cfg.node_rank,
        cfg.nnodes,
        " ".join(command),
    )
    env = dict(os.environ, OMP_NUM_THREADS=str(cfg.threads_per_learner))
    if note is not None:
        note.unlink(missing_ok=True)
        env[STOP_NOTE_ENV] = str(note)
    # The agent leads a process group of its own (with its learners), so that a Ctrl-C at
    # the terminal reaches it once, through this process; it is also told to stop when
    # this process dies.
    proc = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=_stop_with_parent)
    first: list[float] = []
    got: list[int] = []

    def forward(signum: int, frame: object) -> None:
        now = time.monotonic()
        if not first:
            first.append(now)
            got.append(signum)
            proc.send_signal(signum)  # the agent passes it to the learners, which save and stop
        elif now - first[0] >= SAME_STOP_S:
            os.killpg(proc.pid, signal.SIGKILL)  # a second request: stop now

    previous = {}
    if _main_thread():
        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        returncode = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:  # an exception here: do not leave the learners behind
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if returncode == STOPPED_EXIT or got:
        said = ""
        if note is not None and note.is_file():
            said = note.read_text().strip()
            note.unlink()
        name = signal.Signals(got[0]).name if got else "a signal"
        if not said and finished is not None and finished():
            said = (
                f"stopped by {name} as training finished (its outputs are written); "
                "rerun the same command to continue"
            )
        raise TrainingStopped(
            said
            or f"stopped by {name} before training saved anything new; rerun the same command to continue"
        )
    if returncode != 0:
        raise UserError(
            f"distributed training failed: torchrun exited with status "
            f"{returncode}; the failing learner's error is printed above"
        )


#: Seconds after a first signal in which another one is the same request.
SAME_STOP_S = 2.0


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _stop_with_parent() -> None:
    """In the agent before it starts: SIGTERM when the launching process dies (Linux's
    ``PR_SET_PDEATHSIG``), so a killed ``asrkit run`` leaves no learners behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the parent's handlers still pass signals on


def check_world(cfg: StrategyConfig, ctx: DistContext) -> None:
    if ctx.world_size != cfg.world_size:
        raise ConfigError(
            f"torchrun started {ctx.world_size} learners but strategy.learners x "
            f"strategy.nnodes = {cfg.world_size}; make them agree"
        )
