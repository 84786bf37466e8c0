"""``asrkit score REF HYP``: Kaldi-style WER/CER with sclite outputs."""

from __future__ import annotations

import argparse

from asrkit.scoring import score_files, summary


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
    parser.add_argument("ref", help="reference Kaldi text (utt-id word word ...)")
    parser.add_argument("hyp", help="hypothesis Kaldi text")
    parser.add_argument("--out-dir", help="also write wer, ref.trn, hyp.trn, per_utt, per_spk here")
    parser.add_argument("--align", choices=("sclite", "levenshtein"), default="sclite")
    parser.add_argument(
        "--spk2group",
        help="a 'speaker group' file (e.g. a data dir's spk2group: "
        "child/teen/adult); with --out-dir, also write a per_group table",
    )
    parser.set_defaults(func=_score)


def _score(args: argparse.Namespace) -> int:
    result = score_files(args.ref, args.hyp, out_dir=args.out_dir, align=args.align, spk2group=args.spk2group)
    print(summary(result), end="")
    return 0
