"""``asrkit bench hybrid`` through the command line, and its training figures.

The in-process tests of the same code are in :mod:`tests.unit.test_bench_hmm`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import SHARED_AN4, run_cli
from tests.unit.test_bench_hmm import DICTIONARY, TINY, _positive, runs  # noqa: F401, F811 (runs: a fixture)

pytestmark = pytest.mark.skipif(
    not (SHARED_AN4 / "wav").is_dir() or not DICTIONARY.is_file(), reason="needs the AN4 corpus in ../shared"
)


def test_training_figures_are_positive_and_add_up(runs: dict) -> None:  # noqa: F811
    result = runs["full"]
    data = result["training_data"]
    assert data["utterances"] == 12 and data["aligned"] == 12
    assert data["audio_s"] == pytest.approx(data["frames"] * 0.01, abs=0.1)
    assert data["tree_leaves"] > 1 and data["triphone_pdfs"] == data["tree_leaves"]
    stages = result["training_s"]
    assert list(stages) == ["lang", "features", "mono", "tree", "triphone", "align", "total"]
    assert all(_positive(v) for v in stages.values())
    assert sum(v for k, v in stages.items() if k != "total") <= stages["total"] + 0.005  # rounding
    per_iter = result["per_iteration"]
    assert per_iter["mono_s"] == pytest.approx(stages["mono"] / TINY.mono_iters, rel=0.01, abs=0.002)
    assert per_iter["mono_frames_per_s"] == pytest.approx(data["frames"] / per_iter["mono_s"], rel=0.05)
    assert _positive(per_iter["triphone_s"]) and _positive(per_iter["triphone_frames_per_s"])
    assert result["align_rtf"] == pytest.approx(stages["align"] / data["audio_s"], rel=0.05, abs=1e-4)
    assert result["tree_over_mono_iter"] == pytest.approx(stages["tree"] / per_iter["mono_s"], rel=0.05)
    assert _positive(result["features_rtf"])
    assert result["threads"] == 1 and result["gmm"]["mono_iters"] == TINY.mono_iters


def test_cli_names_the_missing_data_dir_in_one_line(tmp_path: Path) -> None:
    result = run_cli("bench", "hybrid", "--out-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "recipes/an4/data/train/wav.scp: not found" in result.stderr
    assert "run.sh --stop-stage 1" in result.stderr
    assert not (tmp_path / "out").exists()
