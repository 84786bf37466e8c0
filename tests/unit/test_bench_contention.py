"""The contention benchmark runs, on a fixture with features, and reports its ratios."""

from __future__ import annotations

from pathlib import Path

import pytest

from asrkit.bench.contention import bench_contention
from asrkit.errors import ConfigError, DataError
from tests.helpers import tiny_recipe


@pytest.mark.slow
def test_contention_benchmark_reports_alone_and_contended_rates(tmp_path: Path) -> None:
    result = tiny_recipe(tmp_path, stop_stage=2)
    assert result.returncode == 0, result.stderr[-3000:]
    out = bench_contention(tmp_path / "data" / "train", seconds=0.5, threads=1)
    for mode in ("fixed", "adaptive"):
        figures = out[f"mode_{mode}"]
        assert figures["alone_frames_per_s"] > 0 and figures["contended_frames_per_s"] > 0
        assert figures["ratio"] == pytest.approx(
            figures["contended_frames_per_s"] / figures["alone_frames_per_s"], abs=2e-3
        )
        assert figures["threads_alone"] == figures["threads_contended"] == 1  # started with 1
    assert out["mode_fixed"]["alone_vs_fixed"] == 1.0
    assert out["contention_ratio"] == pytest.approx(
        out["mode_adaptive"]["contended_frames_per_s"] / out["mode_fixed"]["alone_frames_per_s"], abs=2e-3
    )


def test_contention_benchmark_needs_features_and_known_modes(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="feats.scp: not found"):
        bench_contention(tmp_path)
    (tmp_path / "feats.scp").write_text("")
    with pytest.raises(ConfigError, match=r"modes \['passive'\] are unknown"):
        bench_contention(tmp_path, modes=("fixed", "passive"))
