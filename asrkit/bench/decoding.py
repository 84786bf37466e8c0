"""Decoding speed: real-time factors of greedy and beam + LM decoding on the CPU.

A trained experiment (default: the AN4 recipe's ``make demo`` model) decodes the data
dir's utterances: the network forward pass once, then the greedy best path and the
beam search with the experiment's lexicon and LM (the LM weight and word score its
decoding stage chose on the dev set, when recorded), through the decoders the stages
use. Each real-time factor is seconds of compute per second of audio; audio length is the
feature frame count times the frame shift.
"""

from __future__ import annotations

from pathlib import Path

import torch

from asrkit.data.datadir import read_utt2num_frames
from asrkit.decoding.ctc import CtcDecoder
from asrkit.decoding.decoder import DecodingRecord
from asrkit.decoding.recognizer import Recognizer, check_exp_dir
from asrkit.errors import ConfigError

DEFAULT_EXP = "recipes/an4/exp/an4_fbank_demo"


def _point(exp_dir: Path) -> tuple[float, float]:
    """The LM weight and word score stage 5 chose (its beam_lm record), else (1, 0)."""
    record = DecodingRecord.load(exp_dir, "beam_lm")
    return record.point if record is not None else (1.0, 0.0)


def bench_decoding(data_dir: str | Path, *, exp_dir: str | Path = DEFAULT_EXP, threads: int = 1) -> dict:
    """Real-time factors of the forward pass, greedy search and beam + LM search."""
    exp_dir, data_dir = Path(exp_dir), Path(data_dir)
    check_exp_dir(exp_dir)
    lexicon, lm = exp_dir / "lang" / "lexicon.txt", exp_dir / "lang" / "lm.arpa"
    if not (lexicon.is_file() and lm.is_file()):
        raise ConfigError(
            f"{exp_dir}/lang: no lexicon and LM; run the recipe's stage 3 first (make demo does)"
        )
    torch.set_num_threads(threads)
    recognizer = Recognizer(exp_dir, max_frames=12000)
    greedy = CtcDecoder(recognizer, "greedy")
    point = _point(exp_dir)
    beam = CtcDecoder(recognizer, "beam_lm", [point], beam_size=50, lexicon=lexicon, lm=lm)
    utts = recognizer.open_set(data_dir)
    shift = float((data_dir / "frame_shift").read_text()) if (data_dir / "frame_shift").is_file() else 0.01
    frames = (
        read_utt2num_frames(data_dir / "utt2num_frames")
        if (data_dir / "utt2num_frames").is_file()
        else dict(zip(utts.ids, utts.lengths.tolist(), strict=True))
    )
    audio_s = sum(frames.values()) * shift
    beam.search(point)  # the lexicon and LM loaded before the clock starts
    prepared = greedy.prepare(data_dir)
    forward_s = prepared.seconds
    greedy.transcripts(prepared)
    greedy_s = prepared.seconds - forward_s
    beam.transcripts(prepared)
    beam_s = prepared.seconds - forward_s - greedy_s
    setting = {"lm_weight": point[0], "word_score": point[1]}
    return {
        "exp_dir": str(exp_dir),
        "utterances": len(utts),
        "audio_s": round(audio_s, 1),
        "threads": threads,
        "beam": {"beam_size": 50, **setting},
        "forward_rtf": round(forward_s / audio_s, 5),
        "greedy_search_rtf": round(greedy_s / audio_s, 5),
        "beam_lm_search_rtf": round(beam_s / audio_s, 5),
        "greedy_total_rtf": round((forward_s + greedy_s) / audio_s, 5),
        "beam_lm_total_rtf": round((forward_s + beam_s) / audio_s, 5),
        "beam_over_greedy": round((forward_s + beam_s) / (forward_s + greedy_s), 3),
    }
