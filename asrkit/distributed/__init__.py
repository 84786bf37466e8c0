"""Distributed training: the strategies (SYNC, ADPSGD, delay-by-one, HYBRID: see
:mod:`asrkit.distributed.strategies`), the torchrun launcher, and the communication
topology analysis re-exported here.

Public API (:mod:`asrkit.distributed.topology`, ADPSGD pairing of even/active with
odd/passive ranks, Lian et al. 2018):
    - :data:`PATTERNS` — ``"fixed"`` (ring), ``"random"`` (seeded random matching) and
      ``"hybrid"`` (in-group all-reduce, random matching among groups).
    - :func:`pairing`, :func:`fixed_pairing`, :func:`random_pairing`,
      :func:`hybrid_pairing` — who averages with whom in a given round.
    - :func:`round_mixing_matrix`, :func:`expected_mixing_matrix` — one round's ``W`` and
      ``E[W]``, shape ``(n, n)``.
    - :func:`spectral_gap`, :func:`closed_form_spectral_gap` — ``1 - |lambda_2|``.
    - :func:`consensus_rate` — simulated per-round contraction towards the mean.
"""

from asrkit.distributed.topology import (
    PATTERNS,
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

__all__ = [
    "PATTERNS",
    "closed_form_spectral_gap",
    "consensus_rate",
    "expected_mixing_matrix",
    "fixed_pairing",
    "hybrid_pairing",
    "pairing",
    "random_pairing",
    "round_mixing_matrix",
    "spectral_gap",
]
