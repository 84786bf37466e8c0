"""``asrkit study run|report``: the study of IBM's claims on simulated learners
(:mod:`asrkit.study`, docs/study.md)."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from pathlib import Path

from asrkit.config import DEFAULT_CONFIG_DIR
from asrkit.errors import ConfigError
from asrkit.sim.network import NETWORKS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "study",
        help="run or report the study of IBM's distributed-training claims (simulated learners)",
        description="run: simulate every run of a plan that has not finished yet, --jobs at a "
        "time, into OUT/runs/<name>/ (stop it at any time; started again it goes on where "
        "it stopped). report: tables and plots of the finished runs (docs/study_results.md and "
        "docs/study/).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser("run", help="simulate the plan's unfinished runs")
    run.add_argument(
        "--plan",
        default="ibm",
        help="ibm_sgd (the study trained to the end, on AN4: docs/study.md), sgd_sweep (its "
        "one-learner learning-rate sweep), ibm (default: the first study's runs each claim "
        "needs), ibm_full (every strategy everywhere), pilot or tiny",
    )
    run.add_argument("--out", type=Path, default=Path("exp/study"), help="study dir (default exp/study)")
    run.add_argument("--network", choices=sorted(NETWORKS), default="infiniband")
    run.add_argument("--max-runs", type=int, help="stop after this many runs (default: all)")
    run.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs side by side, one thread each (default: 2, or 1 on one core)",
    )
    run.add_argument("--epochs", type=int, help="training epochs of every run (default: the plan's)")
    run.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=OVERRIDES",
        help="a model and its experiment's overrides, e.g. ctc='+experiment=an4 name=x' "
        "(repeatable; default: the speechocean762 CTC and hybrid experiments)",
    )
    run.add_argument("--config-dir", default=str(DEFAULT_CONFIG_DIR), help="Hydra config directory")
    run.set_defaults(func=_run)
    report = actions.add_parser("report", help="tables and plots of the finished runs")
    report.add_argument("--out", type=Path, default=Path("exp/study"), help="study dir (default exp/study)")
    report.add_argument("--docs", type=Path, default=Path("docs"), help="where study_results.md goes")
    report.add_argument(
        "--name",
        default="study_results",
        help="the report's name: DOCS/NAME.md, its figures in DOCS/study/ (another name: DOCS/NAME/)",
    )
    report.set_defaults(func=_report)


def _models(specs: list[str]) -> dict[str, tuple[str, ...]] | None:
    if not specs:
        return None
    models = {}
    for spec in specs:
        name, sep, overrides = spec.partition("=")
        if not sep or not name:
            raise ConfigError(f"--model {spec!r}: give NAME=OVERRIDES, e.g. ctc='+experiment=an4'")
        models[name] = tuple(shlex.split(overrides))
    return models


def _run(args: argparse.Namespace) -> int:
    from asrkit.study.plan import PLANS, study_plan
    from asrkit.study.runner import run_study

    if args.plan not in PLANS:
        raise ConfigError(f"--plan {args.plan}: unknown; choose one of {', '.join(PLANS)}")
    if args.max_runs is not None and args.max_runs < 1:
        raise ConfigError(f"--max-runs {args.max_runs}: give at least 1")
    if args.jobs is None:
        from asrkit.stages.members import available_cores

        args.jobs = min(2, available_cores())
    if args.epochs is not None and args.epochs < 1:
        raise ConfigError(f"--epochs {args.epochs}: give at least 1")
    plan = study_plan(args.plan, _models(args.model))
    if args.epochs is not None:
        plan = dataclasses.replace(plan, epochs=args.epochs)
    counts = run_study(
        plan,
        args.out,
        network=NETWORKS[args.network],
        max_runs=args.max_runs,
        jobs=args.jobs,
        config_dir=args.config_dir,
    )
    print(
        f"study {args.out}: {counts['finished_before']} finished before, {counts['run_now']} run now, "
        f"{counts['left']} left"
    )
    return 0


def _report(args: argparse.Namespace) -> int:
    from asrkit.study.report import write_report

    # A study whose plan is there but no run finished yet (or none kept) reports that.
    if not (args.out / "runs").is_dir() and not (args.out / "plan.json").is_file():
        raise ConfigError(
            f"{args.out}/runs: no study runs there; start them with asrkit study run --out {args.out}"
        )
    print(write_report(args.out, args.docs, name=args.name))
    return 0
