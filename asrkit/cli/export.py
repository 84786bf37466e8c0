"""``asrkit export EXP_DIR OUT``: the files ``transcribe`` reads, and a model card."""

from __future__ import annotations

import argparse

from asrkit.decoding.decoder import KINDS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="copy what transcribe needs from an experiment into a directory to hand over",
        description="Copy the files `asrkit transcribe EXP_DIR` reads with the chosen decoder "
        "(the model bundle, its tokenizer or HCLG, the tuned decoding settings, CMVN stats, "
        "priors, the GMM system that adapts to each speaker ...) into OUT, keeping their "
        "paths, and write OUT/MODEL_CARD.md (units, corpus, the command that trained it, "
        "its WERs, date, commit, data licence). The copy is checked: it must recognise a "
        "test signal as the experiment does. OUT is then used as an experiment dir: "
        "`asrkit transcribe OUT a.wav` or asrkit.Recognizer.load(OUT).",
    )
    parser.add_argument("exp_dir", help="the experiment directory (exp/<name>)")
    parser.add_argument("out", help="a new (or empty) directory")
    parser.add_argument(
        "--decode",
        choices=("auto", *KINDS),
        default="auto",
        help="the decoder to export, as for transcribe (default auto: the one transcribe picks)",
    )
    parser.add_argument(
        "--model", default=None, help="model bundle inside EXP_DIR (default: the recorded one)"
    )
    parser.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from asrkit.export import CARD, export

    out = export(args.exp_dir, args.out, kind=args.decode, model=args.model)
    print(f"{out}: exported; see {out / CARD}")
    return 0
