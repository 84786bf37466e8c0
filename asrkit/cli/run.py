"""``asrkit run``: the numbered recipe stages with Hydra overrides."""

from __future__ import annotations

import argparse
import sys

from omegaconf import OmegaConf

from asrkit.config import DEFAULT_CONFIG_DIR, compose
from asrkit.distributed.config import STRATEGIES
from asrkit.errors import UserError
from asrkit.overrides import config_groups, experiment_summaries
from asrkit.stages import run_stages
from asrkit.stages.registry import PIPELINES, describe_stages


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run recipe stages",
        description="Run numbered recipe stages. Settings come from conf/config.yaml and "
        "KEY=VALUE words (Hydra overrides) such as train.epochs=3, model=large or "
        "+experiment=an4_hybrid; `--help` with them lists the stages they select.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    parser.add_argument(
        "-h", "--help", action="store_true", help="show this help (with the stages the given settings select)"
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
    parser.set_defaults(func=_run, parser=parser)


def help_text(parser: argparse.ArgumentParser, overrides: list[str], config_dir: str) -> str:
    """``run --help``: the options, then the stages of the pipeline the given settings
    select (``+experiment=an4_hybrid`` shows the hybrid stages), the strategies, the config
    groups with their options and the experiments."""
    pipeline, note = "ctc", ""
    try:
        pipeline = str(compose(overrides, config_dir=config_dir).pipeline)
    except UserError as err:
        # Settings that do not compose as a whole (pipeline=hybrid without objective=ce)
        # still say which pipeline they are about.
        named = [o.split("=", 1)[1] for o in overrides if o.lstrip("+~").startswith("pipeline=")]
        if named and named[-1] in PIPELINES:
            pipeline = named[-1]
        shown = "the pipeline given" if named and named[-1] in PIPELINES else "the default pipeline"
        note = f"\n(the settings given do not compose: {err}; showing {shown})\n"
    groups = config_groups(config_dir)
    experiments = experiment_summaries(config_dir)
    width = max(map(len, experiments), default=0)
    return (
        parser.format_help()
        + note
        + f"\nstages of the {pipeline} pipeline (pipeline=ctc|hybrid; --stage N --stop-stage M):\n"
        + describe_stages(pipeline)
        + "\n\nstrategies (strategy=NAME, the training stage):\n"
        + "\n".join(f"  {name:<13} {info.summary}" for name, info in STRATEGIES.items())
        + "\n\nconfig groups (GROUP=OPTION):\n"
        + "\n".join(
            f"  {group:<10} {', '.join(o for o in options if not o.endswith('_schema'))}"
            for group, options in groups.items()
            if group != "experiment"
        )
        + "\n\nexperiments (+experiment=NAME; conf/experiment/NAME.yaml):\n"
        + "\n".join(f"  {name:<{width}}  {summary}" for name, summary in experiments.items())
        + "\n\nEvery setting with its value: asrkit run --cfg [KEY=VALUE ...]\n"
    )


def _run(args: argparse.Namespace) -> int:
    if args.help:
        print(help_text(args.parser, args.overrides, args.config_dir), end="")
        return 0
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
