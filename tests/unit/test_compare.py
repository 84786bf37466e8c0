"""asrkit compare: the matched-pairs test against NIST's sc_stats, and the paired
bootstrap's coverage on a simulated case whose true difference is known."""

from __future__ import annotations

import os
import random
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from asrkit.scoring.compare import bootstrap_difference, matched_pairs, segment_errors
from asrkit.scoring.wer import score_texts
from tests.helpers import run_cli

SCTK = Path("/usr/lib/sctk/bin")
VOCAB = "a b c d e f g h".split()


def _ops(ref: str, hyp: str) -> list:
    return score_texts({"u": ref.split()}, {"u": hyp.split()}).per_utt["u"]


def test_segments_are_cut_at_two_words_both_systems_got_right() -> None:
    ref = "a b c d e f g h"
    # A errs on c, B on f: "a b" and "g h" bound nothing; "d e" (both right) cuts c from f.
    assert segment_errors(_ops(ref, "a b x d e f g h"), _ops(ref, "a b c d e y g h")) == [(1, 0), (0, 1)]
    # One good word between the errors does not cut: one segment.
    assert segment_errors(_ops(ref, "a b x d e f g h"), _ops(ref, "a b c d y f g h")) == [(1, 1)]
    # An insertion inside a run of good words breaks it; both right everywhere: no segment.
    assert segment_errors(_ops(ref, "a b c d e f g h"), _ops(ref, "a b c d e f g h")) == []
    assert segment_errors(_ops(ref, "a b c d z e f g h"), _ops(ref, "a b c d e f g h")) == [(1, 0)]
    with pytest.raises(ValueError, match="reference words"):
        segment_errors(_ops("a b", "a b"), _ops("a b c", "a b c"))


def _pair(seed: int, n: int = 60) -> tuple[dict, dict, dict]:
    rng = random.Random(seed)
    pa, pb = rng.uniform(0.05, 0.3), rng.uniform(0.05, 0.3)
    ref, a, b = {}, {}, {}
    for u in range(n):
        words = [rng.choice(VOCAB) for _ in range(rng.randint(1, 12))]

        def corrupt(p: float, words: list[str] = words) -> list[str]:
            out: list[str] = []
            for w in words:
                x = rng.random()
                if x < p:
                    out.append(rng.choice(VOCAB))
                elif x < 1.3 * p:
                    pass
                elif x < 1.5 * p:
                    out += [w, rng.choice(VOCAB)]
                else:
                    out.append(w)
            return out

        key = f"spk{u % 5}-u{u:03d}"
        ref[key], a[key], b[key] = words, corrupt(pa), corrupt(pb)
    return ref, a, b


@pytest.mark.skipif(not (SCTK / "sc_stats").is_file(), reason="sctk's sc_stats not installed")
@pytest.mark.parametrize("seed", range(6))
def test_matched_pairs_as_sc_stats(tmp_path: Path, seed: int) -> None:
    """Segments, mean, sd, Z and the verdict of `sc_stats -t mapsswe` on sclite's alignments."""
    ref, a, b = _pair(seed)
    for name, texts in (("ref", ref), ("a", a), ("b", b)):
        (tmp_path / f"{name}.trn").write_text("".join(f"{' '.join(w)} ({k})\n" for k, w in texts.items()))
    env = {**os.environ, "PATH": f"{SCTK}:{os.environ['PATH']}"}
    for name in "ab":
        subprocess.run(
            [
                "sclite",
                "-r",
                "ref.trn",
                "trn",
                "-h",
                f"{name}.trn",
                "trn",
                "-i",
                "spu_id",
                "-o",
                "sgml",
                "-n",
                name,
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            check=True,
        )
    out = subprocess.run(
        "cat a.sgml b.sgml | sc_stats -p -t mapsswe -v -n -",
        shell=True,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    m = re.search(
        r"\(# segs: (\d+)\).*\(mean: (\S+)\) \(std dev: (\S+)\) \(Z Stat: (\S+)\) \(Stat Diff: (\w+)\)", out
    )
    assert m, out[-2000:]
    test = matched_pairs(score_texts(ref, a).per_utt, score_texts(ref, b).per_utt)
    assert test.segments == int(m.group(1))
    assert test.mean == pytest.approx(float(m.group(2)), abs=6e-4)
    assert test.std == pytest.approx(float(m.group(3)), abs=6e-4)
    assert test.z == pytest.approx(float(m.group(4)), abs=6e-4)
    assert test.significant == (m.group(5) == "Yes")


def test_bootstrap_interval_covers_the_true_difference_at_its_rate() -> None:
    """Utterances of 5-15 words; system A errs on a word with probability 0.10, B with 0.13,
    independently: the population's WER difference is -3 points. Over 300 simulated test
    sets of 100 utterances, the 95% interval holds -3 in about 95% of them (binomial
    spread over 300 sets: ±2.5 points at two sigma)."""
    rng = np.random.default_rng(7)
    covered = 0
    sets = 300
    for s in range(sets):
        words = rng.integers(5, 16, 100)
        ea, eb = rng.binomial(words, 0.10), rng.binomial(words, 0.13)
        interval = bootstrap_difference(ea, eb, words, replicas=300, seed=s)
        covered += interval.low <= -3.0 <= interval.high
    assert 0.91 <= covered / sets <= 0.99, covered


def test_cli_compare_texts_and_scoring_dirs(tmp_path: Path) -> None:
    ref, a, b = _pair(3)
    for name, texts in (("ref", ref), ("a", a), ("b", b)):
        (tmp_path / name).write_text("".join(f"{k} {' '.join(w)}\n" for k, w in sorted(texts.items())))
    out = run_cli("compare", str(tmp_path / "ref"), str(tmp_path / "a"), str(tmp_path / "b"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("A: %WER ") and lines[1].startswith("B: %WER ")
    assert lines[2].startswith("matched pairs: ") and lines[3].startswith("WER A - B: ")
    for name in "ab":
        assert (
            run_cli(
                "score", str(tmp_path / "ref"), str(tmp_path / name), "--out-dir", str(tmp_path / f"s{name}")
            ).returncode
            == 0
        )
    again = run_cli("compare", str(tmp_path / "sa"), str(tmp_path / "sb"))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[2:] == lines[2:]  # the same alignments, the same numbers
    (tmp_path / "sb" / "ref.trn").write_text("a b (other-utt)\n")
    bad = run_cli("compare", str(tmp_path / "sa"), str(tmp_path / "sb"))
    assert bad.returncode == 2 and "different references" in bad.stderr
    assert run_cli("compare", str(tmp_path / "sa")).returncode == 2
