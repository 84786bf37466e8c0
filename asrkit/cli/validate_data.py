"""``asrkit validate-data DIR``: check a Kaldi data directory."""

from __future__ import annotations

import argparse

from asrkit.data.audio import check_audio_files
from asrkit.data.datadir import validate_data_dir


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate-data",
        help="check a Kaldi data dir",
        description="Check a Kaldi data dir like utils/validate_data_dir.sh: its files present, "
        "ids unique and sorted, every file listing the same utterances, spk2utt matching "
        "utt2spk, no empty transcripts, and every audio file wav.scp names present with a "
        "readable one-channel audio header (commands ending in '|' are not run). A "
        "segmented dir (segments: utterances cut from the recordings wav.scp lists) is "
        "checked too: times well formed, every recording known.",
    )
    parser.add_argument("data_dir", help="the data directory")
    parser.add_argument("--no-text", action="store_true", help="do not require a text file")
    parser.add_argument(
        "--quick", action="store_true", help="do not open the audio files (the dir's text files only)"
    )
    parser.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    data = validate_data_dir(args.data_dir, require_text=not args.no_text)
    if not args.quick:
        check_audio_files(data, where=args.data_dir)
    files = ["wav.scp", "utt2spk", "spk2utt"]
    files += ["text"] if data.text is not None else []
    files += ["segments"] if data.segmented else []
    files += ["reco2file_and_channel"] if data.reco2file_and_channel is not None else []
    files += list(data.extra)
    recordings = f", {len(data.recordings())} recordings" if data.segmented else ""
    print(
        f"{args.data_dir}: OK ({len(data.utt_ids)} utterances, {len(data.spk2utt)} speakers"
        f"{recordings}; {', '.join(files)})"
    )
    return 0
