"""A newcomer's own corpus: a folder of wav files in speaker folders and one transcript list
(real AN4 speech) -> ``asrkit make-data-dir --split`` -> the ``kaldi_dirs`` recipe trains a
tiny model and scores it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.helpers import SHARED_AN4, run_cli

pytestmark = pytest.mark.skipif(not SHARED_AN4.is_dir(), reason=f"AN4 corpus not at {SHARED_AN4}")


def _folder(root: Path, count: int = 60) -> Path:
    """``count`` AN4 training utterances as ``root/<speaker>/<id>.wav`` and ``root/../list.txt``
    ('<id> WORDS ...'), as someone's own recordings would come."""
    etc = SHARED_AN4 / "etc"
    texts = {}
    for line in (etc / "an4_train.transcription").read_text().splitlines():
        match = re.fullmatch(r"(?P<words>.*)\((?P<id>[^()\s]+)\)\s*", line.strip())
        if match:
            texts[match["id"]] = " ".join(w for w in match["words"].split() if w not in ("<s>", "</s>"))
    fileids = sorted((etc / "an4_train.fileids").read_text().split())
    chosen = fileids[:: len(fileids) // count][:count]
    lines = []
    for fileid in chosen:
        speaker, corpus_id = fileid.split("/")[-2:]
        wav = root / speaker / f"{corpus_id}.wav"
        wav.parent.mkdir(parents=True, exist_ok=True)
        samples = np.fromfile(SHARED_AN4 / "wav" / f"{fileid}.raw", dtype=">i2").astype(np.int16)
        soundfile.write(wav, samples, 16000, subtype="PCM_16")
        lines.append(f"{corpus_id} {texts[corpus_id]}")
    (root.parent / "list.txt").write_text("\n".join(lines) + "\n")
    return root


def test_a_folder_of_wavs_becomes_data_dirs_that_train_and_score(tmp_path: Path) -> None:
    audio = _folder(tmp_path / "recordings")
    made = run_cli(
        "make-data-dir",
        str(audio),
        str(tmp_path / "data"),
        "--transcripts",
        str(tmp_path / "list.txt"),
        "--split",
        "train=0.8,dev=0.1,test=0.1",
    )
    assert made.returncode == 0, made.stderr
    command = next(ln for ln in made.stdout.splitlines() if ln.startswith("train on them: "))
    overrides = command.split("recipes/kaldi_dirs/run.sh ", 1)[1].split()
    for name in ("train", "dev", "test"):
        checked = run_cli("validate-data", str(tmp_path / "data" / name))
        assert checked.returncode == 0, checked.stderr
    recipe = tmp_path / "recipe"
    result = run_cli(
        "run",
        "--stage",
        "0",
        "--stop-stage",
        "5",
        "data=kaldi",
        *overrides,
        f"data_root={recipe}/data",
        f"feats_root={recipe}/fbank",
        f"exp_dir={recipe}/exp",
        "features.nj=1",
        "model=tiny",
        "train.epochs=1",
        "train.progress=false",
        "decode=greedy",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    wer = (recipe / "exp" / "decode_test" / "scoring" / "wer").read_text()
    assert wer.startswith("%WER "), wer
    speakers = {
        name: {ln.split()[0] for ln in (tmp_path / "data" / name / "spk2utt").read_text().splitlines()}
        for name in ("train", "dev", "test")
    }
    assert len(speakers["train"]) > 3 and speakers["train"].isdisjoint(speakers["dev"] | speakers["test"])
