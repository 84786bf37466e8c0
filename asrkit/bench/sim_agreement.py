"""The simulator against torchrun at 2 and 4 learners: dev-loss curves and straggler
throughput, both sides built from the same composed settings and the same in-memory data
(:mod:`asrkit.bench.sim_worker` under torchrun, gloo, one thread per learner;
:func:`asrkit.sim.run.simulate` in this process, with a step cost measured here at one
thread).

* **Dev-loss curves** (``curves``): for each asynchronous strategy and learner count,
  ``seeds`` real runs and the same seeds simulated, trained on three quarters of the
  utterances and validated on the held-out quarter. Per epoch: the real runs' range over
  seeds and both sides' means. The simulator agrees where its mean lies within the real
  range at every epoch (``within_spread``); ``worst_gap_over_spread`` is the largest
  ``|sim mean - real mean|`` over the real range's width.
* **Straggler throughput**: aggregate samples/s (``steady_samples_per_s``, the strategy
  benchmark's measure) of SYNC and ADPSGD with equal learners and with one learner 2x
  slower, simulated, against torchrun measured in the same run for ``measure_learners``
  (learners must not share cores for a fair measurement), and against the 16-core
  recording ``bench/recorded/strategies_h100-host_16cpu_4learners_8ep.json`` (same settings)
  at 4 learners when it is there. The figure compared is ADPSGD's samples/s over SYNC's
  under the straggler; agreement is within 10%.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from asrkit.bench.sim import bench_parts, experiment_data, read_bench_data, split_utterances
from asrkit.bench.strategies import run_torchrun
from asrkit.config import compose, to_object
from asrkit.data import read_data_dir
from asrkit.sim.calibrate import measure_step_cost
from asrkit.sim.network import NETWORKS
from asrkit.sim.run import StepCost, simulate
from asrkit.targets import TokenizerConfig, train_tokenizer

#: (strategy, learners) whose dev-loss curves are compared.
CURVES: tuple[tuple[str, int], ...] = (("adpsgd", 2), ("adpsgd", 4), ("delay_by_one", 2), ("hybrid", 4))

#: The strategy benchmark's 4-learner recording on a 16-core host (one core per learner).
RECORDED = Path("bench/recorded/strategies_h100-host_16cpu_4learners_8ep.json")

#: Settings both sides share (those of :mod:`asrkit.bench.strategy_worker`, whose runs
#: were recorded, with ``global_batch`` 16 and the demo model).
COMMON = (
    "train.max_frames=12000",
    "optim.lr=1e-3",
    "schedule.warmup_steps=0",
    "specaug.enabled=false",
    "train.progress=false",
    "train.log_every=1000000",
    "train.in_memory=true",
    "train.prefetch=0",
    "train.adapt_threads=false",
    "strategy.timeout_s=300",
    "strategy.threads_per_learner=1",
    "strategy.straggler.factor=2",
)


#: The study's model with the papers' SGD recipe on AN4's hybrid experiment (frame CE on
#: tied states, a model that learns): ``bench_sim_agreement(..., experiment=SGD_HYBRID)``,
#: run in recipes/an4 after its stages 0-4 (``asrkit bench sim_agreement_ce``).
SGD_HYBRID: tuple[str, ...] = (
    "+experiment=an4_hybrid",
    "model.hidden=128",
    "model.layers=2",
    "model.stack=3",
    "model.subsample=3",
    "train.max_frames=100000000",
    "optim.fused=true",
)


class _Sides:
    """Runs one configuration on either side; step costs are measured once per learner
    count. ``experiment``: overrides naming an experiment whose own data (the first
    ``utterances`` training utterances, its dev set) and objective both sides train on."""

    def __init__(
        self,
        data_dir: Path,
        tmp: Path,
        *,
        utterances: int,
        global_batch: int,
        size: str,
        network: str,
        experiment: tuple[str, ...] = (),
    ) -> None:
        self.data_dir, self.tmp, self.utterances, self.network = data_dir, tmp, utterances, network
        self.experiment = experiment
        self.costs: dict[tuple[int, bool], StepCost] = {}
        self.runs = 0
        if experiment:
            self.like, self.train, self.dev = experiment_data(list(experiment), utterances)
            self.tokenizer = self.like.tokenizer
            self.common = [*COMMON, *experiment, f"train.max_batch={global_batch}"]
            return
        self.tok_dir = tmp / "tokenizer"
        self.tokenizer = train_tokenizer(
            read_data_dir(data_dir).text or {}, self.tok_dir, TokenizerConfig(kind="char")
        )
        self.utts = read_bench_data(data_dir, self.tokenizer)
        if len(self.utts) < utterances:
            raise ValueError(f"{data_dir}: {len(self.utts)} utterances; the benchmark needs {utterances}")
        dim = int(self.utts[0].feats.shape[1])
        self.common = [
            *COMMON,
            f"train.max_batch={global_batch}",
            f"model.size={size}",
            f"features.num_mel_bins={dim}",
        ]

    def overrides(self, strategy: str, learners: int, *, seed: int, epochs: int, straggler: str) -> list[str]:
        chosen = [
            f"strategy={strategy}",
            f"strategy.learners={learners}",
            f"strategy.straggler.mode={straggler}",
        ]
        if strategy != "sync":
            chosen.append("strategy.pattern=random")
        elif self.experiment:
            # Gradients added in rank order on both sides, so torchrun's SYNC is bitwise the
            # simulator's at any learner count (gloo's ring adds 4 in another order).
            chosen.append("strategy.ordered_sum=true")
        return [*self.common, *chosen, f"seed={seed}", f"train.epochs={epochs}"]

    def real(self, overrides: list[str], learners: int, *, held_out: bool) -> dict[str, Any]:
        self.runs += 1
        out = self.tmp / f"real{self.runs}"
        if self.experiment:
            args = ["-", "-", str(out), str(self.utterances), "experiment"]
        else:
            args = [str(self.data_dir), str(self.tok_dir), str(out), str(self.utterances)]
            args.append("held-out" if held_out else "-")
        run_torchrun(
            "asrkit.bench.sim_worker",
            learners,
            [*args, *overrides],
            what=f"torchrun {' '.join(overrides[-5:])}",
            timeout_s=1800,
        )
        return _outcome(out)

    def simulated(self, overrides: list[str], learners: int, *, held_out: bool) -> dict[str, Any]:
        self.runs += 1
        out = self.tmp / f"sim{self.runs}"
        cfg = to_object(compose([*overrides, f"exp_dir={out}"]))
        if self.experiment:
            parts = bench_parts(cfg, self.train, self.dev, self.tokenizer, like=self.like)
        else:
            train, dev = split_utterances(self.utts, self.utterances, held_out=held_out)
            parts = bench_parts(cfg, train, dev, self.tokenizer)
        key = (learners, held_out)
        threads = torch.get_num_threads()
        try:
            if key not in self.costs:
                torch.set_num_threads(1)  # as each torchrun learner
                self.costs[key] = measure_step_cost(cfg, parts)
            torch.set_num_threads(threads)
            simulate(
                cfg,
                data_root=Path(cfg.data_root) if self.experiment else self.data_dir.parent,
                exp_dir=out,
                network=NETWORKS[self.network],
                cost=self.costs[key],
                parts=parts,
            )
        finally:
            torch.set_num_threads(threads)
        return _outcome(out)


def _outcome(out: Path) -> dict[str, Any]:
    learners = json.loads((out / "learners.json").read_text())
    history = json.loads((out / "history.json").read_text()) if (out / "history.json").is_file() else None
    if history is None:
        history = json.loads((out / "train_summary.json").read_text())["history"]
    return {
        "steady_samples_per_s": learners["steady_samples_per_s"],
        "dev_loss": [h["loss"] for h in history],
    }


def _compare_curves(real: list[list[float]], sim: list[list[float]]) -> dict[str, Any]:
    """Per epoch, the real runs' range and both sides' means; ``within_spread``, the worst
    gap over the spread, and ``bitwise``: every seed's curves equal on both sides (SYNC's)."""
    epochs = min(min(len(c) for c in real), min(len(c) for c in sim))
    rows, within, worst = [], True, 0.0
    for e in range(epochs):
        r = [c[e] for c in real]
        s = [c[e] for c in sim]
        lo, hi, real_mean, sim_mean = min(r), max(r), statistics.fmean(r), statistics.fmean(s)
        inside = lo <= sim_mean <= hi
        within &= inside
        spread = hi - lo
        gap = abs(sim_mean - real_mean) / spread if spread > 0 else float("inf")
        worst = max(worst, gap)
        rows.append(
            {
                "epoch": e + 1,
                "real_min": round(lo, 4),
                "real_mean": round(real_mean, 4),
                "real_max": round(hi, 4),
                "sim_mean": round(sim_mean, 4),
                "sim_min": round(min(s), 4),
                "sim_max": round(max(s), 4),
                "inside": inside,
            }
        )
    bitwise = all(r == s for r, s in zip(real, sim, strict=True))
    return {
        "within_spread": within,
        "worst_gap_over_spread": round(worst, 3),
        "bitwise": bitwise,
        "epochs": rows,
    }


def _throughput(sides: _Sides, learners: int, epochs: int, *, real: bool) -> dict[str, Any]:
    speeds: dict[str, float] = {}
    for straggler in ("none", "one"):
        for strategy in ("sync", "adpsgd"):
            overrides = sides.overrides(strategy, learners, seed=1, epochs=epochs, straggler=straggler)
            run = sides.real if real else sides.simulated
            speeds[f"{strategy}_{straggler}"] = run(overrides, learners, held_out=False)[
                "steady_samples_per_s"
            ]
    return {
        "samples_per_s": speeds,
        "adpsgd_over_sync_equal": round(speeds["adpsgd_none"] / speeds["sync_none"], 3),
        "adpsgd_over_sync_straggler_2x": round(speeds["adpsgd_one"] / speeds["sync_one"], 3),
        "sync_straggler_over_equal": round(speeds["sync_one"] / speeds["sync_none"], 3),
        "adpsgd_straggler_over_equal": round(speeds["adpsgd_one"] / speeds["adpsgd_none"], 3),
    }


def bench_sim_agreement(
    data_dir: str | Path,
    *,
    curves: tuple[tuple[str, int], ...] = CURVES,
    seeds: tuple[int, ...] = (1, 2, 3),
    utterances: int = 128,
    global_batch: int = 16,
    epochs: int = 5,
    throughput_learners: tuple[int, ...] = (2, 4),
    measure_learners: tuple[int, ...] = (2,),
    throughput_epochs: int = 8,
    size: str = "demo",
    network: str = "10gbe",
    experiment: tuple[str, ...] = (),
) -> dict:
    """Dev-loss curves and straggler throughput, simulated against torchrun (see above);
    ``experiment``: train on that experiment's own data and objective (``SGD_HYBRID``),
    ``data_dir`` unused."""
    data_dir = Path(data_dir)
    result: dict[str, Any] = {
        "utterances": utterances,
        "global_batch": global_batch,
        "model": size,
        "seeds": list(seeds),
        "network": network,
        "experiment": list(experiment),
        "cpus": os.cpu_count(),
        "curves": {},
        "throughput": {},
    }
    with tempfile.TemporaryDirectory(prefix="asrkit-bench-sim-agreement-") as tmp:
        sides = _Sides(
            data_dir,
            Path(tmp),
            utterances=utterances,
            global_batch=global_batch,
            size=size,
            network=network,
            experiment=experiment,
        )
        for strategy, learners in curves:
            real, sim = [], []
            for seed in seeds:
                overrides = sides.overrides(strategy, learners, seed=seed, epochs=epochs, straggler="none")
                real.append(sides.real(overrides, learners, held_out=True)["dev_loss"])
                sim.append(sides.simulated(overrides, learners, held_out=True)["dev_loss"])
            result["curves"][f"{strategy}_n{learners}"] = _compare_curves(real, sim)
        for learners in throughput_learners:
            row: dict[str, Any] = {"simulated": _throughput(sides, learners, throughput_epochs, real=False)}
            if learners in measure_learners:
                row["measured"] = _throughput(sides, learners, throughput_epochs, real=True)
                row["measured_on"] = f"this machine, {os.cpu_count()} cores, one thread per learner"
            elif (learners, throughput_epochs, utterances, global_batch, size) == (
                4,
                8,
                128,
                16,
                "demo",
            ) and (RECORDED.is_file()):
                recorded = json.loads(RECORDED.read_text())
                row["measured"] = {
                    "adpsgd_over_sync_equal": recorded["4_learners_equal_speed"]["adpsgd_over_sync"],
                    "adpsgd_over_sync_straggler_2x": recorded["4_learners_straggler_2x"]["adpsgd_over_sync"],
                }
                row["measured_on"] = str(RECORDED)
            if "measured" in row:
                sim_ratio = row["simulated"]["adpsgd_over_sync_straggler_2x"]
                real_ratio = row["measured"]["adpsgd_over_sync_straggler_2x"]
                row["straggler_ratio_sim_over_measured"] = round(sim_ratio / real_ratio, 3)
                row["within_10_percent"] = abs(sim_ratio / real_ratio - 1) <= 0.10
            result["throughput"][f"n{learners}"] = row
        result["step_costs"] = {
            f"n{n}{'_held_out' if h else ''}": dataclasses.asdict(c) for (n, h), c in sides.costs.items()
        }
    return result
