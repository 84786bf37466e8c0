"""Scoring a 10,000-word line in a subprocess whose memory is measured.

The in-process tests of the same code are in :mod:`tests.unit.test_scoring`.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from asrkit.scoring import align as align_module

_LONG_LINE = """
import random, resource, sys
from asrkit.scoring import align_words, score_texts
rng = random.Random(3)
ref = [f"w{rng.randrange(500)}" for _ in range(10_000)]
hyp = [w if rng.random() > 0.1 else "x" for w in ref]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = score_texts({"spk-utt": ref}, {"spk-utt": hyp})
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(grown // 1024, result.words.errors)
"""


@pytest.mark.skipif(align_module._compiled is None, reason="the compiled alignment was not built")
def test_a_10000_word_line_scores_in_little_memory() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _LONG_LINE], capture_output=True, text=True, check=True, timeout=300
    )
    grown_mb, errors = (int(x) for x in result.stdout.split())
    assert 900 <= errors <= 1100
    assert grown_mb < 100, f"scoring a 10,000-word line grew the process by {grown_mb} MB"
