"""Who averages with whom in decentralized (ADPSGD) training, and how fast that mixes.

ADPSGD (Lian et al., 2018, "Asynchronous Decentralized Parallel SGD") splits the ``n``
learners bipartitely: the even ranks are *active*, the odd ranks *passive*. In every
round each active learner averages its weights with exactly one passive partner,
``x_i, x_j <- (x_i + x_j) / 2``, so the round's mixing matrix ``W_k`` (shape ``(n, n)``)
is symmetric, doubly stochastic, has ``1/2`` at ``(i, i), (i, j), (j, i), (j, j)`` for
each pair and is a projection (``W_k @ W_k == W_k``). Patterns:

* ``fixed`` — a ring. Even rounds pair each even rank ``i`` with its right neighbour
  ``(i + 1) % n``, odd rounds with its left neighbour ``(i - 1) % n``.
* ``random`` — each round a uniformly random perfect matching between even and odd
  ranks, drawn from an RNG seeded by ``(seed, round)`` alone, so every learner computes
  the same pairing without exchanging a message.
* ``hybrid`` — groups of ``group_size`` consecutive ranks all-reduce inside the group
  every round; the ``n / group_size`` groups, each acting as one super learner through its
  leader (rank ``g * group_size``), follow the ``random`` pattern among themselves.

How fast the learners agree is summarised by the spectral gap ``1 - |lambda_2|`` of the
expected mixing matrix ``E[W]``: since every ``W_k`` is a symmetric projection,
``E[||W x - mean||^2] = (x - mean)^T E[W] (x - mean) <= (1 - gap) ||x - mean||^2`` for a
round drawn at random, so a larger gap means faster consensus.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np

from asrkit.errors import ConfigError, raise_all

PATTERNS = ("fixed", "random", "hybrid")

Pair = tuple[int, int]  # (active rank, passive rank)

# Round seeds are seed * 2**64 + round: distinct for every (seed, round) with round < 2**64,
# where a smaller multiplier would let round r + M of one seed replay round r of the next.
_ROUND_SPAN = 2**64

# Simulated consensus stops once the spread falls this far below its start: deviations that
# small are float rounding, and measuring them would report a contraction near 1.
_CONSENSUS_FLOOR = 1e-12


def _is_int(value: object) -> bool:
    # bool is an int subclass, but True learners or rounds is a mistake, not 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _check_pattern(pattern: str) -> None:
    if pattern not in PATTERNS:
        raise ConfigError(f"topology: unknown pattern {pattern!r}; use one of {', '.join(PATTERNS)}")


def pairing_problems(n: int, *, key: str) -> list[str]:
    """The rule every pairwise pattern keeps: active (even) ranks pair with passive (odd)
    ones, so ``n`` learners must be 1 or even. The one place this rule lives (the
    ``strategy`` settings and this module both ask it); ``key`` names the setting."""
    if n > 1 and n % 2:
        return [
            f"{key} pairs even (active) with odd (passive) ranks, so it needs an even number "
            f"of learners, got n={n}; use n={n - 1} or n={n + 1} (or n=1)"
        ]
    return []


def group_problems(n: int, group_size: int, *, key: str) -> list[str]:
    """The ``hybrid`` rule: ``group_size`` divides ``n`` into 1 or an even number of groups
    (the groups pair up as ADPSGD super learners through their leaders)."""
    if not _is_int(group_size) or group_size < 1:
        return [f"{key}: group_size must be an integer >= 1, got {group_size!r}"]
    if n % group_size:
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        return [f"{key}: group_size={group_size} does not divide n={n} learners; use one of {divisors}"]
    groups = n // group_size
    if groups > 1 and groups % 2:
        return [
            f"{key}: n={n}, group_size={group_size} makes {groups} groups, but the groups pair "
            f"up as ADPSGD super learners, so there must be 1 or an even number of groups; "
            f"choose group_size so that n / group_size is even (or group_size={n})"
        ]
    return []


def _check_learners(n: int, pattern: str) -> None:
    if not _is_int(n) or n < 1:
        raise ConfigError(f"topology: the number of learners must be an integer >= 1, got {n!r}")
    if pattern != "hybrid":
        raise_all(pairing_problems(n, key=f"topology: pattern {pattern!r}"))


def _check_groups(n: int, group_size: int) -> int:
    """Validate ``group_size`` for ``hybrid`` on ``n`` learners; return the number of groups."""
    raise_all(group_problems(n, group_size, key="topology: hybrid"))
    return n // group_size


def _check_config(pattern: str, n: int, group_size: int) -> int:
    """Validate a topology; return the number of groups (``n`` unless ``hybrid``)."""
    _check_pattern(pattern)
    _check_learners(n, pattern)
    if pattern == "hybrid":
        return _check_groups(n, group_size)
    if group_size != 1:
        raise ConfigError(
            f"topology: group_size={group_size!r} only applies to pattern 'hybrid', not {pattern!r}; "
            f"drop it or use pattern 'hybrid'"
        )
    return n


def _check_round(round_index: int, seed: int) -> None:
    if not _is_int(round_index) or not 0 <= round_index < _ROUND_SPAN:
        raise ConfigError(f"topology: round_index must be an integer in [0, 2**64), got {round_index!r}")
    if not _is_int(seed) or seed < 0:
        raise ConfigError(f"topology: seed must be an integer >= 0, got {seed!r}")


def fixed_pairing(n: int, round_index: int) -> list[Pair]:
    """The ring's pairs in one round.

    Args:
        n: number of learners, even or 1.
        round_index: round number ``>= 0``; even rounds pair right, odd rounds left.

    Returns:
        ``n // 2`` pairs ``(i, (i + 1) % n)`` (even round) or ``(i, (i - 1) % n)`` (odd round)
        for each even rank ``i``, in increasing ``i``; ``[]`` when ``n == 1``.
    """
    _check_learners(n, "fixed")
    _check_round(round_index, 0)
    step = 1 if round_index % 2 == 0 else -1
    return [(i, (i + step) % n) for i in range(0, n - 1, 2)]


def random_pairing(n: int, round_index: int, seed: int) -> list[Pair]:
    """A uniformly random perfect matching of even (active) to odd (passive) ranks.

    A pure function of its arguments: every learner calling it with the same
    ``(n, round_index, seed)`` gets the same pairs, in every process and Python run
    (``random.Random`` seeded with an integer, never ``hash()``).

    Args:
        n: number of learners, even or 1.
        round_index: round number, ``0 <= round_index < 2**64``.
        seed: shared seed ``>= 0``.

    Returns:
        ``n // 2`` pairs ``(active, passive)``, ordered by the active rank; ``[]`` when ``n == 1``.
    """
    _check_learners(n, "random")
    _check_round(round_index, seed)
    passive = list(range(1, n, 2))
    random.Random(seed * _ROUND_SPAN + round_index).shuffle(passive)
    return list(zip(range(0, n - 1, 2), passive, strict=True))


def hybrid_pairing(n: int, round_index: int, seed: int, *, group_size: int) -> list[Pair]:
    """The pairs of group leaders that exchange group averages in one ``hybrid`` round.

    Args:
        n: number of learners, a multiple of ``group_size``.
        round_index: round number, ``0 <= round_index < 2**64``.
        seed: shared seed ``>= 0``.
        group_size: ranks per group; ``n / group_size`` must be even or 1.

    Returns:
        Pairs of leader ranks ``(a * group_size, b * group_size)`` where ``(a, b)`` is
        ``random_pairing(n // group_size, round_index, seed)``; ``[]`` for a single group.
    """
    groups = _check_config("hybrid", n, group_size)
    return [(a * group_size, b * group_size) for a, b in random_pairing(groups, round_index, seed)]


def pairing(pattern: str, n: int, round_index: int, seed: int = 0, *, group_size: int = 1) -> list[Pair]:
    """The pairs that average in round ``round_index`` under ``pattern``.

    Args:
        pattern: ``"fixed"``, ``"random"`` or ``"hybrid"``.
        n: number of learners.
        round_index: round number ``>= 0``.
        seed: shared seed ``>= 0`` (``fixed`` ignores it).
        group_size: ``hybrid`` only: ranks per all-reduce group.

    Returns:
        Pairs ``(active, passive)`` of ranks; for ``hybrid``, of group leaders (see
        :func:`hybrid_pairing`).

    Raises:
        ConfigError: unknown pattern, ``n < 1``, odd ``n > 1`` for ``fixed``/``random``, or a
            ``group_size`` that does not fit ``n``.
    """
    _check_config(pattern, n, group_size)
    if pattern == "hybrid":
        return hybrid_pairing(n, round_index, seed, group_size=group_size)
    _check_round(round_index, seed)
    return _PAIRINGS[pattern](n, round_index, seed)


def partner_of(pattern: str, n: int, round_index: int, seed: int, index: int) -> int:
    """The index that ``index`` averages with in round ``round_index`` (``fixed``/``random``).

    Raises:
        ConfigError: as :func:`pairing`; AssertionError if ``index`` is unpaired (a bug).
    """
    for a, b in pairing(pattern, n, round_index, seed):
        if index in (a, b):
            return b if index == a else a
    raise AssertionError(f"learner {index} unpaired in round {round_index} of {n}")


_PAIRINGS: dict[str, Callable[[int, int, int], list[Pair]]] = {
    "fixed": lambda n, round_index, seed: fixed_pairing(n, round_index),
    "random": random_pairing,
}


def round_mixing_matrix(pairs: list[Pair], n: int) -> np.ndarray:
    """The mixing matrix of one round of pairwise averaging.

    Args:
        pairs: disjoint pairs of ranks in ``[0, n)``; unpaired ranks keep their weights.
        n: number of learners.

    Returns:
        ``W`` of shape ``(n, n)``: ``x_next = W @ x``.
    """
    w = np.eye(n)
    for i, j in pairs:
        w[i, i] = w[j, j] = w[i, j] = w[j, i] = 0.5
    return w


def _expected_fixed(n: int, group_size: int) -> np.ndarray:
    # The ring alternates deterministically, so each of its two round matrices is half the rounds.
    return (round_mixing_matrix(fixed_pairing(n, 0), n) + round_mixing_matrix(fixed_pairing(n, 1), n)) / 2


def _expected_random(n: int, group_size: int) -> np.ndarray:
    if n == 1:
        return np.ones((1, 1))
    # Each active rank meets each of the n/2 passive ranks with probability 2/n and then gives
    # it weight 1/2, so every even-odd entry is 1/n; each rank keeps 1/2 of its own weights.
    parity = np.arange(n) % 2
    return np.eye(n) / 2 + (parity[:, None] != parity[None, :]) / n


def _expected_hybrid(n: int, group_size: int) -> np.ndarray:
    groups = n // group_size
    block = np.full((group_size, group_size), 1.0 / group_size)
    return np.kron(_expected_random(groups, 1), block)


_EXPECTED: dict[str, Callable[[int, int], np.ndarray]] = {
    "fixed": _expected_fixed,
    "random": _expected_random,
    "hybrid": _expected_hybrid,
}


def expected_mixing_matrix(pattern: str, n: int, *, group_size: int = 1) -> np.ndarray:
    """The mixing matrix averaged over rounds, ``E[W]``.

    * ``fixed``: ``(W_right + W_left) / 2``, the mean of the ring's two alternating rounds;
      for ``n >= 4`` that is ``I/2 + (S + S^T)/4`` with ``S`` the cyclic shift.
    * ``random``: closed form ``I/2 + B/n`` where ``B[i, j] = 1`` when ``i`` and ``j`` have
      different parity (``O(n^2)``, no matchings enumerated).
    * ``hybrid``: ``E[W] = A (P ⊗ I_G) A = P ⊗ (J_G / G)`` with ``G = group_size``,
      ``A = I_{n/G} ⊗ (J_G / G)`` the in-group all-reduce, ``P`` the ``random`` pattern's
      ``E[W]`` for ``n/G`` super learners and ``J_G`` the all-ones ``G × G`` matrix: groups
      all-reduce, leaders average the group means pairwise, and the result is broadcast to the
      group. ``group_size = n`` gives exact averaging ``J_n / n``; ``group_size = 1`` gives
      ``random``.

    Args:
        pattern: ``"fixed"``, ``"random"`` or ``"hybrid"``.
        n: number of learners.
        group_size: ``hybrid`` only: ranks per all-reduce group.

    Returns:
        Symmetric doubly stochastic matrix of shape ``(n, n)``.

    Raises:
        ConfigError: as for :func:`pairing`.
    """
    _check_config(pattern, n, group_size)
    return _EXPECTED[pattern](n, group_size)


def spectral_gap(matrix: np.ndarray) -> float:
    """``1 - |lambda_2|``, ``lambda_2`` the second largest eigenvalue in absolute value.

    Dense ``numpy.linalg.eigvalsh``: about a second for ``n = 1024``, ``O(n^3)``. For large
    ``n`` use :func:`closed_form_spectral_gap`.

    Args:
        matrix: symmetric matrix of shape ``(n, n)``, typically doubly stochastic.

    Returns:
        The gap; ``1.0`` for a ``1 × 1`` matrix (a single learner is always in consensus).

    Raises:
        ValueError: ``matrix`` is not square or not symmetric.
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
        raise ValueError(f"spectral_gap needs a non-empty square matrix, got shape {m.shape}")
    # eigvalsh reads one triangle only, so an asymmetric input would give a silently wrong answer.
    if not np.allclose(m, m.T, rtol=0.0, atol=1e-12):
        raise ValueError("spectral_gap needs a symmetric matrix; symmetrize it with (M + M.T) / 2 first")
    if m.shape[0] == 1:
        return 1.0
    magnitudes = np.sort(np.abs(np.linalg.eigvalsh(m)))
    return float(1.0 - magnitudes[-2])


def closed_form_spectral_gap(pattern: str, n: int, *, group_size: int = 1) -> float:
    """The spectral gap of :func:`expected_mixing_matrix`, without an eigendecomposition.

    * ``fixed``: ``sin^2(pi / n)`` — ``E[W]`` is circulant with eigenvalues
      ``1/2 + cos(2 pi k / n) / 2``, all ``>= 0``, the largest below 1 at ``k = 1``
      (``n = 2`` gives 1: both rounds average the only pair).
    * ``random``: ``1/2`` for ``n >= 4`` — ``B`` has eigenvalues ``n/2``, ``-n/2`` and 0, so
      ``E[W]`` has 1, 0 and ``1/2`` (``n - 2`` times); 1 for ``n <= 2``.
    * ``hybrid``: the ``random`` gap of ``n / group_size`` learners — ``P ⊗ (J_G/G)`` has
      the eigenvalues of ``P`` plus zeros.

    Args:
        pattern: ``"fixed"``, ``"random"`` or ``"hybrid"``.
        n: number of learners.
        group_size: ``hybrid`` only: ranks per all-reduce group.

    Returns:
        The gap, in ``(0, 1]``.
    """
    groups = _check_config(pattern, n, group_size)
    if pattern == "fixed":
        return 1.0 if n == 1 else math.sin(math.pi / n) ** 2
    return 1.0 if groups <= 2 else 0.5


def _average_pairs(x: np.ndarray, pairs: list[Pair]) -> None:
    if not pairs:
        return
    a, b = np.array(pairs).T
    mean = (x[a] + x[b]) / 2
    x[a] = mean
    x[b] = mean


def consensus_rate(pattern: str, n: int, *, rounds: int = 50, seed: int = 0, group_size: int = 1) -> float:
    """Empirical per-round contraction of the distance to the mean.

    Simulates ``rounds`` real rounds of ``pattern`` on a seeded standard-normal vector of
    ``n`` weights (one scalar per learner) and returns ``(d_R / d_0) ** (1 / R)``, the
    geometric mean of ``d_{k+1} / d_k`` with ``d_k = ||x_k - mean(x_k)||``. Each round is
    ``O(n)`` pairwise averaging. The simulation stops early once ``d_k < 1e-12 d_0``
    (consensus within float precision), so patterns that reach consensus at once report ~0.
    Disagreement between far-apart learners dies slowest, so a short run overstates the speed
    of slowly mixing patterns such as a long ``fixed`` ring.

    Args:
        pattern: ``"fixed"``, ``"random"`` or ``"hybrid"``.
        n: number of learners.
        rounds: rounds to simulate, ``>= 1``.
        seed: seeds both the start vector and the ``random``/``hybrid`` pairings, ``>= 0``.
        group_size: ``hybrid`` only: ranks per all-reduce group.

    Returns:
        The contraction factor in ``[0, 1]``; ``0.0`` for ``n == 1``.
    """
    groups = _check_config(pattern, n, group_size)
    _check_round(0, seed)
    if not _is_int(rounds) or rounds < 1:
        raise ConfigError(f"topology: rounds must be an integer >= 1, got {rounds!r}")
    x = np.random.default_rng(seed).standard_normal(n)
    x -= x.mean()
    start = float(np.linalg.norm(x))
    if n == 1 or start == 0.0:
        return 0.0
    dist, done = start, 0
    while done < rounds and dist >= _CONSENSUS_FLOOR * start:
        if pattern == "hybrid":
            means = x.reshape(groups, group_size).mean(axis=1)
            _average_pairs(means, random_pairing(groups, done, seed))
            x = np.repeat(means, group_size)
        else:
            _average_pairs(x, _PAIRINGS[pattern](n, done, seed))
        dist = float(np.linalg.norm(x - x.mean()))
        done += 1
    return (dist / start) ** (1.0 / done)
