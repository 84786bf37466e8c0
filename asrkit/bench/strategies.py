"""Strategy throughput: aggregate samples/s of SYNC and ADPSGD, equal speed and with a straggler.

Each configuration trains the demo model for ``epochs`` (default 3) global epochs over a
fixed subset of the data dir's utterances with 2 or 4 gloo learners (one thread each) started by
torchrun, and reads the aggregate samples/s from the learners' metrics: samples after each
learner's first step over the span from the first learner's first step to the last
learner's last step, so start-up is left out but a straggler's tail is counted. Ratios are
taken against SYNC with the same learners and the same straggler setting, measured in
the same run. On a machine with fewer cores than learners the learners share cores,
which favours whoever sleeps least; the result records the core count.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from asrkit.data import read_data_dir
from asrkit.targets import TokenizerConfig, train_tokenizer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torchrun(module: str, learners: int, args: list[str], *, what: str, timeout_s: float) -> None:
    """``python -m module ARGS`` as ``learners`` torchrun workers on this machine, one
    thread each; raises with the end of their stderr if it fails."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={learners}",
        f"--master-port={_free_port()}",
        "--max-restarts=0",
        "-m",
        module,
        *args,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-3000:]}")


def run_workers(
    tmp: Path,
    data_dir: Path,
    *,
    name: str,
    learners: int,
    strategy: str,
    pattern: str = "random",
    straggler: str = "none",
    utterances: int = 0,
    epochs: int = 3,
    held_out: bool = False,
) -> dict:
    """Train with ``learners`` torchrun workers; returns their ``learners.json`` plus the
    main learner's per-epoch ``history`` (with ``held_out``: dev loss on the last quarter
    of the data dir's utterances, which are then not trained on)."""
    if not (tmp / "tok" / "sp.model").is_file():
        train_tokenizer(read_data_dir(data_dir).text or {}, tmp / "tok", TokenizerConfig(kind="char"))
    out = tmp / f"{name}-{learners}-{straggler}"
    args = [
        str(data_dir),
        str(tmp / "tok"),
        str(out),
        strategy,
        straggler,
        str(utterances),
        str(epochs),
        pattern,
    ]
    run_torchrun(
        "asrkit.bench.strategy_worker",
        learners,
        [*args, pattern, "held-out" if held_out else "-"],
        what=f"{name} x{learners} ({straggler})",
        timeout_s=900,
    )
    result = json.loads((out / "learners.json").read_text())
    result["history"] = json.loads((out / "history.json").read_text())
    return result


def bench_strategies(
    data_dir: str | Path, *, utterances: int = 128, epochs: int = 3, learner_counts: tuple[int, ...] = (2, 4)
) -> dict:
    """Aggregate samples/s per (learners, strategy, straggler) and ratios vs SYNC."""
    data_dir = Path(data_dir)
    rows, details = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in learner_counts:
            for straggler in ("none", "one"):
                runs = {
                    s: run_workers(
                        Path(tmp),
                        data_dir,
                        name=s,
                        learners=n,
                        strategy=s,
                        straggler=straggler,
                        utterances=utterances,
                        epochs=epochs,
                    )
                    for s in ("sync", "adpsgd")
                }
                speeds = {s: r["steady_samples_per_s"] for s, r in runs.items()}
                key = f"{n}_learners_{'straggler_2x' if straggler == 'one' else 'equal_speed'}"
                rows[key] = {
                    "sync_samples_per_s": speeds["sync"],
                    "adpsgd_samples_per_s": speeds["adpsgd"],
                    "adpsgd_over_sync": round(speeds["adpsgd"] / speeds["sync"], 3),
                }
                if straggler == "one":
                    # One learner at half speed: ADPSGD keeps (n - 1/2)/n of its throughput,
                    # SYNC runs at the slow one's pace (1/2): ideal ratio (2n - 1)/n.
                    rows[key]["ideal"] = round((2 * n - 1) / n, 3)
                    if n == 4:
                        rows[key]["target"] = 1.5
                details[key] = {
                    s: [_learner_summary(m) for m in r["learners_detail"]] for s, r in runs.items()
                }
    return {
        "utterances": utterances,
        "epochs": epochs,
        "cpus": os.cpu_count(),
        "model": "demo",
        **rows,
        "detail": details,
    }


def _learner_summary(m: dict) -> dict:
    return {
        k: m[k]
        for k in ("rank", "steps", "samples", "seconds", "comm_wait_s", "averagings", "straggler_delay_s")
    }
