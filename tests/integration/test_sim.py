"""The simulator against reality: simulated learners are the real trainers, so simulated
SYNC ends on bitwise the same model as torchrun's SYNC learners on the same data. Two
learners add two gradients, the same in any order; with more, gloo's ring all-reduce adds
each chunk in another order, so torchrun's learners sum in rank order
(``strategy.ordered_sum``), as the simulator does."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from asrkit.config import compose, to_object
from asrkit.errors import STOPPED_EXIT, UserError
from asrkit.sim.network import NETWORKS
from asrkit.sim.run import StepCost, simulate
from tests.helpers import REPO, free_port, make_data_dir, run_cli

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(600)]

TRAIN = (
    "model=tiny",
    "train.epochs=3",
    "train.max_batch=4",
    "train.progress=false",
    "decode=greedy",
    "features.nj=1",
    "features.num_mel_bins=23",
    "tokenizer=char",
)


def _prepare(root: Path) -> list[str]:
    for i, name in enumerate(("train", "train_dev", "test")):
        make_data_dir(root / "data" / name, utts=8, seed=10 * i)
    common = [f"data_root={root / 'data'}", f"feats_root={root / 'fbank'}", *TRAIN]
    result = run_cli("run", "--stage", "2", "--stop-stage", "3", f"exp_dir={root / 'prep'}", *common)
    assert result.returncode == 0, result.stderr[-3000:]
    return common


def _experiment(root: Path, name: str) -> Path:
    exp = root / name
    shutil.copytree(root / "prep" / "tokenizer", exp / "tokenizer")
    return exp


@pytest.mark.parametrize(
    ("learners", "ordered", "fused"),
    # 4 learners unfused is the heavy tier's (the fused case covers 4 ordered learners here).
    [(2, False, False), pytest.param(4, True, False, marks=pytest.mark.heavy), (4, True, True)],
)
def test_simulated_sync_learners_end_on_torchruns_model_bitwise(
    tmp_path: Path, learners: int, ordered: bool, fused: bool
) -> None:
    common = _prepare(tmp_path)
    strategy = [
        "strategy=sync",
        f"strategy.learners={learners}",
        f"strategy.ordered_sum={str(ordered).lower()}",
        f"optim.fused={str(fused).lower()}",  # the study's and the speed benchmark's optimizer
    ]
    real = _experiment(tmp_path, "torchrun")
    command = [sys.executable, "-m", "asrkit", "run", "--stage", "4", "--stop-stage", "4", f"exp_dir={real}"]
    command += [*common, *strategy, f"strategy.master_port={free_port()}", "strategy.timeout_s=120"]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((real / "learners.json").read_text())["learners"] == learners

    sim = _experiment(tmp_path, "sim")
    cfg = to_object(compose([*common, *strategy, f"exp_dir={sim}"]))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each torchrun learner (strategy.threads_per_learner)
    try:
        outcome = simulate(
            cfg,
            data_root=tmp_path / "data",
            exp_dir=sim,
            network=NETWORKS["infiniband"],
            cost=StepCost(step_s=0.01, frame_s=1e-5),
        )
    finally:
        torch.set_num_threads(threads)
    ours = torch.load(sim / "model.pt", map_location="cpu", weights_only=False)
    theirs = torch.load(real / "model.pt", map_location="cpu", weights_only=False)
    assert ours["meta"] == theirs["meta"]
    for key, value in theirs["model"].items():
        assert torch.equal(ours["model"][key], value), key
    history = json.loads((sim / "train_summary.json").read_text())["history"]
    real_history = json.loads((real / "train_summary.json").read_text())["history"]
    assert [h["loss"] for h in history] == [h["loss"] for h in real_history]
    record = json.loads((sim / "sim.json").read_text())
    assert outcome.virtual_s > 0 and record["learners"] == learners
    assert 0 < record["cpu_s"] <= record["real_s"] * 1.5  # one thread: about its wall time


@pytest.mark.heavy
def test_asrkit_simulate_measures_a_cost_once_and_repeats_bitwise(tmp_path: Path) -> None:
    """The command: 4 ADPSGD learners with a random ring and a 2x straggler (asynchrony
    resolved in virtual time) twice, the second run with the cost the first measured."""
    common = _prepare(tmp_path)
    exp = tmp_path / "prep"
    settings = [
        *common,
        f"exp_dir={exp}",
        "strategy=adpsgd",
        "strategy.learners=4",
        "strategy.pattern=random",
        "strategy.straggler.mode=one",
        "strategy.straggler.factor=2",
    ]
    first = run_cli("simulate", "--out", str(tmp_path / "first"), *settings)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "measured now, saved as" in first.stderr
    costs = list((exp / "sim").glob("step_cost_b*_f*.json"))
    assert len(costs) == 1 and json.loads(costs[0].read_text())["frame_s"] > 0
    second = run_cli("simulate", "--out", str(tmp_path / "second"), *settings)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"from {costs[0]}" in second.stderr
    a = torch.load(tmp_path / "first" / "model.pt", map_location="cpu", weights_only=False)["model"]
    b = torch.load(tmp_path / "second" / "model.pt", map_location="cpu", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    runs = [json.loads((tmp_path / d / "sim.json").read_text()) for d in ("first", "second")]
    assert runs[0]["virtual_s"] == runs[1]["virtual_s"] > 0
    detail = json.loads((tmp_path / "first" / "learners.json").read_text())["learners_detail"]
    assert detail[3]["straggler_delay_s"] > 0 and detail[0]["straggler_delay_s"] == 0
    again = run_cli("simulate", "--out", str(tmp_path / "first"), *settings)
    assert again.returncode == 0 and "finished before" in again.stderr


def test_asrkit_simulate_names_what_is_missing(tmp_path: Path) -> None:
    result = run_cli("simulate", f"exp_dir={tmp_path / 'nothing'}", "strategy=sync", "strategy.learners=2")
    assert result.returncode == 2
    assert "tokenizer is missing" in result.stderr and "--stop-stage 3" in result.stderr
    bad = run_cli("simulate", "--bandwidth-gbps", "0", f"exp_dir={tmp_path}", "strategy=sync")
    assert bad.returncode == 2 and "--bandwidth-gbps > 0" in bad.stderr


def test_the_simulator_benchmark_reports_a_ratio_per_strategy_and_learner_count(tmp_path: Path) -> None:
    from asrkit.bench.sim import bench_sim

    _prepare(tmp_path)
    threads = torch.get_num_threads()
    result = bench_sim(
        tmp_path / "data" / "train",
        learners=(2,),
        strategies=("sync", "adpsgd"),
        utterances=8,
        global_batches=(4,),
        epochs=1,
        size="tiny",
        model=("model.hidden=8",),
    )
    assert result["model"] == "tiny model.hidden=8"
    assert result["utterances"] == 8 and set(result) >= {"sync_n2_b4", "adpsgd_n2_b4"}
    rows = result["detail"]
    assert [r["learners"] for r in rows] == [1, 2, 2]
    assert all(r["samples_per_real_s"] > 0 for r in rows)
    assert rows[0]["samples"] == rows[1]["samples"] == 8  # SYNC: every utterance once
    assert rows[2]["samples"] >= 8  # ADPSGD: at least the set, by its progress
    assert result["threads"] == 1 and torch.get_num_threads() == threads  # restored
    assert result["sync_n2_b4"] == pytest.approx(
        rows[1]["samples_per_real_s"] / rows[0]["samples_per_real_s"], rel=1e-2
    )
    with pytest.raises(UserError, match="give a bigger set with --data-dir"):
        bench_sim(tmp_path / "data" / "train", learners=(2,), utterances=8, global_batches=(8,), size="tiny")


@pytest.mark.slow
def test_the_agreement_benchmark_compares_dev_loss_curves_and_straggler_ratios(tmp_path: Path) -> None:
    from asrkit.bench.plots import plot
    from asrkit.bench.sim_agreement import bench_sim_agreement

    _prepare(tmp_path)
    result = bench_sim_agreement(
        tmp_path / "data" / "train",
        curves=(("adpsgd", 2),),
        seeds=(1, 2),
        utterances=8,
        global_batch=2,
        epochs=2,
        throughput_learners=(2,),
        measure_learners=(2,),
        throughput_epochs=1,
        size="tiny",
    )
    curve = result["curves"]["adpsgd_n2"]
    assert [r["epoch"] for r in curve["epochs"]] == [1, 2]
    for row in curve["epochs"]:
        assert row["real_min"] <= row["real_mean"] <= row["real_max"]
        assert row["inside"] == (row["real_min"] <= row["sim_mean"] <= row["real_max"])
    assert curve["within_spread"] == all(r["inside"] for r in curve["epochs"])
    row = result["throughput"]["n2"]
    simulated, measured = row["simulated"], row["measured"]
    assert set(simulated["samples_per_s"]) == {"sync_none", "adpsgd_none", "sync_one", "adpsgd_one"}
    assert all(v > 0 for v in [*simulated["samples_per_s"].values(), *measured["samples_per_s"].values()])
    assert simulated["sync_straggler_over_equal"] < 0.8  # the simulated straggler holds SYNC up
    assert row["straggler_ratio_sim_over_measured"] == pytest.approx(
        simulated["adpsgd_over_sync_straggler_2x"] / measured["adpsgd_over_sync_straggler_2x"], rel=1e-2
    )
    assert set(result["step_costs"]) == {"n2", "n2_held_out"}
    assert plot("sim_agreement", result, tmp_path / "plots") is not None


@pytest.mark.heavy
def test_a_finished_simulation_answers_only_the_same_question(tmp_path: Path) -> None:
    """Another bandwidth lands in another default dir; given the same --out it is refused
    with the difference named; non-finite network numbers are refused."""
    common = _prepare(tmp_path)
    settings = [
        *common,
        f"exp_dir={tmp_path / 'prep'}",
        "strategy=sync",
        "strategy.learners=2",
        "train.epochs=1",
    ]
    first = run_cli("simulate", *settings)
    assert first.returncode == 0, first.stderr[-3000:]
    other = run_cli("simulate", "--bandwidth-gbps", "1", *settings)
    assert other.returncode == 0 and "finished before" not in other.stderr, other.stderr[-3000:]
    runs = sorted((tmp_path / "prep" / "sim").glob("sync_n2_infiniband_seed1_*"))
    assert len(runs) == 2, runs
    bandwidths = {json.loads((r / "sim.json").read_text())["network"]["bandwidth_gbps"] for r in runs}
    assert bandwidths == {1.0, 100.0}
    out = ["--out", str(runs[0])]
    theirs = json.loads((runs[0] / "sim.json").read_text())["network"]["bandwidth_gbps"]
    again = run_cli("simulate", *out, "--bandwidth-gbps", str(theirs), *settings)
    assert again.returncode == 0 and "finished before" in again.stderr, again.stderr[-3000:]
    mismatch = run_cli("simulate", *out, "--bandwidth-gbps", "7", *settings)
    assert mismatch.returncode == 2, mismatch.stderr[-3000:]
    line = [ln for ln in mismatch.stderr.splitlines() if ln.startswith("asrkit: error:")]
    assert len(line) == 1 and f"network.bandwidth_gbps: {theirs} there, 7.0 here" in line[0], line
    assert "--force" in line[0] and "--out" in line[0]
    lr = run_cli("simulate", *out, *settings, "optim.lr=0.5", "--bandwidth-gbps", str(theirs))
    assert lr.returncode == 2 and "optim.lr" in lr.stderr, lr.stderr[-3000:]
    for flag, value in (("--bandwidth-gbps", "nan"), ("--latency-us", "inf"), ("--bandwidth-gbps", "-1")):
        bad = run_cli("simulate", flag, value, *settings)
        assert bad.returncode == 2 and "finite" in bad.stderr, (flag, value, bad.stderr[-2000:])
    # Communication at a chosen ratio: another dir, the same SYNC model (its updates do not
    # depend on time), every message charged as more bytes, so more virtual time.
    ratio = run_cli("simulate", "--comm-ratio", "0.5", *settings)
    assert ratio.returncode == 0 and "communication at ratio 0.5" in ratio.stderr, ratio.stderr[-3000:]
    made = set(sorted((tmp_path / "prep" / "sim").glob("sync_n2_infiniband_seed1_*"))) - set(runs)
    assert len(made) == 1
    charged, plain = (
        json.loads((r / "sim.json").read_text()) for r in (made.pop(), runs[bandwidths_of(runs).index(100.0)])
    )
    assert charged["network"]["bytes_scale"] > 1 and charged["settings"]["network.comm_ratio"] == 0.5
    assert charged["virtual_s"] > plain["virtual_s"]


def bandwidths_of(runs: list[Path]) -> list[float]:
    return [json.loads((r / "sim.json").read_text())["network"]["bandwidth_gbps"] for r in runs]


def test_a_step_cost_is_keyed_on_the_model(tmp_path: Path) -> None:
    from asrkit.sim.experiment import default_step_cost

    tiny = to_object(compose(["model=tiny", f"exp_dir={tmp_path}"]))
    demo = to_object(compose(["model=demo", f"exp_dir={tmp_path}"]))
    longer = to_object(compose(["model=tiny", f"exp_dir={tmp_path}", "train.epochs=99", "optim.lr=0.3"]))
    assert default_step_cost(tiny) != default_step_cost(demo)
    assert default_step_cost(tiny) == default_step_cost(longer)  # epochs and lr do not change a step


@pytest.mark.parametrize(
    "rounds", [pytest.param(1, marks=pytest.mark.heavy), pytest.param(8, marks=pytest.mark.slow)]
)
def test_signals_stop_asrkit_simulate_in_one_line_and_it_runs_again(tmp_path: Path, rounds: int) -> None:
    """SIGINT/SIGTERM bursts at random moments of a simulation (4 ADPSGD learners on
    threads of one process): exit 3 and one line every time (before: ``terminate called
    without an active exception``, exit 134), then the same command finishes."""
    common = _prepare(tmp_path)
    settings = [
        *common,
        f"exp_dir={tmp_path / 'prep'}",
        "strategy=adpsgd",
        "strategy.learners=4",
        "train.epochs=30",
    ]
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "asrkit", "simulate", "--out", str(out), *settings]
    rng = random.Random(rounds)
    for _ in range(rounds):
        log = tmp_path / "stderr.txt"
        with log.open("w") as sink:
            proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=sink, text=True)
            end = time.monotonic() + 300
            while "step cost (" not in log.read_text():  # the simulation is about to start
                assert proc.poll() is None and time.monotonic() < end, log.read_text()[-3000:]
                time.sleep(0.05)
            time.sleep(rng.uniform(0.2, 3.0))
            first = rng.choice([signal.SIGINT, signal.SIGTERM])
            for sig in [first] + [rng.choice([signal.SIGINT, signal.SIGTERM]) for _ in range(5)]:
                if proc.poll() is None:
                    proc.send_signal(sig)
                time.sleep(0.03)
            proc.wait(timeout=120)
        err = log.read_text()
        assert proc.returncode == STOPPED_EXIT, err[-3000:]
        lines = [ln for ln in err.splitlines() if ln.startswith("asrkit:")]
        # The burst's SIGINT may be named though its SIGTERM came first (handlers of signals
        # that arrive during one C call run in signal-number order).
        assert len(lines) == 1 and re.search(r"stopped by SIG(INT|TERM) during the simulation", lines[0]), (
            err[-3000:]
        )
        assert "terminate called" not in err and "Traceback" not in err, err[-3000:]
        assert not (out / "sim.json").exists()
    short = [s if s != "train.epochs=30" else "train.epochs=2" for s in settings]
    done = run_cli("simulate", "--out", str(out), *short)
    assert done.returncode == 0 and (out / "sim.json").is_file(), done.stderr[-3000:]
