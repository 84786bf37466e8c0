"""``asrkit transcribe EXP_DIR AUDIO...``: one ``path<TAB>transcript`` line per file."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import numpy as np
import torch

from asrkit.data.audio import load_audio_file
from asrkit.data.io import atomic_write
from asrkit.decoding.combine import CombinationSettings, CombinedRecognizer
from asrkit.decoding.config import METHODS
from asrkit.decoding.hybrid import HYBRID_SETTINGS, HybridRecognizer, HybridSettings
from asrkit.decoding.recognizer import DecodeSettings, Recognizer, check_exp_dir
from asrkit.device import pick_device
from asrkit.errors import ConfigError, DataError
from asrkit.loader.batch import Utterance


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
        "is normalised as its own speaker.",
    )
    parser.add_argument("exp_dir", help="experiment directory holding model.pt (exp/<name>)")
    parser.add_argument("audio", nargs="+", help="audio files")
    parser.add_argument("--model", default="model.pt", help="model bundle inside EXP_DIR")
    parser.add_argument(
        "--decode",
        choices=("auto", *METHODS, "combined", "hybrid"),
        default="auto",
        help="search: greedy, beam (no LM), beam_lm (lexicon + LM), combined (every system "
        "stage 8 combined, EXP_DIR/combination.json), hybrid (a hybrid experiment's frame model "
        "through its HCLG, EXP_DIR/hybrid_decoding.json); auto (default) = hybrid or combined "
        "when that stage ran, else what the decoding stage ran and tuned "
        "(EXP_DIR/decoding.json), greedy when it ran none",
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
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.set_defaults(func=_transcribe)


def _transcribe(args: argparse.Namespace) -> int:
    check_exp_dir(args.exp_dir, args.model)
    if args.device != "cpu" and not args.device.split(":")[0] == "cuda":
        raise ConfigError(f"--device {args.device!r} is not a torch device; use cpu, cuda or cuda:N")
    if args.device != "cpu":
        pick_device("cuda")  # a clear error where no GPU is visible
    recognizer = Recognizer(args.exp_dir, model=args.model, device=args.device)
    method = args.decode
    hybrid = HybridSettings.load(args.exp_dir)
    if method == "hybrid" and hybrid is None:
        raise ConfigError(
            f"{args.exp_dir}: no {HYBRID_SETTINGS}; --decode hybrid needs a hybrid experiment whose "
            "stage 7 (decode) ran"
        )
    if method == "auto" and hybrid is not None:
        method = "hybrid"
    elif method == "auto" and CombinationSettings.load(args.exp_dir) is not None:
        method = "combined"
    elif method == "auto":
        tuned = DecodeSettings.load(args.exp_dir)
        method = tuned.method if tuned is not None else "greedy"
    if method == "combined":
        combined = CombinedRecognizer.load(args.exp_dir, device=args.device)
        recognizers = combined.recognizers  # the first is EXP_DIR's own model
    elif method == "hybrid":
        assert hybrid is not None
        return _transcribe_hybrid(args, recognizer, hybrid)
    else:
        recognizers = [recognizer]
        search = recognizer.search(method)
    ctm: list[str] = []
    failed, low = 0, defaultdict[int, list[str]](list)
    # One file at a time, start to finish: memory holds the longest file, not all of them,
    # and a bad file is reported and skipped.
    for i, path in enumerate(args.audio):
        loaded = _load(args, path, recognizer.features.sample_rate, low)
        if loaded is None:
            failed += 1
            continue
        samples, rate = loaded
        utt = f"{i:08d}"
        try:  # each system with its own CMVN stats
            feats = [system.audio_features(samples, rate, utt=path, where=path) for system in recognizers]
        except DataError as err:  # too short for a frame, say: this file only
            print(f"asrkit: error: {err}", file=sys.stderr, flush=True)
            failed += 1
            continue
        posteriors = [
            dict(system.posteriors([Utterance(utt, f, np.zeros(0, dtype=np.int64))]))
            for system, f in zip(recognizers, feats, strict=True)
        ]
        log_probs = posteriors[0][utt]
        text = combined.transcripts(posteriors)[utt] if method == "combined" else search(log_probs)
        print(f"{path}\t{text}", flush=True)
        if args.ctm and text:
            times = recognizer.word_times(log_probs, text)
            if times is None:
                print(
                    f"asrkit: warning: {path}: too short to align its transcript; no word times in the CTM",
                    file=sys.stderr,
                )
                continue
            ctm += [f"{path} 1 {start:.2f} {dur:.2f} {word}\n" for word, start, dur in times]
    if args.ctm:
        atomic_write(args.ctm, "".join(ctm))
    return _status(failed, len(args.audio), low, recognizer.features.sample_rate)


def _load(
    args: argparse.Namespace, path: str, model_rate: int, low: dict[int, list[str]]
) -> tuple[np.ndarray, int] | None:
    """``path``'s samples and rate, or None after one error line (the batch goes on); a
    rate below the model's is noted in ``low`` (one warning per rate, at the end)."""
    try:
        samples, rate = load_audio_file(path, raw_rate=args.raw_rate, raw_byteorder=args.raw_byteorder)
    except DataError as err:
        print(f"asrkit: error: {err}", file=sys.stderr, flush=True)
        return None
    if rate < model_rate:
        low[rate].append(path)
    return samples, rate


def _status(failed: int, total: int, low: dict[int, list[str]], model_rate: int) -> int:
    """The warnings about low rates; 0, or 2 when some files could not be read (each said so)."""
    for rate, paths in sorted(low.items()):
        print(low_rate_warning(paths, rate, model_rate), file=sys.stderr)
    if failed and total > 1:
        print(f"asrkit: {failed} of {total} files could not be transcribed (see above)", file=sys.stderr)
    return 2 if failed else 0


def _transcribe_hybrid(args: argparse.Namespace, recognizer: Recognizer, settings: HybridSettings) -> int:
    if args.ctm:
        raise ConfigError("--ctm: word times come from the CTC alignment; a hybrid model has none yet")
    hybrid = HybridRecognizer(
        args.exp_dir, settings, subsample=int(getattr(recognizer.model, "subsample", 1))
    )
    failed, low = 0, defaultdict[int, list[str]](list)
    for i, path in enumerate(args.audio):
        loaded = _load(args, path, recognizer.features.sample_rate, low)
        if loaded is None:
            failed += 1
            continue
        try:
            feats = recognizer.audio_features(*loaded, utt=path, where=path)
        except DataError as err:
            print(f"asrkit: error: {err}", file=sys.stderr, flush=True)
            failed += 1
            continue
        utt = Utterance(f"{i:08d}", feats, np.zeros(0, dtype=np.int64))
        with torch.inference_mode():
            for name, out in recognizer.outputs([utt], "frame"):
                print(f"{path}\t{hybrid.transcribe(out, feats.shape[0], utt=name)}", flush=True)
    return _status(failed, len(args.audio), low, recognizer.features.sample_rate)


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
