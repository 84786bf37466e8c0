"""``asrkit transcribe EXP_DIR AUDIO...``: one ``path<TAB>transcript`` line per file."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections import defaultdict
from pathlib import Path
from typing import IO

import numpy as np

from asrkit.data.audio import load_audio_file
from asrkit.data.io import atomic_writer
from asrkit.decoding.decoder import Decoder, load_decoder
from asrkit.decoding.recognizer import check_exp_dir
from asrkit.device import pick_device
from asrkit.errors import ConfigError, DataError
from asrkit.progress import Progress


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "transcribe",
        help="transcribe audio files with a trained experiment",
        description="Transcribe wav/flac/NIST-sphere files (any sample rate; resampled to the "
        "model's) or headerless 16-bit PCM (.raw/.pcm) with the model, feature settings, CMVN "
        "stats and tokenizer saved in EXP_DIR, and by default the search the recipe tuned on "
        "the dev set (beam + lexicon + LM with its LM weight and word score; the system "
        "combination, when stage 8 combined several models). Prints "
        "'path<TAB>transcript' per file, in the order given. With per-speaker CMVN, each file "
        "is normalised as its own speaker, unless --speaker says they are all one speaker's.",
    )
    parser.add_argument("exp_dir", help="experiment directory holding model.pt (exp/<name>)")
    parser.add_argument("audio", nargs="+", help="audio files")
    parser.add_argument("--model", default="model.pt", help="model bundle inside EXP_DIR")
    parser.add_argument(
        "--decode",
        choices=("auto", "greedy", "beam", "beam_lm", "combined", "hybrid"),
        default="auto",
        help="decoder, as the recipe's stages tuned it (EXP_DIR/decoders/<kind>.json): greedy, "
        "beam (no LM), beam_lm (lexicon + LM), combined (every system or network stage 8 combined), "
        "hybrid (a hybrid experiment's frame model through its HCLG); auto (default) = the first "
        "of combined, hybrid, beam_lm, beam that was tuned, greedy when none was",
    )
    parser.add_argument(
        "--ctm",
        metavar="FILE",
        help="also write word times as a CTM file ('path 1 start duration word'), "
        "from the CTC alignment of each transcript",
    )
    parser.add_argument(
        "--raw-rate", type=int, default=16000, help="sample rate of .raw/.pcm files (default 16000)"
    )
    parser.add_argument(
        "--raw-byteorder",
        choices=("big", "little"),
        default="big",
        help="byte order of .raw/.pcm files (default big, as CMU's AN4)",
    )
    parser.add_argument(
        "--speaker",
        action="store_true",
        help="the files are one speaker's: per-speaker CMVN over all of them, and for a hybrid "
        "model on fMLLR input (align.fmllr) one speaker transform from the SAT system's first "
        "pass over all of them (Kaldi's decode_fmllr.sh); default: each file its own speaker",
    )
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.set_defaults(func=_transcribe)


def _transcribe(args: argparse.Namespace) -> int:
    check_exp_dir(args.exp_dir, args.model)
    if args.device != "cpu" and not args.device.split(":")[0] == "cuda":
        raise ConfigError(f"--device {args.device!r} is not a torch device; use cpu, cuda or cuda:N")
    if args.device != "cpu":
        pick_device("cuda")  # a clear error where no GPU is visible
    decoder = load_decoder(args.exp_dir, args.decode, model=args.model, device=args.device)
    if args.ctm and not decoder.has_word_times:
        raise ConfigError(
            f"--ctm: word times come from the CTC alignment; a {decoder.kind} model has none yet"
        )
    with atomic_writer(args.ctm) if args.ctm else contextlib.nullcontext() as ctm:
        return _transcribe_all(args, decoder, ctm)


def _transcribe_all(args: argparse.Namespace, decoder: Decoder, ctm: IO[str] | None) -> int:
    """Transcribe ``args.audio`` in order, each line on stdout as soon as it is known;
    word times go to ``ctm`` as they come. The exit status, as :func:`_status`."""
    failed, low = 0, defaultdict[int, list[str]](list)

    def transcribe(group: list[tuple[str, np.ndarray, int, str]]) -> int:
        """Print each file's transcript; the number of files that failed."""
        try:
            prepared = decoder.prepare_speaker(group)
        except DataError as err:  # too short for a frame, say: this file (or speaker) only
            print(f"asrkit: error: {err}", file=sys.stderr, flush=True)
            return len(group)
        texts = decoder.transcripts(prepared)
        for utt, _, _, path in group:
            text = texts[utt]
            print(f"{path}\t{text}", flush=True)
            if ctm is not None and text:
                times = decoder.word_times(prepared, utt, text)
                if times is None:
                    warning = f"{path}: too short to align its transcript; no word times in the CTM"
                    print(f"asrkit: warning: {warning}", file=sys.stderr)
                    continue
                ctm.writelines(f"{path} 1 {start:.2f} {dur:.2f} {word}\n" for word, start, dur in times)
        return 0

    # One speaker's files (--speaker) are normalised and adapted together, so all are
    # held and decoded at the end (the decoder's own progress lines follow that).
    if args.speaker:
        together = []
        for i, path in enumerate(args.audio):
            audio = _load(args, path, decoder.sample_rate, low)
            if audio is None:
                failed += 1
            else:
                together.append((f"{i:08d}", *audio, path))
        if together:
            failed += transcribe(together)
        return _status(failed, len(args.audio), low, decoder.sample_rate)
    # Otherwise each file alone (its own speaker), printed as it is done, one file in
    # memory at a time. Progress goes to the log (stderr), never among the transcripts;
    # each file's own decoding lines stay silent inside this count of files.
    with Progress("transcribe", total=len(args.audio), unit="files") as progress:
        for i, path in enumerate(progress.each(args.audio)):
            audio = _load(args, path, decoder.sample_rate, low)
            failed += 1 if audio is None else transcribe([(f"{i:08d}", *audio, path)])
    return _status(failed, len(args.audio), low, decoder.sample_rate)


def _load(
    args: argparse.Namespace, path: str, model_rate: int, low: dict[int, list[str]]
) -> tuple[np.ndarray, int] | None:
    """``path``'s samples and rate, or None after one error line (the batch goes on); a
    rate below the model's is noted in ``low`` (one warning per rate, at the end)."""
    try:
        samples, rate = load_audio_file(
            path, raw_rate=args.raw_rate, raw_byteorder=args.raw_byteorder, on_multichannel=_first_channel
        )
    except DataError as err:
        print(f"asrkit: error: {err}", file=sys.stderr, flush=True)
        return None
    if rate < model_rate:
        low[rate].append(path)
    return samples, rate


def _first_channel(path: Path, channels: int) -> None:
    print(
        f"asrkit: warning: {path}: {channels} channels; transcribing the first (for another, "
        f"or a mix: sox {path} mono.wav remix N)",
        file=sys.stderr,
        flush=True,
    )


def _status(failed: int, total: int, low: dict[int, list[str]], model_rate: int) -> int:
    """The warnings about low rates; 0, or 2 when some files could not be read (each said so)."""
    for rate, paths in sorted(low.items()):
        print(low_rate_warning(paths, rate, model_rate), file=sys.stderr)
    if failed and total > 1:
        print(f"asrkit: {failed} of {total} files could not be transcribed (see above)", file=sys.stderr)
    return 2 if failed else 0


def low_rate_warning(paths: list[str], rate: int, model_rate: int) -> str:
    """The warning for audio below the model's sample rate: upsampling adds no band, so a
    model trained on wide-band speech sees speech it never saw (e.g. telephone audio)."""
    files = f"{paths[0]}" if len(paths) == 1 else f"{len(paths)} files (first: {paths[0]})"
    return (
        f"asrkit: warning: {files}: audio at {rate} Hz is below the model's {model_rate} Hz; "
        f"it is upsampled, but has nothing above {rate // 2} Hz, which this model was trained "
        f"on, so expect many errors. For audio at this rate train a model at it: "
        f"recipes/an4/run.sh features.sample_rate={rate} features.resample=true"
    )
