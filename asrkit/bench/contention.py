"""Training on a shared CPU: throughput beside one busy process over throughput alone.

A workstation or a shared cluster node always runs other processes. With torch's default
of one intra-op thread per core and OpenMP threads that spin while they wait for each
other, one competing busy process can cost a small LSTM's training far more than its
fair share of the cores; ``train.adapt_threads`` (:mod:`asrkit.threads`) trains
on the cores the others leave free instead. This benchmark measures both: demo-model
training steps on real batches (the data dir's utterances, CTC, Adam) for a fixed time, in
a fresh process per measurement (its own OpenMP runtime), first alone, then beside a busy
process at the same priority (a Python loop), with the threads ``fixed`` (as without the
governor) and ``adaptive`` (the trainer's governor, polled after every step as in
training). The figure is ``contended / alone`` frames per second of each mode (a fair
share of two cores with one competitor is 0.5 of the 2-thread speed alone), and each
mode's speed alone against the fixed one's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: The worker: ``python -c WORKER data_dir seconds threads adapt`` prints frames per second.
WORKER = """
import json, sys, time
import torch
from pathlib import Path
from asrkit.data import read_data_dir
from asrkit.loader.batch import collate, plan_buckets
from asrkit.features.cmvn import read_cmvn
from asrkit.models import ModelConfig, build_model
from asrkit.targets import TokenizerConfig, train_tokenizer
from asrkit.loader.batch import CmvnNormalizer
from asrkit.loader.opening import load_utterances
from asrkit.threads import ThreadGovernor
import tempfile

data_dir, seconds, threads = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
adapt = sys.argv[4] == "1"
if threads:
    torch.set_num_threads(threads)
torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    texts = read_data_dir(data_dir).text or {}
    tokenizer = train_tokenizer(texts, Path(tmp) / "tok", TokenizerConfig(kind="char"))
    normalize = CmvnNormalizer("global", global_stats=read_cmvn(data_dir / "cmvn_global.ark"))
    utts = load_utterances(data_dir, normalize, tokenizer=tokenizer)
buckets = plan_buckets([u.feats.shape[0] for u in utts], max_frames=6000, max_batch=16)
batches = [collate([utts[i] for i in b]) for b in buckets]
dim = utts[0].feats.shape[1]
model = build_model(ModelConfig(size="demo"), input_dim=dim, num_tokens=tokenizer.num_tokens)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

def step(batch):
    out = model(batch.feats, batch.lengths)
    loss = torch.nn.functional.ctc_loss(
        out["ctc"].transpose(0, 1), batch.targets, out["lengths"], batch.target_lengths,
        reduction="sum", zero_infinity=True) / len(batch.utts)
    opt.zero_grad()
    loss.backward()
    opt.step()

for k in range(2):  # warm-up
    step(batches[k % len(batches)])
governor = ThreadGovernor(torch.get_num_threads()) if adapt else None
began, frames, k = time.monotonic(), 0, 0
while time.monotonic() - began < seconds:  # a small set's batches are used again
    batch = batches[k % len(batches)]
    step(batch)
    if governor is not None:
        governor.poll()
    frames, k = frames + batch.frames, k + 1
print(json.dumps({"frames_per_s": frames / (time.monotonic() - began), "steps": k,
                  "threads": torch.get_num_threads()}))
"""

BUSY = "while True:\n    pass\n"


def _measure(data_dir: Path, seconds: float, threads: int, mode: str) -> dict:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    adapt = "1" if mode == "adaptive" else "0"
    out = subprocess.run(
        [sys.executable, "-c", WORKER, str(data_dir), str(seconds), str(threads), adapt],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


MODES = ("fixed", "adaptive")


def bench_contention(
    data_dir: str | Path,
    *,
    seconds: float = 20.0,
    threads: int = 0,
    modes: tuple[str, ...] = MODES,
) -> dict:
    """Frames per second of demo-model training alone and beside one busy process.

    Args:
        data_dir: a data dir with features (``feats.scp``, ``cmvn_global.ark``).
        seconds: training time per measurement (after 2 warm-up steps).
        threads: intra-op threads to start from (0: torch's default, as
            ``train.num_threads=0``).
        modes: ``fixed`` (the threads stay as started) and/or ``adaptive``
            (``train.adapt_threads``).

    Returns:
        per mode: frames/s alone and contended, the threads at the end of each,
        ``ratio`` = contended / alone, and ``alone_vs_fixed`` = its speed alone over the
        first mode's.
    """
    data_dir = Path(data_dir)
    if not (data_dir / "feats.scp").is_file():
        from asrkit.errors import DataError

        raise DataError(f"{data_dir}/feats.scp: not found; run the recipe's feature stage first")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        from asrkit.errors import ConfigError

        raise ConfigError(f"contention modes {unknown} are unknown; choose from {list(MODES)}")
    results: dict[str, dict] = {}
    for mode in modes:
        alone = _measure(data_dir, seconds, threads, mode)
        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            time.sleep(0.5)  # the competitor is running before the worker starts
            shared = _measure(data_dir, seconds, threads, mode)
        finally:
            busy.kill()
            busy.wait()
        results[mode] = {
            "threads_alone": alone["threads"],
            "threads_contended": shared["threads"],
            "alone_frames_per_s": round(alone["frames_per_s"], 1),
            "contended_frames_per_s": round(shared["frames_per_s"], 1),
            "ratio": round(shared["frames_per_s"] / alone["frames_per_s"], 3),
        }
    base = results[modes[0]]["alone_frames_per_s"]
    for mode in modes:
        results[mode]["alone_vs_fixed"] = round(results[mode]["alone_frames_per_s"] / base, 3)
    # The figure of the issue: what training gets beside a competitor (the adaptive mode
    # where measured) over what it got alone as it always did (fixed threads).
    last = modes[-1]
    return {
        "seconds": seconds,
        "cpus": os.cpu_count(),
        **{f"mode_{m}": r for m, r in results.items()},
        "contention_ratio": round(results[last]["contended_frames_per_s"] / base, 3),
    }
