"""Test helpers: seeded synthetic audio and data dirs laid out like the real corpora, small
data dirs of real AN4 speech, running the CLI (in a subprocess or in this process) and a
tiny recipe, and the check that a user mistake ends as one error line."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
import torch

from asrkit.data import DataDir, write_data_dir

REPO = Path(__file__).resolve().parent.parent
SHARED_AN4 = REPO.parent / "shared" / "data" / "an4"


def tone(seed: int, seconds: float = 0.4, rate: int = 16000) -> np.ndarray:
    """Seeded int16 audio: a chirp plus noise, loud enough for non-trivial features."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    freq = 200 + 100 * (seed % 7)
    signal = 6000 * np.sin(2 * np.pi * freq * t * (1 + t)) + rng.normal(0, 500, t.size)
    return np.clip(signal, -32768, 32767).astype(np.int16)


def make_an4_corpus(root: Path, layout: str) -> Path:
    """A 9-utterance corpus in AN4's layout: ``raw`` (big-endian PCM) or ``sphere``.

    Train: speakers fabc (3 utts), mxyz (4 utts); test: speaker fqqq (2 utts).
    """
    words = ["YES", "NO", "GO", "A B C", "TWO", "ERASE F", "NINE", "RUBOUT", "STOP"]
    sets = {"an4_clstk": [("fabc", 3), ("mxyz", 4)], "an4test_clstk": [("fqqq", 2)]}
    n = 0
    for folder, speakers in sets.items():
        stem = "an4_train" if folder == "an4_clstk" else "an4_test"
        trans, ids = [], []
        for spk, count in speakers:
            (root / "wav" / folder / spk).mkdir(parents=True, exist_ok=True)
            for _ in range(count):
                corpus_id = f"an{100 + n}-{spk}-b"
                audio = tone(n)
                base = root / "wav" / folder / spk / corpus_id
                if layout == "raw":
                    base.with_suffix(".raw").write_bytes(audio.astype(">i2").tobytes())
                else:
                    soundfile.write(base.with_suffix(".sph"), audio, 16000, format="NIST", subtype="PCM_16")
                marks = ("<s> ", " </s>") if folder == "an4_clstk" else ("", "")
                trans.append(f"{marks[0]}{words[n]}{marks[1]} ({corpus_id})")
                ids.append(f"{folder}/{spk}/{corpus_id}")
                n += 1
        (root / "etc").mkdir(parents=True, exist_ok=True)
        (root / "etc" / f"{stem}.transcription").write_text("\n".join(trans) + "\n")
        (root / "etc" / f"{stem}.fileids").write_text("\n".join(ids) + "\n")
    return root


def make_an4_subset(data_root: Path, *, train: int = 120, dev: int = 10, test: int = 10) -> Path:
    """Real speech: three data dirs of AN4 utterances (``SHARED_AN4``, raw layout) under
    ``data_root``, as wav files made with numpy + soundfile (no sox).

    ``train + dev`` utterances are taken evenly spaced through AN4's training list in sorted
    (speaker-first) id order, so that they span its speakers, and every
    ``(train + dev) // dev``-th of them is held out as ``train_dev``; ``test`` is ``test``
    utterances evenly spaced through the test list. Ids are ``<spk>-<corpus id>`` and
    transcripts lose ``<s>``/``</s>``, as AN4's own preparation writes them. Returns
    ``data_root``.
    """

    def utterances(stem: str) -> list[tuple[str, Path, str, str]]:
        etc = SHARED_AN4 / "etc"
        texts = {}
        for line in (etc / f"{stem}.transcription").read_text().splitlines():
            match = re.fullmatch(r"(?P<words>.*)\((?P<id>[^()\s]+)\)\s*", line.strip())
            if match:
                words = [w for w in match["words"].split() if w not in ("<s>", "</s>")]
                texts[match["id"]] = " ".join(words)
        found = []
        for fileid in (etc / f"{stem}.fileids").read_text().split():
            spk, corpus_id = fileid.split("/")[-2:]
            found.append((f"{spk}-{corpus_id}", SHARED_AN4 / "wav" / f"{fileid}.raw", spk, texts[corpus_id]))
        return sorted(found)

    def write(name: str, chosen: list[tuple[str, Path, str, str]]) -> None:
        audio = data_root / "audio" / name
        audio.mkdir(parents=True, exist_ok=True)
        wav_scp, utt2spk, text = {}, {}, {}
        for utt, raw, spk, words in chosen:
            wav = audio / f"{utt}.wav"
            soundfile.write(wav, np.fromfile(raw, dtype=">i2").astype(np.int16), 16000, subtype="PCM_16")
            wav_scp[utt], utt2spk[utt], text[utt] = str(wav), spk, words
        write_data_dir(data_root / name, DataDir(wav_scp=wav_scp, utt2spk=utt2spk, text=text))

    pool = utterances("an4_train")
    pool = pool[:: len(pool) // (train + dev)][: train + dev]
    held_out = set(pool[:: len(pool) // dev][:dev])
    write("train", [u for u in pool if u not in held_out])
    write("train_dev", sorted(held_out))
    tests = utterances("an4_test")
    write("test", tests[:: len(tests) // test][:test])
    return data_root


def make_data_dir(path: Path, *, utts: int = 4, rate: int = 16000, seed: int = 0) -> DataDir:
    """A valid Kaldi data dir of ``utts`` wav files (two speakers)."""
    audio_dir = path / "audio"
    audio_dir.mkdir(parents=True, exist_ok=True)
    wav_scp, text, utt2spk = {}, {}, {}
    for i in range(utts):
        spk = "spk1" if i < utts // 2 else "spk2"
        utt = f"{spk}-utt{i}"
        wav = audio_dir / f"{utt}.wav"
        soundfile.write(wav, tone(seed + i, rate=rate), rate, subtype="PCM_16")
        wav_scp[utt], text[utt], utt2spk[utt] = str(wav), f"WORD{i} HELLO", spk
    data = DataDir(wav_scp=wav_scp, utt2spk=utt2spk, text=text)
    write_data_dir(path, data)
    return data


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m asrkit ARGS`` in a subprocess (how users meet the CLI)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "asrkit", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def run_main(argv: list[str], capfd: Any) -> subprocess.CompletedProcess:
    """``asrkit ARGV`` in this process through ``asrkit.cli.main.main`` (no interpreter and
    torch start-up); output captured by pytest's ``capfd``. An exception escaping ``main``
    fails the calling test."""
    from asrkit.cli.main import main

    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code if isinstance(exit_.code, int) else 1
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """A user mistake's ending: exit status 2, no traceback, nothing on stdout, exactly one
    ``asrkit: error:`` line on stderr, holding every needle; returns that line."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stdout == "", result.stdout[-3000:]
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("asrkit: error:")]
    assert len(lines) == 1, result.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def tiny_recipe(
    tmp_path: Path, *extra: str, stop_stage: int = 5, stage: int = 2, exp: str = "exp"
) -> subprocess.CompletedProcess:
    """Stages ``stage``-``stop_stage`` of the recipe on seeded train/train_dev/test dirs of 6
    utterances each (made on the first call), with the tiny model for 2 epochs, into
    ``tmp_path/exp`` (``extra``: more overrides)."""
    for i, name in enumerate(("train", "train_dev", "test")):
        if not (tmp_path / "data" / name).is_dir():
            make_data_dir(tmp_path / "data" / name, utts=6, seed=10 * i)
    return run_cli(
        "run",
        "--stage",
        str(stage),
        "--stop-stage",
        str(stop_stage),
        f"data_root={tmp_path / 'data'}",
        f"feats_root={tmp_path / 'fbank'}",
        f"exp_dir={tmp_path / exp}",
        "features.nj=1",
        "model=tiny",
        "train.epochs=2",
        "train.progress=false",
        "features.num_mel_bins=23",
        "tokenizer=char",  # the fixtures' words are not in AN4's dictionary
        *extra,
    )


def ctc_emissions(tokenizer: Any, text: str, rng: np.random.Generator, *, noise: float) -> torch.Tensor:
    """``(T, V)`` CTC log-probabilities that spell ``text`` (2 frames per unit, a blank
    after each), blurred by Gaussian noise of scale ``noise`` on the logits."""
    path = []
    for i in tokenizer.encode(text):
        path += [i, i, 0]
    logits = torch.full((len(path), tokenizer.num_tokens + 1), -4.0)
    logits[torch.arange(len(path)), torch.tensor(path)] = 4.0
    logits += noise * torch.from_numpy(rng.standard_normal(logits.shape)).float()
    return logits.log_softmax(-1)


def free_port() -> int:
    """A TCP port free on this host now (for a learners' rendezvous or a test daemon)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
