"""``asrkit score --bootstrap``: a WER's 95% interval by resampling utterances."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from asrkit.errors import UserError
from asrkit.scoring import bootstrap_counts, bootstrap_wer, score_texts
from tests.helpers import run_main


def _texts(n: int, seed: int) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """``n`` utterances of 3-12 words; about one word in eight wrong, whole utterances
    sometimes lost (errors that come together)."""
    rng = np.random.default_rng(seed)
    ref, hyp = {}, {}
    for i in range(n):
        words = [f"w{rng.integers(50)}" for _ in range(rng.integers(3, 13))]
        out = [w if rng.random() > 0.12 else "x" for w in words]
        if rng.random() < 0.05:
            out = []
        ref[f"s{i % 7}-u{i:04d}"], hyp[f"s{i % 7}-u{i:04d}"] = words, out
    return ref, hyp


def test_the_interval_holds_the_wer_and_the_same_seed_gives_it_again() -> None:
    result = score_texts(*_texts(130, seed=1))
    first = bootstrap_wer(result, seed=0)
    assert first == bootstrap_wer(result, seed=0)
    assert first != bootstrap_wer(result, seed=1)
    assert first.low < result.words.wer < first.high
    assert first.wer == pytest.approx(result.words.wer)
    assert first.utterances == 130 and first.replicas == 1000


def test_four_times_the_utterances_halve_the_width() -> None:
    ref, hyp = _texts(100, seed=2)
    once = bootstrap_wer(score_texts(ref, hyp), seed=0)
    ref4 = {f"{u}-{k}": w for k in range(4) for u, w in ref.items()}
    hyp4 = {f"{u}-{k}": w for k in range(4) for u, w in hyp.items()}
    four = bootstrap_wer(score_texts(ref4, hyp4), seed=0)
    ratio = (four.high - four.low) / (once.high - once.low)
    assert 0.4 < ratio < 0.6, ratio


def test_perfect_hypotheses_have_a_zero_width_interval() -> None:
    ref, _ = _texts(20, seed=3)
    interval = bootstrap_wer(score_texts(ref, ref))
    assert (interval.low, interval.wer, interval.high, interval.std_error) == (0, 0, 0, 0)


def test_the_interval_covers_the_population_wer_at_its_stated_rate() -> None:
    """Test sets of 150 utterances drawn from one population: the 95% interval of each
    holds the population's WER in about 95% of the draws."""
    rng = np.random.default_rng(7)
    words = rng.integers(2, 20, size=20000)
    errors = rng.binomial(words, rng.beta(1.0, 7.0, size=words.size))  # utterances differ in difficulty
    truth = 100 * errors.sum() / words.sum()
    covered = 0
    trials = 200
    for trial in range(trials):
        pick = rng.integers(0, words.size, size=150)
        interval = bootstrap_counts(errors[pick], words[pick], replicas=400, seed=trial)
        covered += interval.low <= truth <= interval.high
    assert 0.89 <= covered / trials <= 0.99, covered


def test_the_command_prints_and_writes_the_interval(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ref, hyp = _texts(60, seed=4)
    (tmp_path / "ref").write_text("".join(f"{u} {' '.join(w)}\n" for u, w in ref.items()))
    (tmp_path / "hyp").write_text("".join(f"{u} {' '.join(w)}\n" for u, w in hyp.items()))
    result = run_main(
        [
            "score",
            str(tmp_path / "ref"),
            str(tmp_path / "hyp"),
            "--bootstrap",
            "--out-dir",
            str(tmp_path / "s"),
        ],
        capfd,
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[-1]
    assert line.startswith("%WER ") and "95% interval " in line
    assert "(bootstrap over 60 utterances, 1000 replicas, seed 0)" in line
    assert (tmp_path / "s" / "wer_interval").read_text() == line + "\n"


def test_too_few_replicas_is_one_line_with_the_fix(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ref").write_text("a x y\n")
    result = run_main(["score", str(tmp_path / "ref"), str(tmp_path / "ref"), "--bootstrap", "20"], capfd)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "asrkit: error: --bootstrap 20: too few replicas for stable percentiles; use at least 100"
    )
    with pytest.raises(UserError, match="the reference has no words"):
        bootstrap_counts([0], [0])
