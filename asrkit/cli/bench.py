"""``asrkit bench [NAME...]``: run benchmarks, print a table, save JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from asrkit.bench import BENCHMARKS, QUICK
from asrkit.bench.plots import plot
from asrkit.data.io import atomic_write
from asrkit.errors import ConfigError, UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="run benchmarks (ratios vs same-run baselines)")
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default all: {', '.join(BENCHMARKS)})")
    parser.add_argument(
        "--data-dir",
        default="recipes/an4/data/test",
        help="Kaldi data dir to measure on (default: the AN4 recipe's test set; "
        "run recipes/an4/run.sh --stop-stage 1 first)",
    )
    parser.add_argument("--out-dir", default="bench/results", help="where JSON results and PNG plots go")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller runs (a few minutes on 2 cores); the figures are noisier",
    )
    parser.set_defaults(func=_bench)


def _machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or "?",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def _bench(args: argparse.Namespace) -> int:
    names = args.names or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise ConfigError(f"unknown benchmark {unknown[0]!r}; choose from {sorted(BENCHMARKS)}")
    for name in names:
        began = time.monotonic()
        try:
            result = BENCHMARKS[name](args.data_dir, **(QUICK[name] if args.quick else {}))
        except UserError as err:
            if args.names:
                raise  # asked for by name: its missing input is an error
            print(f"{name}: skipped ({err})", flush=True)
            continue
        record = {
            "benchmark": name,
            "data_dir": args.data_dir,
            "machine": _machine(),
            "quick": args.quick,
            "seconds": round(time.monotonic() - began, 1),
            **result,
        }
        atomic_write(Path(args.out_dir) / f"{name}.json", json.dumps(record, indent=2) + "\n")
        png = plot(name, result, args.out_dir)
        print(f"{name}: ({record['seconds']} s{f'; plot {png}' if png else ''})")
        for key, value in result.items():
            if key in ("detail", "curves"):
                continue  # per-learner numbers and curves: in the JSON and the plot
            print(f"  {key:<16} {value}")
    return 0
