"""``asrkit validate-data DIR``: check a Kaldi data directory."""

from __future__ import annotations

import argparse

from asrkit.data.datadir import validate_data_dir


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate-data",
        help="check a Kaldi data dir",
        description="Check a Kaldi data dir like utils/validate_data_dir.sh: files present, "
        "ids unique and sorted, every file listing the same utterances, spk2utt matching "
        "utt2spk, no empty transcripts.",
    )
    parser.add_argument("data_dir", help="the data directory")
    parser.add_argument("--no-text", action="store_true", help="do not require a text file")
    parser.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    data = validate_data_dir(args.data_dir, require_text=not args.no_text)
    extra = "".join(f", {name}" for name in data.extra)
    print(
        f"{args.data_dir}: OK ({len(data.utt_ids)} utterances, {len(data.spk2utt)} speakers; "
        f"wav.scp, utt2spk, spk2utt{', text' if data.text is not None else ''}{extra})"
    )
    return 0
