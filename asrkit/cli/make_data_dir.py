"""``asrkit make-data-dir AUDIO_DIR OUT``: a folder of recordings + transcripts -> Kaldi data dirs."""

from __future__ import annotations

import argparse
from pathlib import Path

from asrkit.data.folder import (
    SPEAKER_MODES,
    index_folder,
    match_transcripts,
    parse_split,
    read_transcript_list,
    sample_rates,
    split_sets,
    write_folder_data,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "make-data-dir",
        help="a folder of audio files and their transcripts -> Kaldi data dir(s)",
        description="Write a Kaldi data dir (wav.scp, text, utt2spk, spk2utt; validated) from "
        "a folder of recordings, one utterance per file (wav, flac, sph, ogg, mp3, opus; in "
        "sub-folders too). The words come from --transcripts (lines 'NAME words ...', NAME a "
        "file's stem or its path in the folder) or, without it, from a .txt/.lab file beside "
        "each recording or a folder's *.trans.txt list (LibriSpeech). With --split the "
        "recordings are divided into several dirs OUT/NAME, by speaker. The audio is "
        "referred to by absolute path, not copied.",
    )
    parser.add_argument("audio_dir", type=Path, help="the folder of recordings")
    parser.add_argument("out", type=Path, help="the data dir to write (with --split: the folder of the sets)")
    parser.add_argument("--transcripts", type=Path, help="a list of 'NAME words ...' lines")
    parser.add_argument(
        "--speaker",
        choices=SPEAKER_MODES,
        default="dir",
        help="who speaks: 'dir' the folder a file is in (a file directly in AUDIO_DIR is "
        "its own speaker; default), 'prefix' the file name before its first '-' or '_', "
        "'utt' every file its own speaker (Kaldi's advice when speakers are unknown)",
    )
    parser.add_argument(
        "--split",
        metavar="NAME=FRACTION,...",
        help="write several dirs, e.g. train=0.8,dev=0.1,test=0.1 (by speaker when there are "
        "at least two per set, so no speaker is in two sets; else by utterance)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the split's seed (default 0)")
    parser.add_argument(
        "--skip-missing",
        action="store_true",
        help="leave out recordings without a transcript (with a warning) instead of stopping",
    )
    parser.set_defaults(func=_make)


def _make(args: argparse.Namespace) -> int:
    found = index_folder(args.audio_dir, speaker=args.speaker)
    listed = read_transcript_list(args.transcripts) if args.transcripts is not None else None
    text = match_transcripts(found, listed, skip_missing=args.skip_missing)
    found = [item for item in found if item.utt in text]
    rates = sample_rates(found)
    sets = split_sets(found, parse_split(args.split), seed=args.seed) if args.split else {"": found}
    written: dict[str, Path] = {}
    for name, items in sets.items():
        out = args.out / name if name else args.out
        data = write_folder_data(items, text, out)
        written[name] = out
        speakers = len(set(data.utt2spk.values()))
        print(f"{out}: {len(data.utt2spk)} utterances, {speakers} speakers")
    shown = ", ".join(f"{rate} Hz ({count})" for rate, count in rates.items())
    print(f"sample rates: {shown}")
    if set(rates) != {16000}:
        print(
            "  the recipes compute features at 16000 Hz: add features.resample=true, or "
            f"features.sample_rate={max(rates, key=lambda r: rates[r])} if every file has that rate"
        )
    if {"train", "dev"} <= set(written):
        # train, dev and test are keys of conf/data/kaldi.yaml; other set names are new keys
        imports = " ".join(
            f"{'' if n in ('train', 'dev', 'test') else '+'}data.import_dirs.{n}={p.absolute()}"
            for n, p in written.items()
        )
        tests = [n for n in written if n not in ("train", "dev")]
        extra = f" data.test_sets=[{','.join(tests)}]" if tests and tests != ["test"] else ""
        print(f"train on them: recipes/kaldi_dirs/run.sh {imports}{extra}")
    return 0
