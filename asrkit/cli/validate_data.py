"""``asrkit validate-data DIR``: check a Kaldi data directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from asrkit.data.audio import check_audio_files
from asrkit.data.datadir import validate_data_dir, write_kaldi_map


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate-data",
        help="check a Kaldi data dir",
        description="Check a Kaldi data dir like utils/validate_data_dir.sh: its files present, "
        "ids unique and sorted, every file listing the same utterances, spk2utt matching "
        "utt2spk, no empty transcripts, and every audio file wav.scp names present with a "
        "readable one-channel audio header (commands ending in '|' are not run). A "
        "segmented dir (segments: utterances cut from the recordings wav.scp lists) is "
        "checked too: times well formed, every recording known. Where feats.scp exists, every "
        "feature matrix is read: its shape as utt2num_frames says, every value finite and "
        "plausible (--quick skips audio and features).",
    )
    parser.add_argument("data_dir", help="the data directory")
    parser.add_argument("--no-text", action="store_true", help="do not require a text file")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="do not open the audio or feature files (the dir's text files only)",
    )
    parser.set_defaults(func=_validate)


def check_features(data_dir: str | Path) -> int:
    """Read every matrix of ``data_dir/feats.scp`` as training would (its shape, finite
    values within :data:`~asrkit.loader.archive.FEATURE_LIMIT`); the count read. The first
    problem raises a DataError naming the utterance and the archive."""
    from asrkit.loader.batch import CmvnNormalizer
    from asrkit.loader.opening import open_data_dir

    source = open_data_dir(data_dir, CmvnNormalizer("none"))
    reader = source.reader()
    try:
        for i in range(len(source.ids)):
            reader.read([i])
    finally:
        reader.close()
    return len(source.ids)


def _validate(args: argparse.Namespace) -> int:
    data = validate_data_dir(args.data_dir, require_text=not args.no_text)
    made = ""
    if not (Path(args.data_dir) / "spk2utt").exists():
        write_kaldi_map(Path(args.data_dir) / "spk2utt", {s: " ".join(u) for s, u in data.spk2utt.items()})
        made = " (spk2utt was missing: written from utt2spk)"
    features = ""
    if not args.quick:
        rates = check_audio_files(data, where=args.data_dir)
        if rates:
            seen = ", ".join(f"{rate} Hz ({n})" for rate, n in sorted(rates.items()))
            features += f"; audio at {seen}"
            if len(rates) > 1:
                features += " — mixed rates: set features.resample=true or convert them with sox"
        if (Path(args.data_dir) / "feats.scp").is_file():
            features += f"; features of {check_features(args.data_dir)} utterances"
    files = ["wav.scp", "utt2spk", "spk2utt"]
    files += ["text"] if data.text is not None else []
    files += ["segments"] if data.segmented else []
    files += ["reco2file_and_channel"] if data.reco2file_and_channel is not None else []
    files += list(data.extra)
    recordings = f", {len(data.recordings())} recordings" if data.segmented else ""
    print(
        f"{args.data_dir}: OK ({len(data.utt_ids)} utterances, {len(data.spk2utt)} speakers"
        f"{recordings}; {', '.join(files)}{features}){made}"
    )
    return 0
