"""Run a study's plan: every run not finished yet, one after another, each into
``<out>/runs/<name>/`` (resumable: a run counts as finished once its ``sim.json`` exists,
so a stopped study goes on where it stopped when started again)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

from asrkit.config import DEFAULT_CONFIG_DIR, compose, to_object
from asrkit.data.io import atomic_write
from asrkit.errors import ConfigError
from asrkit.sim.calibrate import learner_batch_caps
from asrkit.sim.experiment import simulate_experiment
from asrkit.sim.network import Network
from asrkit.study.plan import StudyPlan, StudyRun

__all__ = ["run_study"]

log = logging.getLogger(__name__)


def run_study(
    plan: StudyPlan,
    out: Path,
    *,
    network: Network,
    max_runs: int | None = None,
    config_dir: str | Path = DEFAULT_CONFIG_DIR,
) -> dict[str, int]:
    """Simulate every unfinished run of ``plan`` (at most ``max_runs`` now); returns how
    many were finished before, run now and left."""
    runs = plan.runs()
    settings = json.loads(
        json.dumps({"plan": dataclasses.asdict(plan), "network": dataclasses.asdict(network)})
    )
    if (out / "plan.json").is_file():
        _check_same_settings(out, settings)
    out.mkdir(parents=True, exist_ok=True)
    listing = [{"name": r.name, **dataclasses.asdict(r), "overrides": plan.overrides(r)} for r in runs]
    atomic_write(out / "plan.json", json.dumps({**settings, "runs": listing}, indent=2))
    pending = [r for r in runs if not (out / "runs" / r.name / "sim.json").is_file()]
    counts = {"finished_before": len(runs) - len(pending), "run_now": 0, "left": len(pending)}
    log.info(
        "study %s: %d runs, %d finished before, %d to run",
        out,
        len(runs),
        counts["finished_before"],
        len(pending),
    )
    began = time.monotonic()
    for run in pending[:max_runs]:
        _run_one(plan, run, out, network=network, config_dir=config_dir)
        counts["run_now"] += 1
        counts["left"] -= 1
        each = (time.monotonic() - began) / counts["run_now"]
        log.info(
            "study: %s done (%d of %d now; about %.0f min left at %.0f s per run)",
            run.name,
            counts["run_now"],
            len(pending),
            counts["left"] * each / 60,
            each,
        )
    return counts


def _check_same_settings(out: Path, settings: dict) -> None:
    """A study dir continues only with the settings it was started with."""
    before = json.loads((out / "plan.json").read_text())
    plan_before, plan_now = before.get("plan", {}), settings["plan"]
    changed = sorted(k for k in {**plan_before, **plan_now} if plan_before.get(k) != plan_now.get(k))
    if before.get("network") != settings["network"]:
        changed.append("network")
    if changed:
        raise ConfigError(
            f"{out} holds a study started with other settings ({', '.join(changed)} differ); "
            "continue it with the same plan, models, epochs and network, or give another --out"
        )


def _run_one(plan: StudyPlan, run: StudyRun, out: Path, *, network: Network, config_dir: str | Path) -> None:
    overrides = plan.overrides(run)
    cfg = to_object(compose(overrides, config_dir=config_dir))
    lr = cfg.optim.lr * plan.lr_scale(run)
    cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=lr))
    caps = learner_batch_caps(cfg)
    cost = out / "step_costs" / f"{run.model}_b{caps[0]}_f{caps[1]}.json"
    dest = out / "runs" / run.name
    log.info("study: %s (%s)", run.name, " ".join(overrides))
    dest.mkdir(parents=True, exist_ok=True)
    record = {
        **dataclasses.asdict(run),
        "name": run.name,
        "overrides": overrides,
        "lr": lr,
        "step_cost": str(cost),
    }
    atomic_write(dest / "run.json", json.dumps(record, indent=2) + "\n")
    simulate_experiment(cfg, network=network, out=dest, step_cost=cost, force=True)
