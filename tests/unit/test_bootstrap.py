"""``asrkit score --bootstrap``: a WER's 95% interval by resampling utterances."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import asrkit.scoring.bootstrap as bootstrap_module
from asrkit.errors import UserError
from asrkit.scoring import bootstrap_counts, bootstrap_wer, score_texts
from tests.helpers import assert_one_line_error, run_main


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
    # The counts are the alignment's the summary came from, not a new one.
    assert (first.errors, first.words) == (result.words.errors, result.words.ref_words)
    assert first.wer == pytest.approx(result.words.wer)
    assert first.utterances == 130 and first.replicas == 1000
    assert first.low < first.high and first.std_error > 0


def test_replicas_drawn_in_blocks_are_all_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 7 replicas for 100 (the last one short): every replica is a real one."""
    result = score_texts(*_texts(50, seed=5))
    whole = bootstrap_wer(result, replicas=100)
    monkeypatch.setattr(bootstrap_module, "_DRAWS_PER_BLOCK", 7 * 50)
    blocks = bootstrap_wer(result, replicas=100)
    assert blocks == bootstrap_wer(result, replicas=100)
    assert blocks.low < result.words.wer < blocks.high
    assert blocks.std_error == pytest.approx(whole.std_error, rel=0.35)


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
    argv = [
        "score",
        str(tmp_path / "ref"),
        str(tmp_path / "hyp"),
        "--bootstrap",
        "--out-dir",
        str(tmp_path / "s"),
    ]
    result = run_main(argv, capfd)
    assert result.returncode == 0, result.stderr
    summary, line = result.stdout.splitlines()[0], result.stdout.splitlines()[-1]
    assert len(result.stdout.splitlines()) == 4  # %WER, %CER, %SER, then the interval
    found = re.fullmatch(
        r"%WER (\S+) \[ (\d+) / (\d+) \], 95% interval (\S+) \.\. (\S+), standard error (\S+) "
        r"\(bootstrap over 60 utterances, 1000 replicas, seed 0\)",
        line,
    )
    assert found is not None, line
    # The same WER and counts as Kaldi's line above it.
    assert summary.startswith(f"%WER {found[1]} [ {found[2]} / {found[3]},")
    assert float(found[4]) < float(found[1]) < float(found[5])
    assert (tmp_path / "s" / "wer_interval").read_text() == line + "\n"
    # Another seed, another interval; the same seed, the same line.
    assert run_main([*argv, "--seed", "0"], capfd).stdout.splitlines()[-1] == line
    other = run_main([*argv, "--seed", "3"], capfd).stdout.splitlines()[-1]
    assert other.endswith("seed 3)") and other.split(", standard")[0] != line.split(", standard")[0]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--bootstrap", "20"],
            "--bootstrap 20: too few replicas for stable percentiles; use at least 100 (the "
            "default, 1000, when --bootstrap is given without a number)",
        ),
        (["--bootstrap", "--seed", "-1"], "--seed -1: the bootstrap's seed must be 0 or more"),
    ],
)
def test_a_bad_setting_is_one_line_with_the_fix(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    (tmp_path / "ref").write_text("a-1 x y\n")
    result = run_main(["score", str(tmp_path / "ref"), str(tmp_path / "ref"), *extra], capfd)
    assert assert_one_line_error(result) == f"asrkit: error: {message}"


def test_a_reference_without_words_has_no_interval(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ref").write_text("a-1\na-2\n")
    result = run_main(["score", str(tmp_path / "ref"), str(tmp_path / "ref"), "--bootstrap"], capfd)
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "asrkit: error: the reference has no words (2 utterance(s), all empty): a WER and its "
        "interval are undefined; score against a reference text with transcripts"
    )
    with pytest.raises(UserError, match="the reference has no words"):
        bootstrap_counts([0], [0])
    with pytest.raises(UserError, match="between 0 and 1"):
        bootstrap_counts([1], [2], level=95)
