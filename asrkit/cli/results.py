"""``asrkit results EXP_ROOT``: every experiment's scored decodings in one table."""

from __future__ import annotations

import argparse
from pathlib import Path

from asrkit.data.io import atomic_write
from asrkit.scoring.results import collect_results, format_results


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "results",
        help="every experiment's WERs under an exp dir in one table (RESULTS)",
        description="Collect the scoring/wer of every decoding under EXP_ROOT (an experiment "
        "root such as recipes/an4/exp, or one experiment dir): one block per experiment, a "
        "row per set and decoder (greedy, beam, beam_lm, hybrid, combined, gmm <system>) with "
        "its WER, counts, the weights it was decoded at and its file; '*' marks each set's "
        "best and '(tuned)' the set the weights were picked on. Printed, and written to "
        "EXP_ROOT/RESULTS (--out elsewhere, --out - for none).",
    )
    parser.add_argument("exp_root", type=Path, help="experiment root or experiment dir")
    parser.add_argument("--out", help="the file to write (default EXP_ROOT/RESULTS; '-': print only)")
    parser.set_defaults(func=_results)


def _results(args: argparse.Namespace) -> int:
    table = format_results(collect_results(args.exp_root))
    print(table, end="")
    if args.out != "-":
        atomic_write(Path(args.out) if args.out else args.exp_root / "RESULTS", table)
    return 0
