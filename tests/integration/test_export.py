"""``asrkit export`` and the Python API on a tiny CTC experiment: the export holds what
``transcribe`` reads and nothing else, works with the experiment gone, and the API gives
the command's words for files and arrays."""

from __future__ import annotations

import datetime
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile

from asrkit.data.datadir import read_kaldi_map
from tests.helpers import run_cli, tiny_recipe


@pytest.mark.heavy
def test_export_then_transcribe_and_the_python_api_agree_with_the_experiment(tmp_path: Path) -> None:
    result = tiny_recipe(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    exp, out = tmp_path / "exp", tmp_path / "handover" / "an4_tiny"
    paths = list(read_kaldi_map(tmp_path / "data" / "test" / "wav.scp").values())
    said = run_cli("transcribe", str(exp), *paths)
    assert said.returncode == 0, said.stderr[-3000:]
    texts = [line.split("\t", 1)[1] for line in said.stdout.splitlines()]

    result = run_cli("export", str(exp), str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == [
        "MODEL_CARD.md",
        "cmvn_global.ark",
        "decoders/beam_lm.json",
        "lang/lexicon.txt",
        "lang/lm.arpa",
        "model.pt",
        "tokenizer/sp.model",
    ]
    card = (out / "MODEL_CARD.md").read_text()
    wer = (exp / "decode_beam_lm_test" / "scoring" / "wer").read_text().splitlines()[0]
    assert f"| test | `{wer}` |" in card and "Trained by: `" in card and "model=tiny" in card
    assert "CMU BSD-style" in card and "commit" in card
    # The units, the corpus and the date of the export.
    assert re.search(r"output: \d+ \w+ units \(CTC\)", card) and "Trained on: an4 (" in card, card
    assert f"exported {datetime.date.today().isoformat()} from" in card

    shutil.move(exp, tmp_path / "gone")  # the export must not lean on the experiment
    again = run_cli("transcribe", str(out), *paths)
    assert again.returncode == 0 and again.stdout == said.stdout, again.stderr[-3000:]

    from asrkit import Recognizer

    recognizer = Recognizer.load(out)
    assert recognizer.kind == "beam_lm" and recognizer.sample_rate == 16000
    assert recognizer.transcribe_many(paths) == texts
    assert recognizer.transcribe(Path(paths[0])) == texts[0]
    floats, rate = soundfile.read(paths[0], dtype="float32")  # as soundfile gives them
    assert recognizer.transcribe(floats, sample_rate=rate) == texts[0]
    ints, _ = soundfile.read(paths[0], dtype="int16")
    assert recognizer.transcribe(ints, sample_rate=rate) == texts[0]
    from asrkit.errors import DataError

    with pytest.raises(DataError, match="needs its rate"):
        recognizer.transcribe(floats)
    with pytest.raises(DataError, match="floats in"):
        recognizer.transcribe(floats * 32768, sample_rate=rate)

    # An export never writes into a directory that holds something.
    refused = run_cli("export", str(tmp_path / "gone"), str(out))
    assert refused.returncode == 2 and "exists and is not empty" in refused.stderr
    assert (out / "model.pt").is_file()
    gone = run_cli("export", str(tmp_path / "nowhere"), str(tmp_path / "x"))
    assert gone.returncode == 2 and "no trained model" in gone.stderr
    assert not (tmp_path / "x").exists()
    np.testing.assert_equal(sorted(p.name for p in (tmp_path / "handover").iterdir()), ["an4_tiny"])
