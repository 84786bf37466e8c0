"""Stages 2-5 through the CLI on a seeded fixture; transcribe agrees with the decode stage."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from asrkit.data.datadir import read_kaldi_map
from asrkit.data.kaldi_ark import kaldi_io
from asrkit.data.kaldi_table import read_matrices
from asrkit.targets.alignments import read_alignments, read_frame_counts
from tests.helpers import SHARED_AN4, make_data_dir, run_cli, tiny_recipe


def _assert_a_clean_log(result: subprocess.CompletedProcess, exp: Path) -> None:
    """What a user reads: no console line twice (timestamps aside), no thread-adaptation
    messages at the default level (they are debug: `asrkit -v`), and the run's results
    table as the last thing printed."""
    import re

    lines = [
        re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "", ln) for ln in result.stderr.splitlines() if ln.strip()
    ]
    lines += [ln for ln in result.stdout.splitlines() if ln.strip()]
    repeated = sorted({ln for ln in lines if lines.count(ln) > 1})
    assert not repeated, repeated
    assert not [ln for ln in lines if "intra-op thread" in ln]
    out = result.stdout.rstrip().splitlines()
    header = max(i for i, ln in enumerate(out) if ln.startswith("results of "))
    assert out[header] == f"results of {exp}:" and all(
        re.match(r"  \S+ \(.+\) +[\d.]+%  \[ \d+ / \d+", ln) for ln in out[header + 1 :]
    ), out
    logged = [re.sub(r"^\S+ \S+ ", "", ln) for ln in (exp / "log" / "run.log").read_text().splitlines()]
    run_repeats = sorted({ln for ln in logged if ln.strip() and logged.count(ln) > 1})
    assert not run_repeats, run_repeats


def test_stages_train_decode_and_transcribe_agree(tmp_path: Path) -> None:
    result = tiny_recipe(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    exp = tmp_path / "exp"
    for name in (
        "model.pt",
        "cmvn_global.ark",
        "tokenizer/sp.model",
        "tokenizer/units.txt",
        "tokenizer/words.txt",
        "checkpoints/best.pt",
        "checkpoints/epoch2.pt",
        "train_summary.json",
        "config.yaml",
        "command",
        "log/run.log",
    ):
        assert (exp / name).is_file(), name
    assert list((exp / "tensorboard").glob("events.out.tfevents.*"))
    # Each set's WER once on the console (stdout), and in the run's log file.
    printed = [ln for ln in result.stdout.splitlines() if "%WER" in ln]
    assert [ln.split(":")[0] for ln in printed][:2] == ["train_dev", "test"], result.stdout
    assert not [ln for ln in result.stderr.splitlines() if any(p in ln for p in printed)]
    table = result.stdout.split(f"results of {exp}:\n")[1].splitlines()
    assert [row.split()[:2] for row in table] == [
        [name, f"({how})"] for how in ("greedy", "beam_lm") for name in ("train_dev", "test")
    ], result.stdout
    logged = (exp / "log" / "run.log").read_text()
    assert all(ln.split(": ", 1)[1] in logged for ln in printed)
    _assert_a_clean_log(result, exp)
    collected = run_cli("results", str(exp), "--out", "-")  # the run's scores, read back from exp/
    assert collected.returncode == 0, collected.stderr
    for line in printed:
        name, _, wer = line.partition(": %WER ")
        name, _, how = name.partition(" (")
        system = how.split(",")[0].rstrip(")") or "greedy"
        rows = [r.split() for r in collected.stdout.splitlines()[1:] if r.split()[1:3] == [name, system]]
        assert len(rows) == 1 and rows[0][0] == exp.name, (collected.stdout, line)
        assert rows[0][3].lstrip("*") == f"{float(wer.split()[0]):.2f}", (collected.stdout, line)
    summary = json.loads((exp / "train_summary.json").read_text())
    assert [h["epoch"] for h in summary["history"]] == [1, 2]
    assert (exp / "curves.png").read_bytes().startswith(b"\x89PNG")
    for name in ("train_dev", "test"):
        scoring = exp / f"decode_{name}" / "scoring"
        assert (scoring / "wer").read_text().startswith("%WER ")
        for f in ("ref.trn", "hyp.trn", "per_utt", "per_spk"):
            assert (scoring / f).is_file()
        assert f"{name}: %WER " in result.stdout
    log = (exp / "log" / "run.log").read_text()
    for stage in ("lang", "train", "decode"):
        assert f"({stage}): done in" in log
    # The same command again: every stage is skipped, the scores are shown again.
    again = run_cli("run", "--stage", "2", "--stop-stage", "5", *result.args[8:])
    assert again.returncode == 0, again.stderr[-3000:]
    for number, name in ((2, "features"), (3, "lang"), (4, "train"), (5, "decode")):
        assert f"stage {number} ({name}): already done with these settings" in again.stderr
    assert [ln for ln in again.stdout.splitlines() if "%WER" in ln] == [
        ln for ln in result.stdout.splitlines() if "%WER" in ln
    ]

    # transcribe: by default the search stage 5 tuned (beam + LM), or greedy on request;
    # each gives exactly the decoding stage's transcripts.
    wav_scp = read_kaldi_map(tmp_path / "data" / "test" / "wav.scp")
    assert json.loads((exp / "decoders" / "beam_lm.json").read_text())["kind"] == "beam_lm"
    for options, folder in (([], "decode_beam_lm_test"), (["--decode", "greedy"], "decode_test")):
        hyp = read_kaldi_map(exp / folder / "hyp", allow_empty_value=True)
        out = run_cli(
            "transcribe", str(exp), *wav_scp.values(), *options, "--ctm", str(tmp_path / "words.ctm")
        )
        assert out.returncode == 0, out.stderr
        assert "warning" not in out.stderr  # 16 kHz audio, a 16 kHz model
        lines = out.stdout.splitlines()
        assert len(lines) == len(wav_scp)
        for (utt, path), line in zip(wav_scp.items(), lines, strict=True):
            got_path, _, text = line.partition("\t")
            assert got_path == path and text == hyp[utt], (utt, line, folder)
        # Word times: one CTM line per word of every file that has words, in order, within
        # the audio (0.4 s fixtures).
        ctm = [ln.split() for ln in (tmp_path / "words.ctm").read_text().splitlines()]
        words = [(path, w) for (utt, path) in wav_scp.items() for w in hyp[utt].split()]
        assert [(c[0], c[4]) for c in ctm] == words
        for _, channel, start, duration, _ in ctm:
            assert channel == "1" and 0 <= float(start) and 0 < float(duration)
            assert float(start) + float(duration) <= 0.45

    # Audio below the model's rate: transcribed, with one warning naming the rates and the fix.
    low = tmp_path / "phone"
    make_data_dir(low, utts=2, rate=8000, seed=7)
    paths = list(read_kaldi_map(low / "wav.scp").values())
    out = run_cli("transcribe", str(exp), *paths, "--decode", "greedy")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 2
    (warning,) = [ln for ln in out.stderr.splitlines() if "warning" in ln]
    assert (
        f"2 files (first: {paths[0]})" in warning
        and "8000 Hz is below the model's 16000 Hz" in warning
        and "features.sample_rate=8000 features.resample=true" in warning
    )

    # model.pt replaced by hand (here by the first epoch's checkpoint): the decoding stage
    # decodes the new model instead of showing the old one's scores; training stays done.
    (exp / "model.pt").write_bytes((exp / "checkpoints" / "epoch1.pt").read_bytes())
    replaced = run_cli("run", "--stage", "4", "--stop-stage", "5", *result.args[8:])
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert "stage 4 (train): already done with these settings" in replaced.stderr
    assert "stage 5 (decode): done in" in replaced.stderr, replaced.stderr[-3000:]
    settled = run_cli("run", "--stage", "5", "--stop-stage", "5", *result.args[8:])
    assert "stage 5 (decode): already done with these settings" in settled.stderr, settled.stderr[-3000:]


def test_decode_any_data_dir_without_features(tmp_path: Path) -> None:
    result = tiny_recipe(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    other = tmp_path / "elsewhere" / "mine"
    make_data_dir(other, utts=3, rate=8000, seed=99)  # 8 kHz: resampled to the model's rate
    result = run_cli(
        "run",
        "--stage",
        "5",
        "--stop-stage",
        "5",
        f"exp_dir={tmp_path / 'exp'}",
        f"data_root={tmp_path / 'data'}",
        f"decode.sets=[{other}]",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    hyp = read_kaldi_map(tmp_path / "exp" / "decode_mine" / "hyp", allow_empty_value=True)
    assert sorted(hyp) == ["spk1-utt0", "spk2-utt1", "spk2-utt2"]
    assert (tmp_path / "exp" / "decode_mine" / "scoring" / "wer").is_file()


def test_transcribe_reports_a_bad_file_and_goes_on(tmp_path: Path) -> None:
    """Seen in the field: one bad file in a transcribe batch lost every transcript."""
    result = tiny_recipe(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    paths = list(read_kaldi_map(tmp_path / "data" / "test" / "wav.scp").values())
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF....WAVEfmt not really audio")
    out = run_cli("transcribe", str(tmp_path / "exp"), paths[0], str(broken), paths[1], "--decode", "greedy")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert [ln.split("\t")[0] for ln in out.stdout.splitlines()] == [paths[0], paths[1]]
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("asrkit: error:")]
    assert len(errors) == 1 and str(broken) in errors[0], out.stderr
    assert "1 of 3 files could not be transcribed" in out.stderr

    # A stereo file is read as its first channel, with a warning; a folder is named as one.
    import soundfile

    mono, rate = soundfile.read(paths[0], dtype="int16")
    stereo = tmp_path / "stereo.wav"
    soundfile.write(stereo, np.stack([mono, np.zeros_like(mono)], axis=1), rate)
    out = run_cli(
        "transcribe", str(tmp_path / "exp"), paths[0], str(stereo), str(tmp_path), "--decode", "greedy"
    )
    assert out.returncode == 2, out.stderr[-3000:]
    texts = [ln.split("\t")[1] for ln in out.stdout.splitlines()]
    assert len(texts) == 2 and texts[0] == texts[1], out.stdout
    assert f"asrkit: warning: {stereo}: 2 channels; transcribing the first" in out.stderr
    assert f"asrkit: error: {tmp_path}: is a directory, not an audio file; give its files" in out.stderr
    # transcribe has no wav.scp to pick a channel in, and the folder exists.
    assert "wav.scp" not in out.stderr and "not found" not in out.stderr, out.stderr

    # A long file goes through the model piece by piece (memory bounded by a piece): the
    # pieces' outputs join into as many frames as one pass gives.
    import torch

    from asrkit.decoding.recognizer import Recognizer
    from asrkit.loader.batch import Utterance

    samples = np.concatenate([soundfile.read(p, dtype="int16")[0] for p in paths]).astype(np.float32)
    whole, pieces = Recognizer(tmp_path / "exp"), Recognizer(tmp_path / "exp", max_chunk_frames=30)
    feats = whole.audio_features(samples, 16000, utt="long", where="long")
    assert feats.shape[0] > 90  # several pieces
    utt = [Utterance("long", feats, np.zeros(0, dtype=np.int64))]
    (_, one), (_, joined) = whole.posteriors(utt)[0], pieces.posteriors(utt)[0]
    assert joined.shape == one.shape and torch.isfinite(joined).all()


def test_transcribe_errors_are_one_line(tmp_path: Path) -> None:
    out = run_cli("transcribe", str(tmp_path / "nothing"), "x.wav")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "model.pt: no trained model" in out.stderr


@pytest.mark.recipe
@pytest.mark.slow
@pytest.mark.timeout(3600)  # the whole demo: minutes, beyond the default tier's 300 s limit
@pytest.mark.skipif(not SHARED_AN4.is_dir(), reason=f"AN4 corpus not at {SHARED_AN4}")
def test_an4_demo_recipe_end_to_end(tmp_path: Path) -> None:
    """The `make demo` recipe on real AN4 (minutes): test WER within the demo target; the
    forced alignments load back and pass the alignment checks against the AN4 features;
    the log-likelihoods have one row per output frame and one column per class."""
    import re
    import subprocess

    script = Path(__file__).resolve().parents[2] / "recipes" / "an4" / "run.sh"
    result = subprocess.run(
        [
            str(script),
            f"data_root={tmp_path / 'data'}",
            f"feats_root={tmp_path / 'fbank'}",
            f"exp_dir={tmp_path / 'exp'}",
            "train.progress=false",
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    wer = float(re.search(r"test: %WER ([\d.]+)", result.stdout).group(1))
    assert wer <= 20.0
    # Beam search with the lexicon and LM, tuned on train_dev, does better than greedy.
    beam = float(re.search(r"test \(beam_lm, [^)]*\): %WER ([\d.]+)", result.stdout).group(1))
    assert beam < wer
    assert (tmp_path / "exp" / "decode_beam_lm_train_dev" / "best_wer").is_file()
    _assert_a_clean_log(result, tmp_path / "exp")
    exp = tmp_path / "exp"
    for name in ("train", "train_dev"):
        check = run_cli("check-alignments", str(exp / f"ali_{name}"), str(tmp_path / "data" / name))
        assert check.returncode == 0, check.stdout + check.stderr
        frames = {u: m.shape[0] for u, m in read_matrices(f"scp:{tmp_path / 'data' / name / 'feats.scp'}")}
        alis = read_alignments(str(exp / f"ali_{name}"))
        via_scp = read_alignments(f"scp:{exp / f'ali_{name}' / 'ali.scp'}")
        assert sorted(alis) == sorted(via_scp) and len(alis) >= 0.99 * len(frames)
        assert all(np.array_equal(alis[u], via_scp[u]) and alis[u].size == (frames[u] + 2) // 3 for u in alis)
    num_classes = int((exp / "ali_train" / "num_classes").read_text())
    test_frames = read_frame_counts(str(tmp_path / "data" / "test"))
    mats = dict(kaldi_io.read_mat_ark(str(exp / "loglikes_test" / "loglikes.ark")))
    assert sorted(mats) == sorted(test_frames)
    assert all(m.shape == ((test_frames[u] + 2) // 3, num_classes) for u, m in mats.items())


def test_training_refuses_a_tokenizer_dir_of_other_units(tmp_path: Path) -> None:
    """An exp dir whose tokenizer/ holds characters (e.g. copied from another experiment)
    does not silently train phones' config on character units."""
    result = tiny_recipe(tmp_path, "--stop-stage", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    lexicon = tmp_path / "lexicon.txt"
    lexicon.write_text("HELLO HH AH L OW\n")
    result = run_cli(
        "run",
        "--stage",
        "4",
        "--stop-stage",
        "4",
        f"exp_dir={tmp_path / 'exp'}",
        f"data_root={tmp_path / 'data'}",
        f"feats_root={tmp_path / 'fbank'}",
        "model=tiny",
        "tokenizer=phone",
        f"tokenizer.lexicon={lexicon}",
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "holds a sentencepiece tokenizer but tokenizer.kind=phone" in result.stderr
    assert "--stage 3" in result.stderr
