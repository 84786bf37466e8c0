"""``asrkit transcribe EXP_DIR AUDIO...``: one ``path<TAB>transcript`` line per file."""

from __future__ import annotations

import argparse

import numpy as np

from asrkit.data.audio import load_audio_file
from asrkit.decoding.recognizer import Recognizer, check_exp_dir
from asrkit.device import pick_device
from asrkit.errors import ConfigError
from asrkit.training.data import Utterance


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "transcribe", help="transcribe audio files with a trained experiment",
        description="Transcribe wav/flac/NIST-sphere files (any sample rate; resampled to the "
        "model's) or headerless 16-bit PCM (.raw/.pcm) with the model, feature settings, CMVN "
        "stats and tokenizer saved in EXP_DIR. Prints 'path<TAB>transcript' per file, in the "
        "order given. With per-speaker CMVN, each file is normalised as its own speaker.")
    parser.add_argument("exp_dir", help="experiment directory holding model.pt (exp/<name>)")
    parser.add_argument("audio", nargs="+", help="audio files")
    parser.add_argument("--model", default="model.pt", help="model bundle inside EXP_DIR")
    parser.add_argument("--raw-rate", type=int, default=16000,
                        help="sample rate of .raw/.pcm files (default 16000)")
    parser.add_argument("--raw-byteorder", choices=("big", "little"), default="big",
                        help="byte order of .raw/.pcm files (default big, as CMU's AN4)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.set_defaults(func=_transcribe)


def _transcribe(args: argparse.Namespace) -> int:
    check_exp_dir(args.exp_dir, args.model)
    if args.device != "cpu" and not args.device.split(":")[0] == "cuda":
        raise ConfigError(f"--device {args.device!r} is not a torch device; use cpu, cuda or cuda:N")
    if args.device != "cpu":
        pick_device("cuda")  # a clear error where no GPU is visible
    recognizer = Recognizer(args.exp_dir, model=args.model, device=args.device)
    utts = []
    for i, path in enumerate(args.audio):
        samples, rate = load_audio_file(path, raw_rate=args.raw_rate,
                                        raw_byteorder=args.raw_byteorder)
        feats = recognizer.audio_features(samples, rate, utt=path, where=path)
        utts.append(Utterance(f"{i:08d}", feats, np.zeros(0, dtype=np.int64)))
    texts = recognizer.recognize(utts)
    for i, path in enumerate(args.audio):
        print(f"{path}\t{texts[f'{i:08d}']}")
    return 0
