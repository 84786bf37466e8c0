"""``asrkit topology --learners N --pattern P``: how fast an ADPSGD pairing pattern mixes."""

from __future__ import annotations

import argparse

from asrkit.distributed import PATTERNS, consensus_rate, expected_mixing_matrix, pairing, spectral_gap
from asrkit.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "topology",
        help="spectral gap and consensus speed of a decentralized pairing pattern",
        description="For each number of learners print the spectral gap 1 - |lambda_2| of the "
        "expected mixing matrix E[W] (larger mixes faster; dense eigendecomposition, about a "
        "second at 1024 learners) and the per-round contraction of the distance to the mean "
        "in a simulation of --rounds real rounds (smaller is faster; 0 means exact consensus).",
    )
    parser.add_argument(
        "--learners",
        action="append",
        required=True,
        metavar="N[,N...]",
        help="number of learners; repeat it or give a comma list, e.g. 4,16,64",
    )
    parser.add_argument(
        "--pattern",
        choices=PATTERNS,
        default="random",
        help="fixed: ring; random: seeded random matching; hybrid: all-reduce in "
        "groups of --group-size, random matching among groups (default: random)",
    )
    parser.add_argument(
        "--group-size",
        type=int,
        metavar="G",
        help="ranks per all-reduce group; required by and only for --pattern hybrid",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of pairings and start vector (default 0)")
    parser.add_argument("--rounds", type=int, default=50, help="rounds to simulate (default 50)")
    parser.set_defaults(func=_topology)


def _learner_counts(values: list[str]) -> list[int]:
    counts = []
    for value in values:
        for item in value.split(","):
            try:
                counts.append(int(item))
            except ValueError:
                raise ConfigError(
                    f"--learners {value!r}: {item.strip()!r} is not an integer; "
                    f"give whole numbers, e.g. --learners 4,16,64"
                ) from None
    return counts


def _topology(args: argparse.Namespace) -> int:
    counts = _learner_counts(args.learners)
    if args.pattern == "hybrid" and args.group_size is None:
        raise ConfigError(
            "--pattern hybrid needs --group-size G (ranks per all-reduce group, dividing "
            "every --learners value)"
        )
    if args.pattern != "hybrid" and args.group_size is not None:
        raise ConfigError(f"--group-size only applies to --pattern hybrid, not {args.pattern!r}; drop it")
    group_size = args.group_size if args.group_size is not None else 1
    # Check every value before the (up to seconds-long) eigendecompositions, and build the whole
    # table before printing it, so a bad value late in the list leaves no partial table.
    for n in counts:
        pairing(args.pattern, n, 0, args.seed, group_size=group_size)
    rows = []
    for n in counts:
        rate = consensus_rate(args.pattern, n, rounds=args.rounds, seed=args.seed, group_size=group_size)
        gap = spectral_gap(expected_mixing_matrix(args.pattern, n, group_size=group_size))
        rows.append((n, gap, rate))
    print(f"{'learners':>8}  {'pattern':<7}  {'group':>5}  {'spectral_gap':>12}  {'contraction/round':>17}")
    for n, gap, rate in rows:
        print(f"{n:>8}  {args.pattern:<7}  {group_size:>5}  {gap:>12.6g}  {rate:>17.4f}")
    return 0
