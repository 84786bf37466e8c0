"""A tiny Switchboard laid out as LDC distributes it, assembled from CMU AN4's audio.

For testing ``recipes/swbd`` end to end without LDC's discs (CI, a new machine). It writes::

    DEST/LDC97S62/swb1_d1/data/sw0NNNN.sph     2-channel 8 kHz mu-law SPHERE conversations
    DEST/LDC97S62/swb_ms98_transcriptions/NN/NNNN/swNNNNA-ms98-a-trans.text   (and B)
    DEST/LDC2002S09/hub5e_00/english/{sw_,en_}NNNN.sph   eval2000's conversations
    DEST/LDC2002S09/hub5e_00/english/hub5e_00.pem         its scored regions
    DEST/LDC2002T43/2000_hub5_eng_eval_tr/reference/hub5e00.english.000405.stm
    DEST/LDC2002T43/2000_hub5_eng_eval_tr/reference/en20000405_hub5.glm

Each conversation side is one AN4 speaker's utterances, 8 kHz, one after another with
pauses, the other side silent meanwhile (a 4-wire telephone call); MS-State transcripts
cover each side with contiguous segments, ``[silence]`` between the utterances and some
of the conventions Kaldi's ``swbd1_map_words.pl`` handles (``[noise]``, ``[laughter]``,
``[laughter-yes]``, ``[vocalized-noise]``). The eval2000 STM marks some regions
``IGNORE_TIME_SEGMENT_IN_SCORING`` and holds optionally deletable hesitations; the GLM
maps ``OH`` to ``{ OH / ZERO }`` (AN4 says both) and has Hub5-style rules. Sizes are
tiny (a few minutes of audio); the real corpus is 260 hours.

Usage: python recipes/swbd/local/make_synthetic_ldc.py AN4_DIR DEST [--train-conversations N]
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

import numpy as np
import soundfile
import torch
import torchaudio

_LINE = re.compile(r"^(?P<words>.*)\((?P<id>[^()\s]+)\)\s*$")
RATE = 8000

GLM = """;;
* name "en20000405_hub5.glm"
* desc "synthetic stand-in for the Hub5 GLM (asrkit's recipes/swbd tests)"
* format = 'NIST1'
* max_nrules = '1000'
* copy_no_hit = 'T'
* case_sensitive = 'F'
;;
;; hesitations
UH => %HESITATION / [ ] __ [ ]
UM => %HESITATION / [ ] __ [ ]
ER => %HESITATION / [ ] __ [ ]
;; contractions and alternate spellings
I'M => I AM / [ ] __ [ ]
GONNA => { GOING TO / GONNA } / [ ] __ [ ]
OKAY => { OK / OKAY } / [ ] __ [ ]
;; AN4's digits are read both ways
OH => { OH / ZERO } / [ ] __ [ ]
"""


def _an4_speakers(an4: Path, subset: str) -> dict[str, list[tuple[str, Path]]]:
    """AN4 speaker -> [(lower-case transcript, raw audio path)] of one of its sets."""
    stem = {"train": "an4_train", "test": "an4_test"}[subset]
    texts = {}
    for line in (an4 / "etc" / f"{stem}.transcription").read_text().splitlines():
        m = _LINE.match(line.strip())
        if m:
            words = [w for w in m["words"].split() if w not in ("<s>", "</s>", "<sil>")]
            texts[m["id"]] = " ".join(words).lower()
    speakers: dict[str, list[tuple[str, Path]]] = {}
    for fileid in (an4 / "etc" / f"{stem}.fileids").read_text().split():
        speakers.setdefault(Path(fileid).parent.name, []).append(
            (texts[Path(fileid).name], an4 / "wav" / f"{fileid}.raw")
        )
    return speakers


def _read_raw(path: Path) -> torch.Tensor:
    """AN4's raw audio (16 kHz, big-endian 16 bit) at 8 kHz, float in [-1, 1]."""
    samples = np.fromfile(path, dtype=">i2").astype(np.float32) / 32768.0
    return torchaudio.functional.resample(torch.from_numpy(samples), 16000, RATE)


def _conversation(
    sides: list[list[tuple[str, Path]]], rng: random.Random
) -> tuple[np.ndarray, list[list[tuple[float, float, str]]]]:
    """Two sides taking turns: (samples (T, 2), per side [(start, end, words)])."""
    clips: list[tuple[int, torch.Tensor, str]] = []
    for side, utterances in enumerate(sides):
        for text, path in utterances:
            clips.append((side, _read_raw(path), text))
    rng.shuffle(clips)
    pieces: list[np.ndarray] = []
    times: list[list[tuple[float, float, str]]] = [[], []]
    at = 0
    for side, audio, text in clips:
        gap = int(RATE * rng.uniform(0.3, 0.8))
        block = np.zeros((gap + audio.numel(), 2), dtype=np.float32)
        block[gap:, side] = audio.numpy()
        times[side].append(((at + gap) / RATE, (at + gap + audio.numel()) / RATE, text))
        pieces.append(block)
        at += block.shape[0]
    tail = np.zeros((int(RATE * 0.5), 2), dtype=np.float32)
    samples = np.concatenate([*pieces, tail])
    samples += np.random.default_rng(rng.randrange(1 << 30)).normal(0, 1e-3, samples.shape).astype(np.float32)
    return np.clip(samples, -1, 1), times


def _write_sph(path: Path, samples: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(path), samples, RATE, format="NIST", subtype="ULAW")


def _ms98_lines(
    conv: int, side: str, turns: list[tuple[float, float, str]], end: float, rng: random.Random
) -> str:
    """An MS-State ``-trans.text``: contiguous segments, [silence] between the turns."""
    lines, at, n = [], 0.0, 1
    for start, stop, text in turns:
        if start > at:
            lines.append((at, start, "[silence]"))
        words = text.split()
        if rng.random() < 0.3:
            noise = rng.choice(["[noise]", "[laughter]", "[vocalized-noise]"])
            words.insert(rng.randrange(len(words) + 1), noise)
        words = [f"[laughter-{w}]" if w == "yes" and rng.random() < 0.5 else w for w in words]
        lines.append((start, stop, " ".join(words)))
        at = stop
    if at < end:
        lines.append((at, end, "[silence]"))
    out = []
    for start, stop, text in lines:
        out.append(f"sw{conv}{side}-ms98-a-{n:04d} {start:.6f} {stop:.6f} {text}")
        n += 1
    return "\n".join(out) + "\n"


def make(an4: Path, dest: Path, *, train_conversations: int = 6, seed: int = 0) -> None:
    rng = random.Random(seed)
    train = _an4_speakers(an4, "train")
    names = sorted(train)
    rng.shuffle(names)
    swbd = dest / "LDC97S62"
    for k in range(train_conversations):
        conv = 2001 + 4 * k
        a, b = names[2 * k], names[2 * k + 1]
        samples, times = _conversation([train[a][:8], train[b][:8]], rng)
        _write_sph(swbd / "swb1_d1" / "data" / f"sw0{conv}.sph", samples)
        end = samples.shape[0] / RATE
        folder = swbd / "swb_ms98_transcriptions" / str(conv)[:2] / str(conv)
        folder.mkdir(parents=True, exist_ok=True)
        for side, turns in zip("AB", times, strict=True):
            lines = _ms98_lines(conv, side, turns, end, rng)
            (folder / f"sw{conv}{side}-ms98-a-trans.text").write_text(lines)
    test = _an4_speakers(an4, "test")
    speakers = sorted(test)
    english = dest / "LDC2002S09" / "hub5e_00" / "english"
    stm = [
        ';; CATEGORY "0" "" ""',
        ';; LABEL "O" "Overall" "All Segments in the test"',
        ';; LABEL "F0" "Prepared" "Prepared Speech"',
        ';; LABEL "M" "Male" "Male Speaker"',
        ';; LABEL "F" "Female" "Female Speaker"',
    ]
    pem = []
    for k, name in enumerate(["en_4156", "en_4910", "sw_4390", "sw_4484"]):
        a, b = speakers[(2 * k) % len(speakers)], speakers[(2 * k + 1) % len(speakers)]
        samples, times = _conversation([test[a][:6], test[b][:6]], rng)
        _write_sph(english / f"{name}.sph", samples)
        for side, turns in zip("AB", times, strict=True):
            for n, (start, stop, text) in enumerate(turns):
                words = text.split()
                if n == 0 and k % 2 == 0:
                    # the call's first turn left out of scoring (as eval2000 leaves out some regions)
                    head = f"{name} {side} {name}_{side} {start:.2f} {stop:.2f} <O,F0,M>"
                    stm.append(f"{head} IGNORE_TIME_SEGMENT_IN_SCORING")
                    continue
                if rng.random() < 0.3:
                    words.insert(rng.randrange(len(words) + 1), "(%hesitation)")
                stm.append(f"{name} {side} {name}_{side} {start:.2f} {stop:.2f} <O,F0,M> {' '.join(words)}")
                pem.append(f"{name} {side} {name}_{side} {start:.2f} {stop:.2f}")
    reference = dest / "LDC2002T43" / "2000_hub5_eng_eval_tr" / "reference"
    reference.mkdir(parents=True, exist_ok=True)
    header, body = stm[:5], stm[5:]
    body.sort(key=lambda ln: (ln.split()[0], ln.split()[1], float(ln.split()[3])))
    (reference / "hub5e00.english.000405.stm").write_text("\n".join(header + body) + "\n")
    (reference / "en20000405_hub5.glm").write_text(GLM)
    pem.sort(key=lambda ln: (ln.split()[0], ln.split()[1], float(ln.split()[3])))
    (english / "hub5e_00.pem").write_text("\n".join(pem) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("an4", type=Path, help="CMU AN4 (raw layout)")
    parser.add_argument("dest", type=Path)
    parser.add_argument("--train-conversations", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    make(args.an4, args.dest, train_conversations=args.train_conversations, seed=args.seed)


if __name__ == "__main__":
    main()
