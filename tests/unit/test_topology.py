"""ADPSGD topology: pairings, expected mixing matrices, spectral gaps, consensus, the CLI."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from asrkit.cli import topology as topology_cli
from asrkit.distributed import (
    closed_form_spectral_gap,
    consensus_rate,
    expected_mixing_matrix,
    fixed_pairing,
    hybrid_pairing,
    pairing,
    random_pairing,
    round_mixing_matrix,
    spectral_gap,
)
from asrkit.errors import ConfigError


def _assert_even_odd_matching(pairs: list[tuple[int, int]], n: int) -> None:
    assert len(pairs) == n // 2
    for active, passive in pairs:
        assert active != passive
        assert active % 2 == 0 and passive % 2 == 1, pairs
    assert sorted(rank for pair in pairs for rank in pair) == list(range(n))


def test_random_pairing_is_a_pure_function_of_n_round_and_seed() -> None:
    assert random_pairing(64, 7, 3) == random_pairing(64, 7, 3)
    assert pairing("random", 64, 7, 3) == random_pairing(64, 7, 3)
    assert len({tuple(random_pairing(64, r, 3)) for r in range(10)}) > 1
    assert random_pairing(64, 7, 3) != random_pairing(64, 7, 4)
    # Frozen output: learners in other processes and Python runs must draw this same matching.
    assert random_pairing(8, 0, 0) == [(0, 5), (2, 1), (4, 3), (6, 7)]
    assert random_pairing(8, 1, 0) == [(0, 7), (2, 1), (4, 5), (6, 3)]


@pytest.mark.parametrize("n", [2, 4, 6, 64])
def test_random_pairing_is_a_perfect_matching_of_even_to_odd_ranks(n: int) -> None:
    for seed in range(3):
        for round_index in range(20):
            _assert_even_odd_matching(random_pairing(n, round_index, seed), n)
    assert random_pairing(1, 0, 0) == []


def test_random_pairing_frequencies_match_the_closed_form_expectation() -> None:
    n, rounds = 6, 3000
    mean = sum(round_mixing_matrix(random_pairing(n, r, 11), n) for r in range(rounds)) / rounds
    # Each of the 3 passive partners has probability 1/3: binomial std of an entry is ~0.004.
    np.testing.assert_allclose(mean, expected_mixing_matrix("random", n), atol=0.03)


def test_fixed_ring_alternates_right_and_left() -> None:
    right = [(0, 1), (2, 3), (4, 5), (6, 7)]
    left = [(0, 7), (2, 1), (4, 3), (6, 5)]
    assert [fixed_pairing(8, r) for r in range(4)] == [right, left, right, left]
    assert pairing("fixed", 8, 5, seed=9) == left
    assert fixed_pairing(2, 0) == fixed_pairing(2, 1) == [(0, 1)]
    for r in range(2):
        _assert_even_odd_matching(fixed_pairing(8, r), 8)


def test_hybrid_pairs_group_leaders_by_the_random_pattern() -> None:
    assert hybrid_pairing(32, 3, 5, group_size=4) == [(4 * a, 4 * b) for a, b in random_pairing(8, 3, 5)]
    assert pairing("hybrid", 32, 3, 5, group_size=4) == hybrid_pairing(32, 3, 5, group_size=4)
    assert hybrid_pairing(8, 0, 0, group_size=8) == []


CASES = (
    [("fixed", n, 1) for n in (1, 2, 4, 6, 16, 64)]
    + [("random", n, 1) for n in (1, 2, 4, 6, 16, 64)]
    + [
        ("hybrid", 16, 1),
        ("hybrid", 16, 2),
        ("hybrid", 16, 4),
        ("hybrid", 16, 8),
        ("hybrid", 16, 16),
        ("hybrid", 3, 3),
    ]
)


@pytest.mark.parametrize(("pattern", "n", "group_size"), CASES)
def test_expected_mixing_matrices_are_symmetric_doubly_stochastic(
    pattern: str, n: int, group_size: int
) -> None:
    w = expected_mixing_matrix(pattern, n, group_size=group_size)
    assert w.shape == (n, n)
    np.testing.assert_allclose(w, w.T, atol=0)
    assert (w >= 0).all()
    np.testing.assert_allclose(w.sum(axis=0), 1.0, atol=1e-12)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-12)
    assert spectral_gap(w) == pytest.approx(
        closed_form_spectral_gap(pattern, n, group_size=group_size), abs=1e-12
    )


def test_hand_computed_spectral_gap_of_the_four_learner_ring() -> None:
    # Right round pairs (0,1),(2,3); left round pairs (0,3),(2,1). Averaging the two, every
    # rank keeps 1/2 and gives 1/4 to each ring neighbour: E[W] = I/2 + (S + S^T)/4, circulant
    # with eigenvalues 1/2 + cos(2 pi k / 4)/2 for k = 0..3, i.e. 1, 1/2, 0, 1/2. The second
    # largest in absolute value is 1/2, so the gap is 1 - 1/2 = 1/2.
    q = 0.25
    expected = np.array([[0.5, q, 0, q], [q, 0.5, q, 0], [0, q, 0.5, q], [q, 0, q, 0.5]])
    np.testing.assert_allclose(expected_mixing_matrix("fixed", 4), expected)
    assert spectral_gap(expected) == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize("n", [4, 16, 64, 128, 256, 1024])
def test_random_gap_is_one_half_at_every_size(n: int) -> None:
    # E[W] = I/2 + B/n, B the even-odd adjacency with eigenvalues n/2, -n/2 and 0, so E[W]
    # has eigenvalues 1, 0 and 1/2 (n - 2 times): the gap is exactly 1/2, independent of n.
    assert spectral_gap(expected_mixing_matrix("random", n)) == pytest.approx(0.5, abs=1e-9)


def test_fixed_ring_gap_shrinks_like_inverse_square_of_n() -> None:
    gaps = {n: spectral_gap(expected_mixing_matrix("fixed", n)) for n in (16, 64, 128, 256)}
    for n, gap in gaps.items():
        assert gap == pytest.approx(math.sin(math.pi / n) ** 2, rel=1e-9)
    # sin^2(pi/n) ~ pi^2/n^2: four times the learners, a sixteenth of the gap.
    assert 1 / 32 < gaps[64] / gaps[16] < 1 / 8
    assert 1 / 32 < gaps[256] / gaps[64] < 1 / 8
    assert 1 / 8 < gaps[128] / gaps[64] < 1 / 2


def test_hybrid_interpolates_between_random_and_exact_averaging() -> None:
    n = 16
    exact = expected_mixing_matrix("hybrid", n, group_size=n)
    np.testing.assert_allclose(exact, np.full((n, n), 1 / n), atol=1e-15)
    assert spectral_gap(exact) == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(
        expected_mixing_matrix("hybrid", n, group_size=1), expected_mixing_matrix("random", n), atol=0
    )
    assert spectral_gap(expected_mixing_matrix("hybrid", n, group_size=4)) == pytest.approx(0.5, abs=1e-12)
    assert consensus_rate("hybrid", n, group_size=1, seed=2) == consensus_rate("random", n, seed=2)


def test_consensus_rate_matches_the_mixing_speed() -> None:
    # Rounds are symmetric projections, so E[d_{k+1}^2] <= (1 - gap) d_k^2 = d_k^2 / 2 for random.
    random_rate = consensus_rate("random", 64, rounds=50, seed=0)
    assert 0.5 < random_rate < 0.75
    assert random_rate < consensus_rate("fixed", 64, rounds=50, seed=0) < 1.0
    assert consensus_rate("random", 2) == 0.0
    assert consensus_rate("random", 1) == 0.0
    assert consensus_rate("hybrid", 64, group_size=64) == 0.0
    # Two different matchings of four learners already average everything exactly.
    assert consensus_rate("fixed", 4) < 1e-6


@pytest.mark.parametrize(
    ("call", "needles"),
    [
        (lambda: pairing("random", 5, 0), ["even number of learners", "n=5", "n=4 or n=6"]),
        (lambda: pairing("fixed", 7, 0), ["'fixed'", "n=7"]),
        (lambda: random_pairing(0, 0, 0), ["integer >= 1", "got 0"]),
        (lambda: pairing("ring", 4, 0), ["unknown pattern 'ring'", "fixed, random, hybrid"]),
        (lambda: expected_mixing_matrix("ring", 4), ["unknown pattern 'ring'"]),
        (
            lambda: expected_mixing_matrix("hybrid", 12, group_size=5),
            ["group_size=5 does not divide n=12", "[1, 2, 3, 4, 6, 12]"],
        ),
        (
            lambda: expected_mixing_matrix("hybrid", 12, group_size=4),
            ["3 groups", "1 or an even number of groups"],
        ),
        (lambda: expected_mixing_matrix("fixed", 8, group_size=2), ["only applies to pattern 'hybrid'"]),
        (lambda: random_pairing(8, 0, -1), ["seed", "got -1"]),
        (lambda: consensus_rate("random", 8, rounds=0), ["rounds", "got 0"]),
    ],
)
def test_bad_settings_raise_config_error_naming_value_and_fix(call, needles: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        call()
    for needle in needles:
        assert needle in str(info.value), str(info.value)


def test_spectral_gap_rejects_non_symmetric_input() -> None:
    with pytest.raises(ValueError, match="symmetric"):
        spectral_gap(np.array([[0.5, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="square"):
        spectral_gap(np.ones((2, 3)))


def _run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="asrkit")
    topology_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["topology", *argv])
    return args.func(args)


def test_cli_prints_one_row_per_learner_count(capsys) -> None:
    assert _run_cli("--learners", "4,16", "--learners", "64", "--pattern", "fixed") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["learners", "pattern", "group", "spectral_gap", "contraction/round"]
    rows = [line.split() for line in lines[1:]]
    assert [row[:3] for row in rows] == [["4", "fixed", "1"], ["16", "fixed", "1"], ["64", "fixed", "1"]]
    assert float(rows[2][3]) == pytest.approx(math.sin(math.pi / 64) ** 2, rel=1e-5)


def test_cli_hybrid_row(capsys) -> None:
    assert _run_cli("--learners", "16", "--pattern", "hybrid", "--group-size", "16") == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:3] == ["16", "hybrid", "16"]
    assert float(row[3]) == pytest.approx(1.0) and float(row[4]) == 0.0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--learners", "4,x"], "'x' is not an integer"),
        (["--learners", "4,5"], "n=5"),
        (["--learners", "8", "--pattern", "hybrid"], "needs --group-size"),
        (["--learners", "8", "--group-size", "2"], "only applies to --pattern hybrid"),
        (["--learners", "12", "--pattern", "hybrid", "--group-size", "4"], "3 groups"),
        (["--learners", "8", "--rounds", "0"], "rounds"),
    ],
)
def test_cli_bad_values_raise_config_error_before_printing(argv: list[str], needle: str, capsys) -> None:
    with pytest.raises(ConfigError, match=needle):
        _run_cli(*argv)
    assert capsys.readouterr().out == ""
