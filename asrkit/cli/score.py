"""``asrkit score REF HYP``: Kaldi-style WER/CER with sclite outputs; NIST STM/CTM/GLM
scoring (as ``hubscr.pl -h hub5``) when REF is an ``.stm`` file."""

from __future__ import annotations

import argparse
from pathlib import Path

from asrkit.data.io import atomic_write
from asrkit.scoring import bootstrap_wer, score_files, summary
from asrkit.scoring.bootstrap import check_bootstrap


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "score",
        help="WER/CER of a Kaldi hyp text against a ref text",
        description="Print %WER (Kaldi's line), %CER (characters of the words, spaces "
        "excluded) and %SER. The alignment is the one chosen by --align, and every number, "
        "the Kaldi line included, comes from it: 'sclite' (default; weights sub 4, ins 3, "
        "del 3 and sclite's tie-breaking, so totals and the sub/del/ins split equal NIST "
        "sclite's) or 'levenshtein' (unit costs, the minimum error count, as Kaldi's "
        "compute-wer). Reference utterances missing from HYP count as deleted.",
    )
    parser.add_argument("ref", help="reference Kaldi text (utt-id word word ...), or an STM file (*.stm)")
    parser.add_argument(
        "hyp", help="hypothesis Kaldi text; with an STM reference a CTM file (or a text with --segments)"
    )
    nist = parser.add_argument_group(
        "STM references (NIST's hubscr.pl -h hub5: csrfilt.sh with the GLM, then sclite -F -D)"
    )
    nist.add_argument(
        "--glm", help="GLM word-mapping rules applied to the STM and the CTM (e.g. en20000405_hub5.glm)"
    )
    nist.add_argument(
        "--subset",
        action="append",
        default=[],
        metavar="[NAME=]PREFIX",
        help="also a line for the segments of files starting PREFIX (repeatable; eval2000: "
        "--subset swbd=sw_ --subset callhm=en_)",
    )
    nist.add_argument("--segments", help="with a Kaldi text as HYP: the data dir's segments file")
    nist.add_argument("--reco2file-and-channel", help="with --segments: Kaldi's reco2file_and_channel")
    parser.add_argument("--out-dir", help="also write wer, ref.trn, hyp.trn, per_utt, per_spk here")
    parser.add_argument("--align", choices=("sclite", "levenshtein"), default="sclite")
    parser.add_argument(
        "--spk2group",
        help="a 'speaker group' file (e.g. a data dir's spk2group: "
        "child/teen/adult); with --out-dir, also write a per_group table",
    )
    parser.add_argument(
        "--bootstrap",
        nargs="?",
        type=int,
        const=1000,
        metavar="N",
        help="also a 95%% interval of the WER and its standard error: N replica sets "
        "(default 1000, at least 100) of the utterances drawn with replacement, each "
        "replica's WER its errors over its reference words (Bisani & Ney 2004); one more "
        "line after the summary, and with --out-dir the file wer_interval",
    )
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed (default 0)")
    parser.set_defaults(func=_score)


def _score_stm(args: argparse.Namespace) -> int:
    from asrkit.errors import ConfigError
    from asrkit.scoring.nist import parse_subsets, report, score_nist_files, write_nist_dir

    if args.bootstrap is not None or args.spk2group is not None or args.align != "sclite":
        raise ConfigError(
            "--bootstrap, --spk2group and --align levenshtein score Kaldi texts; an STM "
            "reference is scored as sclite -F -D does (drop those options)"
        )
    subsets = parse_subsets(args.subset)
    result = score_nist_files(
        args.ref,
        args.hyp,
        glm=args.glm,
        segments=args.segments,
        reco2file_and_channel=args.reco2file_and_channel,
    )
    print(report(result, subsets), end="")
    if args.out_dir is not None:
        write_nist_dir(result, args.out_dir, subsets)
    return 0


def _score(args: argparse.Namespace) -> int:
    if str(args.ref).endswith(".stm"):
        return _score_stm(args)
    if args.glm or args.subset or args.segments:
        from asrkit.errors import ConfigError

        raise ConfigError("--glm, --subset and --segments need an STM reference (a file named *.stm)")
    if args.bootstrap is not None:  # a bad N or seed is refused before the summary is printed
        check_bootstrap(args.bootstrap, args.seed)
    result = score_files(args.ref, args.hyp, out_dir=args.out_dir, align=args.align, spk2group=args.spk2group)
    print(summary(result), end="")
    if args.bootstrap is not None:
        line = bootstrap_wer(result, replicas=args.bootstrap, seed=args.seed).line()
        print(line)
        if args.out_dir is not None:
            atomic_write(Path(args.out_dir) / "wer_interval", line + "\n")
    return 0
