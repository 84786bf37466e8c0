"""``asrkit compare``: is one system's WER really lower than another's on this test set?"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from asrkit.errors import DataError

_TRN = re.compile(r"^(.*)\(([^()]*)\)\s*$")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="significance of a WER difference: matched-pairs test (sc_stats) + paired bootstrap",
        description="Compare two systems scored on the same reference: give REF HYP_A HYP_B "
        "(Kaldi texts), or two scoring dirs written by `asrkit score --out-dir` or a decode "
        "stage (their ref.trn and hyp.trn). Prints each system's %WER; NIST's matched-pairs "
        "sentence-segment word error test (Gillick & Cox 1989, as sc_stats -t mapsswe: "
        "segments cut at 2 or more reference words both systems got right, Z over the "
        "segments' error differences, two-tailed at --level); and a paired bootstrap "
        "interval of WER_A - WER_B over utterances (Bisani & Ney 2004) with the share of "
        "replicas in which A makes fewer errors.",
    )
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="REF HYP_A HYP_B, or DIR_A DIR_B")
    parser.add_argument("--replicas", type=int, default=1000, help="bootstrap replicas (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    parser.add_argument(
        "--level", type=float, default=0.05, help="the test's significance level (default 0.05)"
    )
    parser.set_defaults(func=_compare)


def read_trn(path: Path) -> dict[str, list[str]]:
    """A trn file (``words (utt-id)``), as the scoring dirs hold."""
    if not path.is_file():
        raise DataError(
            f"{path}: not found; give a scoring dir with ref.trn and hyp.trn (asrkit score --out-dir)"
        )
    out: dict[str, list[str]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        m = _TRN.match(line)
        if m is None:
            raise DataError(f"{path}:{number}: not a trn line `words (utterance-id)`: {line!r}")
        out[m.group(2)] = m.group(1).split()
    return out


def _compare(args: argparse.Namespace) -> int:
    from asrkit.errors import ConfigError
    from asrkit.scoring.compare import bootstrap_difference, matched_pairs
    from asrkit.scoring.wer import read_text, score_texts

    if args.replicas < 100:
        raise ConfigError(f"--replicas {args.replicas}: use at least 100")
    if not 0 < args.level < 1:
        raise ConfigError(f"--level {args.level}: give a probability such as 0.05")
    if len(args.inputs) == 3:
        ref = read_text(args.inputs[0])
        hyps = [read_text(p) for p in args.inputs[1:]]
        names = [str(p) for p in args.inputs[1:]]
    elif len(args.inputs) == 2:
        dirs = [Path(p) for p in args.inputs]
        refs = [read_trn(d / "ref.trn") for d in dirs]
        if refs[0] != refs[1]:
            raise DataError(
                f"{dirs[0]} and {dirs[1]} were scored against different references; compare "
                "scorings of the same test set"
            )
        ref = refs[0]
        hyps = [read_trn(d / "hyp.trn") for d in dirs]
        names = [str(d) for d in dirs]
    else:
        raise ConfigError(f"give REF HYP_A HYP_B or DIR_A DIR_B, not {len(args.inputs)} paths")
    results = [score_texts(ref, hyp, hyp_name=name) for hyp, name in zip(hyps, names, strict=True)]
    for label, name, result in zip("AB", names, results, strict=True):
        print(f"{label}: {result.words.kaldi_line('WER')} {name}")
    test = matched_pairs(results[0].per_utt, results[1].per_utt, level=args.level)
    print(test.line())
    utts = list(ref)
    interval = bootstrap_difference(
        [results[0].utt_counts[u].errors for u in utts],
        [results[1].utt_counts[u].errors for u in utts],
        [results[0].utt_counts[u].ref_words for u in utts],
        replicas=args.replicas,
        seed=args.seed,
    )
    print(interval.line())
    return 0
