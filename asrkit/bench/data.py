"""Streaming training data at 10 and 100 hours: memory, start-up, loader speed, data wait.

The corpora are AN4's real feature arks listed many times under new ids
(:func:`asrkit.data.listed.list_corpus`), so every read is a real read of a real matrix.

- **Memory and start-up**: one learner trains ``steps`` steps of the demo model from each
  corpus in its own process (:mod:`asrkit.bench.data_worker`, the training stage's code);
  its peak resident memory comes from ``wait4`` (the largest process's), the peak of the
  proportional set size summed over the learner and its reading workers is sampled, and
  its time to the first step runs from the process's start to the end of that step.
  Targets: 100 h / 10 h memory ratio <= 1.10, <= 1.5 GB; first step at 100 h within 15 s.
- **Loader throughput**: padded, normalised batches of the demo's batch settings, read with
  the default read-ahead (``train.loader``: worker processes; threads and the consumer's
  own thread for reference) from the 10-hour corpus (page cache warm), against a plain
  sequential read of the same arks (every matrix parsed, nothing else) in the same run.
  Targets: >= 250,000 frames/s and >= 0.8 x the sequential read.
- **Data wait**: the fraction of the training loop's time that steps waited for batches
  in those runs (target <= 5%).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from asrkit.config import compose, to_object
from asrkit.data.datadir import read_kaldi_map
from asrkit.data.kaldi_table import read_matrices
from asrkit.data.listed import list_corpus
from asrkit.errors import DataError
from asrkit.features.cmvn import read_cmvn
from asrkit.loader.batch import CmvnNormalizer
from asrkit.loader.opening import open_data_dir
from asrkit.loader.planning import BucketBatches
from asrkit.targets.tokenizer import TokenizerConfig, train_tokenizer
from asrkit.training.allocator import retain_freed_memory
from asrkit.training.trainer import loader_settings


def bench_data(
    data_dir: str | Path,
    *,
    hours: tuple[float, ...] = (10.0, 100.0),
    steps: int = 50,
    loader_seconds: float = 15.0,
) -> dict:
    """Measure the streaming data path on listed corpora of ``hours`` (the first is the base).

    Args:
        data_dir: an AN4 recipe data dir with features; its sibling ``train`` (the
            training set) is listed, and ``train_dev`` (or ``data_dir`` itself) validates.
        hours: corpus sizes; the memory ratio is last / first.
        steps: training steps per run.
        loader_seconds: how long the loader alone is timed.
    """
    data_dir = Path(data_dir)
    train_dir = data_dir.parent / "train" if (data_dir.parent / "train" / "feats.scp").is_file() else data_dir
    dev_dir = (
        data_dir.parent / "train_dev" if (data_dir.parent / "train_dev" / "feats.scp").is_file() else data_dir
    )
    if not (train_dir / "feats.scp").is_file():
        raise DataError(
            f"{train_dir}/feats.scp: not found; compute AN4's features first "
            "(recipes/an4/run.sh --stop-stage 2)"
        )
    with tempfile.TemporaryDirectory(prefix="asrkit-bench-data-") as tmp:
        root = Path(tmp) / "data"
        corpora = {h: list_corpus(train_dir, root / _name(h), hours=h) for h in hours}
        list_corpus(dev_dir, root / "dev", hours=0.0)
        tokenizer_dir = Path(tmp) / "tokenizer"
        train_tokenizer(read_kaldi_map(train_dir / "text"), tokenizer_dir, TokenizerConfig(kind="char"))
        runs = {h: _train_run(Path(tmp), root, h, steps=steps, tokenizer_dir=tokenizer_dir) for h in hours}
        loader = _loader_rate(root / _name(hours[0]), tokenizer_dir, seconds=loader_seconds)
    base, big = runs[hours[0]], runs[hours[-1]]
    result: dict = {
        "corpora_hours": [corpora[h]["hours"] for h in hours],
        "utterances": [corpora[h]["utterances"] for h in hours],
        "peak_rss_mb": [r["peak_rss_mb"] for r in runs.values()],
        "peak_pss_mb": [r["peak_pss_mb"] for r in runs.values()],
        "rss_ratio": round(big["peak_rss_mb"] / base["peak_rss_mb"], 3),
        "pss_ratio": round(big["peak_pss_mb"] / max(base["peak_pss_mb"], 1e-9), 3),
        "first_step_s": [r["first_step_s"] for r in runs.values()],
        "data_wait_fraction": [r["data_wait_fraction"] for r in runs.values()],
        "loader_frames_per_s": loader["loader_frames_per_s"],
        "sequential_frames_per_s": loader["sequential_frames_per_s"],
        "loader_vs_sequential": round(loader["loader_frames_per_s"] / loader["sequential_frames_per_s"], 3),
        "steps": steps,
        "detail": {"runs": {str(h): r for h, r in runs.items()}, "loader": loader},
    }
    result["targets_met"] = {
        "rss_ratio<=1.10": result["rss_ratio"] <= 1.10,
        "pss_ratio<=1.10": result["pss_ratio"] <= 1.10,
        "rss<=1.5GB": max(result["peak_rss_mb"]) <= 1536,
        "pss_with_workers<=1.5GB": max(result["peak_pss_mb"]) <= 1536,
        "first_step_s<=15": big["first_step_s"] <= 15.0,
        "loader>=250k_frames/s": result["loader_frames_per_s"] >= 250_000,
        "loader>=0.8x_sequential": result["loader_vs_sequential"] >= 0.8,
        "data_wait<=5%": max(result["data_wait_fraction"]) <= 0.05,
    }
    return result


def _name(hours: float) -> str:
    return f"train{hours:g}h"


def _train_run(tmp: Path, root: Path, hours: float, *, steps: int, tokenizer_dir: Path) -> dict:
    """One learner, ``steps`` steps of the demo model from the ``hours`` corpus, in its own
    process; its peak memory (wait4), time to the first step and data wait."""
    exp = tmp / f"exp{hours:g}h"
    shutil.copytree(tokenizer_dir, exp / "tokenizer")
    log = tmp / f"train{hours:g}h.log"
    cmd = [
        sys.executable,
        "-m",
        "asrkit.bench.data_worker",
        str(exp),
        f"data_root={root}",
        f"data.train_set={_name(hours)}",
        "data.dev_set=dev",
        "tokenizer=char",  # the tokenizer trained above (the recipe's default is phones)
        "train.epochs=1",
        f"train.max_steps={steps}",
        "train.progress=false",
        "resume=false",
    ]
    with open(log, "w") as out:
        began = time.time()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        peak_pss = _PeakPss(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        peak_pss.stop()
    if proc.returncode != 0:
        tail = log.read_text().strip().splitlines()[-3:]
        raise RuntimeError(f"bench data: the {hours:g}-hour learner failed ({' | '.join(tail)})")
    summary = json.loads((exp / "train_summary.json").read_text())
    return {
        "peak_rss_mb": round(usage.ru_maxrss / 1024.0, 1),
        "peak_pss_mb": round(peak_pss.peak_kb / 1024.0, 1),
        "first_step_s": round(summary["first_step_time"] - began, 2),
        "data_wait_s": summary["data_wait_s"],
        "train_s": summary["train_s"],
        "data_wait_fraction": round(summary["data_wait_s"] / max(summary["train_s"], 1e-9), 4),
        "steps": summary["steps"],
    }


class _PeakPss:
    """The peak, sampled every 0.1 s, of the proportional set size summed over a process and
    its descendants (its reading workers): memory they share (the forked learner's pages,
    the read-ahead ring) counts once. ``wait4``'s peak RSS is the largest single process's,
    and counts shared pages in each process that maps them."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_kb = pid, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._done.wait(0.1):
            self.peak_kb = max(self.peak_kb, sum(_pss_kb(p) for p in _tree(self.pid)))


def _tree(pid: int) -> list[int]:
    pids, k = [pid], 0
    while k < len(pids):
        for task in Path(f"/proc/{pids[k]}/task").glob("*/children"):
            try:
                pids.extend(int(c) for c in task.read_text().split())
            except OSError:
                pass
        k += 1
    return pids


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:  # ended meanwhile
        pass
    return 0


def _loader_rate(data_dir: Path, tokenizer_dir: Path, *, seconds: float) -> dict:
    """Frames/s of the loader (default read-ahead, demo batches) and of a sequential read."""
    from asrkit.targets.tokenizer import Tokenizer

    cfg = to_object(compose([])).train  # the recipe's (demo's) batch and read-ahead settings
    retain_freed_memory()  # as every training process does (asrkit.training.allocator)
    normalize = CmvnNormalizer("global", global_stats=read_cmvn(data_dir / "cmvn_global.ark"))
    source = open_data_dir(data_dir, normalize, tokenizer=Tokenizer(tokenizer_dir))
    settings = loader_settings(cfg)
    loader_rate = _read_rate(BucketBatches(source, seed=1, **settings), seconds)
    # For reference: the other loader kind, and the same batches read in the consumer's own
    # thread (no read-ahead, so no hand-off between workers and the consumer).
    other = "thread" if cfg.loader == "process" else "process"
    other_rate = _read_rate(BucketBatches(source, seed=1, **{**settings, "loader": other}), seconds / 2)
    in_consumer = _read_rate(BucketBatches(source, seed=1, **{**settings, "prefetch": 0}), seconds / 2)
    # The same arks read front to back, each matrix parsed (best of three passes).
    best = float("inf")
    seq_frames = 0
    for _ in range(3):
        seq_frames, began = 0, time.monotonic()
        for ark in source.arks:
            for _, mat in read_matrices(f"ark:{ark}"):
                seq_frames += mat.shape[0]
        best = min(best, time.monotonic() - began)
    return {
        "loader_frames_per_s": round(loader_rate),
        f"loader_{other}_frames_per_s": round(other_rate),
        "loader_in_consumer_thread_frames_per_s": round(in_consumer),
        "sequential_frames_per_s": round(seq_frames / best),
        "sequential_frames": seq_frames,
        "prefetch": cfg.prefetch,
        "loader": cfg.loader,
        "workers": cfg.loader_workers,
        "max_frames": cfg.max_frames,
        "max_batch": cfg.max_batch,
    }


def _read_rate(batches: BucketBatches, seconds: float) -> float:
    """Frames/s delivered by ``batches`` over epochs 1, 2, ... for ``seconds`` (epoch 0's
    first 50 batches warm the page cache and the allocator); stops its workers after."""
    with batches:
        batches.start()  # as training does: workers forked before the clock starts
        for _ in zip(range(50), batches.epoch(0), strict=False):
            pass
        frames, began = 0, time.monotonic()
        epoch = 1
        while time.monotonic() - began < seconds:
            for batch in batches.epoch(epoch):
                frames += batch.frames
                if time.monotonic() - began >= seconds:
                    break
            epoch += 1
        return frames / (time.monotonic() - began)
