"""The contention benchmark runs, on a fixture with features, and reports its ratios."""

from __future__ import annotations

from pathlib import Path

import pytest

from asrkit.bench.contention import bench_contention
from asrkit.errors import DataError
from tests.helpers import tiny_recipe


@pytest.mark.slow
def test_contention_benchmark_reports_alone_and_contended_rates(tmp_path: Path) -> None:
    result = tiny_recipe(tmp_path, stop_stage=2)
    assert result.returncode == 0, result.stderr[-3000:]
    out = bench_contention(tmp_path / "data" / "train", steps=1, threads=1)
    for policy in ("default", "passive"):
        figures = out[f"policy_{policy}"]
        assert figures["alone_frames_per_s"] > 0 and figures["contended_frames_per_s"] > 0
        assert figures["ratio"] == pytest.approx(
            figures["contended_frames_per_s"] / figures["alone_frames_per_s"], abs=2e-3
        )
    assert out["policy_default"]["alone_vs_default"] == 1.0


def test_contention_benchmark_needs_features(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="feats.scp: not found"):
        bench_contention(tmp_path)
