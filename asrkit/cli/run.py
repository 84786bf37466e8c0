"""``asrkit run``: the numbered recipe stages with Hydra overrides."""

from __future__ import annotations

import argparse
import sys

from omegaconf import OmegaConf

from asrkit.config import DEFAULT_CONFIG_DIR, compose
from asrkit.distributed.config import STRATEGIES
from asrkit.stages import run_stages
from asrkit.stages.registry import describe_stages


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run recipe stages",
        description="Run numbered recipe stages. Settings come from conf/config.yaml and "
        "Hydra overrides such as features.num_mel_bins=40 or features=mfcc.",
        epilog="stages:\n"
        + describe_stages()
        + "\n\nstrategies (strategy=NAME, stage 4):\n"
        + "\n".join(f"  {name:<13} {info.summary}" for name, info in STRATEGIES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stage", type=int, default=0, help="first stage (default 0)")
    parser.add_argument(
        "--stop-stage",
        "--stop_stage",
        dest="stop_stage",
        type=int,
        default=None,
        help="last stage, inclusive (default: the last)",
    )
    parser.add_argument(
        "--config-dir",
        default=str(DEFAULT_CONFIG_DIR),
        help="Hydra config directory (default: asrkit's conf/)",
    )
    parser.add_argument("--config-name", default="config", help="top config file name")
    parser.add_argument(
        "--force",
        action="store_true",
        help="run stages again even when they finished with the same settings "
        "(training starts over unless resume=true)",
    )
    parser.add_argument("--cfg", action="store_true", help="print the resolved config and exit")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Hydra overrides")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    cfg = compose(args.overrides, config_dir=args.config_dir, config_name=args.config_name)
    if args.cfg:
        print(OmegaConf.to_yaml(cfg), end="")
        return 0
    run_stages(
        cfg,
        start=args.stage,
        stop=args.stop_stage,
        command=_command_line(),
        force=args.force,
        overrides=args.overrides,
        config_dir=args.config_dir,
        config_name=args.config_name,
    )
    return 0


def _command_line() -> list[str]:
    # Under ``python -m asrkit`` argv[0] is the path of __main__.py; save a command
    # that can be pasted back into a shell instead.
    if sys.argv and sys.argv[0].endswith("__main__.py"):
        return [sys.executable, "-m", "asrkit", *sys.argv[1:]]
    return list(sys.argv)
