"""``asrkit results``: the scored decodings of experiment dirs collected into one table."""

from __future__ import annotations

from pathlib import Path

import pytest

from asrkit.data.io import atomic_write
from asrkit.scoring import score_texts, write_scoring_dir
from asrkit.scoring.results import collect_results
from tests.helpers import run_main

REF = {"spk1-u1": "a b c d".split(), "spk1-u2": "e f g h".split()}


def _decoded(folder: Path, hyp: dict[str, str], *, setting: str = "", tuned: bool = False) -> None:
    """A decode folder as the stages leave it: scoring/ (written by the stages' writer),
    the weights in ``setting``, and ``best_wer`` where the weights were tuned."""
    write_scoring_dir(score_texts(REF, {u: h.split() for u, h in hyp.items()}), folder / "scoring")
    if setting:
        atomic_write(folder / "setting", setting + "\n")
    if tuned:
        atomic_write(folder / "best_wer", "%WER 25.00 [ 2 / 8, 0 ins, 1 del, 1 sub ] x\n")


def _experiments(root: Path) -> None:
    ctc = root / "an4_fbank_demo"
    ctc.mkdir(parents=True)
    (ctc / "config.yaml").write_text(
        "data:\n  dev_set: train_dev\n  test_sets:\n  - test\ndecode:\n  tune_set: ''\n"
    )
    _decoded(ctc / "decode_train_dev", {"spk1-u1": "a b c x", "spk1-u2": "e f g h"})
    _decoded(ctc / "decode_test", {"spk1-u1": "a b", "spk1-u2": "e f g h"})
    _decoded(
        ctc / "decode_beam_lm_train_dev",
        {"spk1-u1": "a b c d", "spk1-u2": "e f g h"},
        setting="lm_weight=1",
        tuned=True,
    )
    _decoded(ctc / "decode_beam_lm_test", {"spk1-u1": "a b c", "spk1-u2": "e f g h"}, setting="lm_weight=1")
    _decoded(ctc / "previous" / "decode_test", {"spk1-u1": "", "spk1-u2": ""})  # kept aside by a rerun
    hybrid = root / "an4_hybrid"
    hybrid.mkdir()
    (hybrid / "config.yaml").write_text("data:\n  dev_set: train_dev\n  test_sets: [test]\n")
    _decoded(
        hybrid / "gmm" / "tri1" / "decode_train_dev",
        {"spk1-u1": "a b c d", "spk1-u2": "e x g h"},
        setting="lm_weight=17",
        tuned=True,
    )
    _decoded(
        hybrid / "gmm" / "tri1" / "decode_test",
        {"spk1-u1": "a b c d", "spk1-u2": "e f g h"},
        setting="lm_weight=17",
    )
    _decoded(hybrid / "decode_hybrid_test", {"spk1-u1": "a b c d", "spk1-u2": "e f g"}, setting="lm_weight=8")


def test_rows_name_experiment_system_set_and_file(tmp_path: Path) -> None:
    _experiments(tmp_path / "exp")
    rows = collect_results(tmp_path / "exp")
    got = [(r.experiment, r.dataset, r.system, r.wer, r.setting, r.tuned_here) for r in rows]
    assert got == [
        ("an4_fbank_demo", "test", "beam_lm", 12.5, "lm_weight=1", False),
        ("an4_fbank_demo", "test", "greedy", 25.0, "", False),
        ("an4_fbank_demo", "train_dev", "beam_lm", 0.0, "lm_weight=1", True),
        ("an4_fbank_demo", "train_dev", "greedy", 12.5, "", False),
        ("an4_hybrid", "test", "gmm tri1", 0.0, "lm_weight=17", False),
        ("an4_hybrid", "test", "hybrid", 12.5, "lm_weight=8", False),
        ("an4_hybrid", "train_dev", "gmm tri1", 12.5, "lm_weight=17", True),
    ]
    assert rows[0].source == "an4_fbank_demo/decode_beam_lm_test/scoring/wer"
    assert rows[0].counts == "[ 1 / 8, 0 ins, 1 del, 0 sub ]"


def test_the_command_prints_and_writes_results(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _experiments(tmp_path / "exp")
    result = run_main(["results", str(tmp_path / "exp")], capfd)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "exp" / "RESULTS").read_text() == result.stdout
    lines = result.stdout.splitlines()
    assert lines[0] == "an4_fbank_demo" and "an4_hybrid" in lines
    best_test = next(ln for ln in lines if " test " in ln and "beam_lm" in ln)
    assert "*  12.50%" in best_test and "decode_beam_lm_test/scoring/wer" in best_test
    tuned = next(ln for ln in lines if "gmm tri1" in ln and "train_dev" in ln)
    assert "(tuned)" in tuned
    # one experiment dir works too; --out - prints only
    single = run_main(["results", str(tmp_path / "exp" / "an4_hybrid"), "--out", "-"], capfd)
    assert single.returncode == 0 and single.stdout.splitlines()[0] == "an4_hybrid"
    assert not (tmp_path / "exp" / "an4_hybrid" / "RESULTS").exists()


def test_no_scores_is_one_line_with_the_fix(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp" / "x").mkdir(parents=True)
    result = run_main(["results", str(tmp_path / "exp")], capfd)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"asrkit: error: no scored decodings under {tmp_path / 'exp'}: run a recipe's decode stage "
        "first (or give its exp dir)"
    )
