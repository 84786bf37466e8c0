"""``asrkit simulate [options] KEY=VALUE ...``: train N simulated learners of an experiment
in this process, on a virtual clock (:mod:`asrkit.sim`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from asrkit.config import DEFAULT_CONFIG_DIR, compose, to_object
from asrkit.errors import ConfigError
from asrkit.sim.network import NETWORKS, Network


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="train N simulated learners of an experiment on a virtual clock",
        description="Train strategy.learners simulated learners of the experiment the overrides "
        "name (its stages through the tokenizer, and for CE the alignments, must have run), in "
        "this process: the real model, data, trainer and strategy, on a virtual clock where a "
        "step takes the compute time measured on this machine (saved as a step-cost file and "
        "reused) and a message the time the network needs. The same settings give bitwise the "
        "same model. Outputs (model.pt, train_summary.json with virtual epoch times, "
        "learners.json, sim.json) go to --out.",
        epilog="example: asrkit simulate +experiment=an4_hybrid strategy=adpsgd "
        "strategy.learners=16 strategy.straggler.mode=one strategy.straggler.factor=2",
    )
    parser.add_argument(
        "--network",
        choices=sorted(NETWORKS),
        default="infiniband",
        help="the learners' links (default: infiniband, 100 Gbit/s and 2 us; 10gbe: 10 Gbit/s, 50 us)",
    )
    parser.add_argument("--bandwidth-gbps", type=float, help="override the network's bandwidth (Gbit/s)")
    parser.add_argument("--latency-us", type=float, help="override the network's latency (microseconds)")
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument(
        "--comm-ratio",
        type=float,
        help="charge communication at this ratio of one whole-model exchange's time to one "
        "learner's mean step of computation (the small model computes, the wire carries a "
        "larger one; IBM's setups: about 0.3, docs/study.md)",
    )
    scale.add_argument(
        "--bytes-scale",
        type=float,
        help="charge every tensor message as this many times its bytes (e.g. the paper-size "
        "model's bytes over this model's)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="output dir (default: <exp_dir>/sim/<strategy>_n<learners>_<network>_seed<seed>)",
    )
    parser.add_argument(
        "--step-cost",
        type=Path,
        help="a step-cost JSON to use, or where to save the one measured (default: "
        "<exp_dir>/sim/step_cost_b<batch>_f<frames>.json, one learner's batch caps)",
    )
    parser.add_argument(
        "--force", action="store_true", help="simulate again even if --out holds a finished run"
    )
    parser.add_argument("--config-dir", default=str(DEFAULT_CONFIG_DIR), help="Hydra config directory")
    parser.add_argument("--config-name", default="config", help="top config file name")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Hydra overrides")
    parser.set_defaults(func=_simulate)


def network_from(
    name: str, bandwidth_gbps: float | None, latency_us: float | None, bytes_scale: float | None = None
) -> Network:
    base = NETWORKS[name]
    try:
        return Network(
            base.name,
            bandwidth_gbps=base.bandwidth_gbps if bandwidth_gbps is None else bandwidth_gbps,
            latency_us=base.latency_us if latency_us is None else latency_us,
            bytes_scale=1.0 if bytes_scale is None else bytes_scale,
        )
    except ValueError as err:
        raise ConfigError(
            f"{err}; give --bandwidth-gbps > 0, --latency-us >= 0 and --bytes-scale > 0"
        ) from None


def _simulate(args: argparse.Namespace) -> int:
    from asrkit.sim.experiment import simulate_experiment

    cfg = to_object(compose(args.overrides, config_dir=args.config_dir, config_name=args.config_name))
    network = network_from(args.network, args.bandwidth_gbps, args.latency_us, args.bytes_scale)
    simulate_experiment(
        cfg,
        network=network,
        out=args.out,
        step_cost=args.step_cost,
        force=args.force,
        comm_ratio=args.comm_ratio,
    )
    return 0
