"""``asrkit results EXP_ROOT``: every experiment's scored decodings in one table."""

from __future__ import annotations

import argparse
from pathlib import Path

from asrkit.data.io import atomic_write
from asrkit.scoring.results import collect_results, format_results

#: The table's file in EXP_ROOT when --out is not given.
RESULTS_FILE = "RESULTS"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "results",
        help="every experiment's WERs under an exp dir in one table (RESULTS)",
        description="Collect every scored decoding under EXP_ROOT (an experiment root such as "
        "recipes/an4/exp, or one experiment dir), as Kaldi's utils/best_wer.sh over "
        "exp/*/decode*: a row per experiment, set and decoder (greedy, beam, beam_lm, hybrid, "
        "combined) or GMM system (gmm mono ... gmm tri3, gmm tri3.si for a SAT system's "
        "speaker-independent first pass), sorted by experiment, set and WER, with its %WER "
        "('*': the experiment's best on that set), [errors / words, ins, del, sub], the "
        "weights it was decoded at ('best of N here': the best point of the N-point sweep on "
        "this set; 'tuned on SET': decoded at the point picked on SET) and the file it was "
        "read from (scoring/wer, or best_wer for a tune set not decoded on its own), relative "
        "to EXP_ROOT. Printed, and written to EXP_ROOT/RESULTS: inside the experiment root, "
        "beside what it sums up, rather than in the recipe's tracked folder.",
    )
    parser.add_argument("exp_root", type=Path, metavar="EXP_ROOT", help="experiment root or experiment dir")
    parser.add_argument(
        "--out",
        metavar="FILE",
        help=f"the file to write (default EXP_ROOT/{RESULTS_FILE}; '-': print only, write nothing)",
    )
    parser.set_defaults(func=_results)


def _results(args: argparse.Namespace) -> int:
    table = format_results(collect_results(args.exp_root))
    print(table, end="")
    if args.out != "-":
        atomic_write(Path(args.out) if args.out else args.exp_root / RESULTS_FILE, table)
    return 0
