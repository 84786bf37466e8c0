"""Speed perturbation of the training data dir (data.speed_perturb)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from asrkit.config import compose
from asrkit.data.audio import load_audio
from asrkit.data.datadir import read_kaldi_map, validate_data_dir, write_kaldi_map
from asrkit.data.perturb import original_only, perturbed_factors, speed_perturb
from asrkit.errors import ConfigError, DataError
from tests.helpers import make_data_dir

needs_sox = pytest.mark.skipif(shutil.which("sox") is None, reason="sox is not installed (make sysdeps)")


@needs_sox
def test_three_way_perturbation_renames_reads_and_keeps_speaker_files(tmp_path: Path) -> None:
    train = tmp_path / "train"
    original = make_data_dir(train, utts=4)
    write_kaldi_map(train / "spk2gender", {"spk1": "f", "spk2": "m"})
    write_kaldi_map(train / "utt2lang", dict.fromkeys(original.utt_ids, "en"))
    # A pipe entry too, as AN4's raw audio is read.
    piped = f"sox {original.wav_scp['spk2-utt3']} -t wav - |"
    write_kaldi_map(train / "wav.scp", {**original.wav_scp, "spk2-utt3": piped})

    speed_perturb(train, [0.9, 1.0, 1.1])

    data = validate_data_dir(train)
    assert len(data.utt_ids) == 12 and data.utt_ids == sorted(data.utt_ids)
    assert data.utt2spk["sp0.9-spk1-utt0"] == "sp0.9-spk1" and data.utt2spk["spk1-utt0"] == "spk1"
    assert data.wav_scp["spk1-utt0"] == original.wav_scp["spk1-utt0"]  # factor 1: the original
    assert data.text is not None and data.text["sp1.1-spk2-utt3"] == original.text["spk2-utt3"]
    assert read_kaldi_map(train / "spk2gender")["sp1.1-spk2"] == "m"
    assert read_kaldi_map(train / "utt2lang")["sp0.9-spk1-utt1"] == "en"
    assert read_kaldi_map(train / "utt2uniq")["sp1.1-spk2-utt3"] == "spk2-utt3"
    assert (train / "speed_perturb").read_text().split() == ["0.9", "1", "1.1"]
    # The perturbed audio plays slower (0.9: longer) or faster (1.1: shorter), at the same rate.
    for utt in ("spk1-utt0", "spk2-utt3"):
        base, rate = load_audio(data.wav_scp[utt], utt=utt)
        slow, slow_rate = load_audio(data.wav_scp[f"sp0.9-{utt}"], utt=utt)
        fast, _ = load_audio(data.wav_scp[f"sp1.1-{utt}"], utt=utt)
        assert slow_rate == rate
        assert len(slow) == pytest.approx(len(base) / 0.9, rel=0.01)
        assert len(fast) == pytest.approx(len(base) / 1.1, rel=0.01)
        # Seen in the field: sox dithers with a fresh random seed on each read, so every
        # fresh preparation had other features and alignments (a study's inputs changed).
        again, _ = load_audio(data.wav_scp[f"sp0.9-{utt}"], utt=utt)
        assert torch.equal(torch.as_tensor(again), torch.as_tensor(slow)), utt
    # The LM and the tokenizer see each sentence once.
    assert original_only(data.text, perturbed_factors(train)) == original.text
    with pytest.raises(DataError, match="already speed-perturbed"):
        speed_perturb(train, [0.9, 1.0, 1.1])


def test_bad_factors_and_invalid_dirs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="include 1.0") as err:
        compose(["data.speed_perturb=[0.9,1.1,3.0]"])
    assert "[0.5, 2.0]" in str(err.value)  # both problems in one error
    train = tmp_path / "train"
    make_data_dir(train, utts=2)
    # Segmented dirs are perturbed (tests/unit/test_segments.py); a broken one is refused as it is.
    (train / "segments").write_text("spk1-utt0 rec 0.0 0.2\n")
    before = {p.name: p.read_bytes() for p in train.iterdir() if p.is_file()}
    with pytest.raises(
        DataError, match="segments:1: utterance 'spk1-utt0': recording 'rec' is not in wav.scp"
    ):
        speed_perturb(train, [0.9, 1.0])
    assert {p.name: p.read_bytes() for p in train.iterdir() if p.is_file()} == before  # left as it was
