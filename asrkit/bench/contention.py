"""Training on a shared CPU: throughput beside one busy process over throughput alone.

A workstation or a shared cluster node always runs other processes. With torch's default
of one intra-op thread per core and OpenMP threads that spin while they wait for each
other, one competing busy process can cost a small LSTM's training far more than its
fair share of the cores. This benchmark measures it: training steps of the demo model on
real batches (the data dir's utterances, CTC, Adam), in a fresh process per measurement
so that each gets its own OpenMP runtime and environment, first alone, then beside a
busy process at the same priority (a Python loop), for every OpenMP wait policy in
``policies``. The figure is ``contended / alone`` frames per second (a fair share of
two cores with one competitor is 0.5 for a 2-thread run), and, per policy, its speed alone
against the default's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: The worker: ``python -c WORKER data_dir steps threads`` prints frames per second.
WORKER = """
import json, sys, time
import torch
from pathlib import Path
from asrkit.data import read_data_dir
from asrkit.data.batch import collate, make_buckets
from asrkit.features.cmvn import read_cmvn
from asrkit.models import ModelConfig, build_model
from asrkit.targets import TokenizerConfig, train_tokenizer
from asrkit.training import CmvnNormalizer, load_utterances
import tempfile

data_dir, steps, threads = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
if threads:
    torch.set_num_threads(threads)
torch.manual_seed(0)
with tempfile.TemporaryDirectory() as tmp:
    texts = read_data_dir(data_dir).text or {}
    tokenizer = train_tokenizer(texts, Path(tmp) / "tok", TokenizerConfig(kind="char"))
    normalize = CmvnNormalizer("global", global_stats=read_cmvn(data_dir / "cmvn_global.ark"))
    utts = load_utterances(data_dir, normalize, tokenizer=tokenizer)
buckets = make_buckets([u.feats.shape[0] for u in utts], max_frames=6000, max_batch=16)
batches = [collate([utts[i] for i in b]) for b in buckets[:steps]]
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
began, frames = time.monotonic(), 0
for k in range(steps):  # a small set's batches are used again
    batch = batches[k % len(batches)]
    step(batch)
    frames += batch.frames
print(json.dumps({"frames_per_s": frames / (time.monotonic() - began), "threads": torch.get_num_threads()}))
"""

BUSY = "while True:\n    pass\n"


def _measure(data_dir: Path, steps: int, threads: int, policy: str) -> dict:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy.upper()
    out = subprocess.run(
        [sys.executable, "-c", WORKER, str(data_dir), str(steps), str(threads)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def bench_contention(
    data_dir: str | Path,
    *,
    steps: int = 16,
    threads: int = 0,
    policies: tuple[str, ...] = ("default", "passive"),
) -> dict:
    """Frames per second of demo-model training steps alone and beside one busy process.

    Args:
        data_dir: a data dir with features (``feats.scp``, ``cmvn_global.ark``).
        steps: timed training steps per measurement (after 2 warm-up steps).
        threads: intra-op threads (0: torch's default, as ``train.num_threads=0``).
        policies: OpenMP wait policies to compare (``default``: the runtime's own).

    Returns:
        per policy: frames/s alone and contended, ``ratio`` = contended / alone, and
        ``alone_vs_default`` = its speed alone over the default policy's.
    """
    data_dir = Path(data_dir)
    if not (data_dir / "feats.scp").is_file():
        from asrkit.errors import DataError

        raise DataError(f"{data_dir}/feats.scp: not found; run the recipe's feature stage first")
    results: dict[str, dict] = {}
    for policy in policies:
        alone = _measure(data_dir, steps, threads, policy)
        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            time.sleep(0.5)  # the competitor is running before the worker starts
            shared = _measure(data_dir, steps, threads, policy)
        finally:
            busy.kill()
            busy.wait()
        results[policy] = {
            "threads": alone["threads"],
            "alone_frames_per_s": round(alone["frames_per_s"], 1),
            "contended_frames_per_s": round(shared["frames_per_s"], 1),
            "ratio": round(shared["frames_per_s"] / alone["frames_per_s"], 3),
        }
    base = results[policies[0]]["alone_frames_per_s"]
    for policy in policies:
        results[policy]["alone_vs_default"] = round(results[policy]["alone_frames_per_s"] / base, 3)
    return {"steps": steps, "cpus": os.cpu_count(), **{f"policy_{p}": r for p, r in results.items()}}
