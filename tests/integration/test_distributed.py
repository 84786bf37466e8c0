"""Multi-process strategy tests: 2-4 gloo learners under torchrun, one thread each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asrkit.distributed.config import StrategyConfig
from asrkit.targets import TokenizerConfig, train_tokenizer
from tests.distributed_learner import make_trainer
from tests.helpers import REPO, free_port

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(240)]


def _run_learners(out: Path, learners: int, strategy: str, *settings: str) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "tok" / "sp.model").exists():
        train_tokenizer({"a-1": "A B C D E"}, out / "tok", TokenizerConfig(kind="char"))
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={learners}",
        f"--master-port={free_port()}",
        "--max-restarts=0",
        "-m",
        "tests.distributed_learner",
        str(out),
        strategy,
        *settings,
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=200, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(learners)]


@pytest.mark.parametrize("learners", [2, 4])
def test_sync_replicas_identical_and_equal_to_one_process(tmp_path: Path, learners: int) -> None:
    states = _run_learners(tmp_path, learners, "sync")
    for other in states[1:]:
        for key in states[0]:
            assert torch.equal(states[0][key], other[key]), key
    torch.set_num_threads(1)
    single = make_trainer(tmp_path, StrategyConfig(), lr=0.05, epochs=2)
    single.fit()
    initial = torch.load(tmp_path / "initial.pt", weights_only=True)
    moved = 0.0
    for key, value in single.model.state_dict().items():
        assert torch.allclose(value, states[0][key], atol=1e-5, rtol=1e-4), key
        moved = max(moved, float((value - initial[key]).abs().max()))
    assert moved > 1e-3  # training really changed the weights


def _mean(states: list[dict]) -> dict:
    return {k: sum(s[k] for s in states) / len(states) for k in states[0]}


def _spread(states: list[dict]) -> float:
    mean = _mean(states)
    return max(float(torch.cat([(s[k] - mean[k]).reshape(-1) for k in mean]).norm()) for s in states)


@pytest.mark.parametrize(("learners", "pattern"), [(2, "fixed"), (4, "random"), (4, "fixed")])
def test_adpsgd_lr0_preserves_mean_and_reaches_consensus(tmp_path: Path, learners: int, pattern: str) -> None:
    states = _run_learners(
        tmp_path,
        learners,
        "adpsgd",
        "lr=0",
        "perturb=0.1",
        f"pattern={pattern}",
        "final_consensus=false",
        "epochs=3",
    )
    starts = [torch.load(tmp_path / f"start{r}.pt", weights_only=True) for r in range(learners)]
    before, after = _mean(starts), _mean(states)
    for key in before:
        scale = float(before[key].abs().max()) + 1e-12
        assert float((after[key] - before[key]).abs().max()) / scale <= 1e-6, key
    assert _spread(states) < 0.05 * _spread(starts)  # pairwise averaging alone pulled them together


def test_adpsgd_trains_and_ends_with_one_model(tmp_path: Path) -> None:
    states = _run_learners(tmp_path, 2, "adpsgd", "pattern=random", "epochs=3")
    initial = torch.load(tmp_path / "initial.pt", weights_only=True)
    for key in states[0]:
        assert torch.allclose(states[0][key], states[1][key], atol=1e-6), key  # final consensus
    assert max(float((states[0][k] - initial[k]).abs().max()) for k in initial) > 1e-3


@pytest.mark.parametrize("staleness", [0, 1])
def test_delay_by_one_lr0_preserves_mean_and_reaches_consensus(tmp_path: Path, staleness: int) -> None:
    states = _run_learners(
        tmp_path,
        4,
        "delay_by_one",
        "lr=0",
        "perturb=0.1",
        "pattern=random",
        f"staleness={staleness}",
        "final_consensus=false",
        "epochs=3",
    )
    starts = [torch.load(tmp_path / f"start{r}.pt", weights_only=True) for r in range(4)]
    before, after = _mean(starts), _mean(states)
    for key in before:
        scale = float(before[key].abs().max()) + 1e-12
        assert float((after[key] - before[key]).abs().max()) / scale <= 1e-6, key
    # Staleness 0 averages pairs exactly. Staleness 1 with its default weight 1/8 damps a
    # pair's difference critically (~k 2^-k), more slowly across changing pairs; with the
    # undamped weight 1/2 it would not shrink at all (tests/unit/test_strategy_config.py).
    assert _spread(states) < (0.05 if staleness == 0 else 0.35) * _spread(starts)


def test_hybrid_groups_stay_identical_and_leaders_mix(tmp_path: Path) -> None:
    states = _run_learners(tmp_path, 4, "hybrid", "group_size=2", "final_consensus=false", "epochs=3")
    for a, b in ((0, 1), (2, 3)):
        for key in states[a]:
            assert torch.equal(states[a][key], states[b][key]), (a, b, key)
    initial = torch.load(tmp_path / "initial.pt", weights_only=True)
    moved = max(float((states[0][k] - initial[k]).abs().max()) for k in initial)
    apart = max(float((states[0][k] - states[2][k]).abs().max()) for k in initial)
    assert moved > 1e-3 and apart < moved  # groups trained, and averaging kept them close


def test_hybrid_with_one_group_is_sync(tmp_path: Path) -> None:
    hybrid = _run_learners(tmp_path / "h", 2, "hybrid", "group_size=2", "epochs=2")
    sync = _run_learners(tmp_path / "s", 2, "sync", "epochs=2")
    for key in sync[0]:
        assert torch.allclose(hybrid[0][key], sync[0][key], atol=1e-5), key


def test_learner_metrics_summary(tmp_path: Path) -> None:
    _run_learners(tmp_path, 2, "adpsgd", "epochs=2", "metrics=1")
    import json

    summary = json.loads((tmp_path / "exp" / "learners.json").read_text())
    assert summary["strategy"] == "adpsgd" and summary["learners"] == 2
    assert summary["aggregate_samples_per_s"] > 0
    for learner in summary["learners_detail"]:
        assert learner["steps"] > 0 and learner["averagings"] > 0 and learner["comm_wait_s"] >= 0
        assert learner["data_wait_s"] >= 0 and 0 <= learner["data_wait_fraction"] < 1


def test_sharded_validation_equals_one_learner_scoring_the_whole_dev_set(tmp_path: Path) -> None:
    """SYNC replicas are identical, so the reduced sums of the two shards must give the
    whole set's figures; every learner gets the same reduced figures."""
    import json

    _run_learners(tmp_path, 2, "sync", "epochs=1", "validation=1")
    results = [json.loads((tmp_path / f"validation{r}.json").read_text()) for r in range(2)]
    for result in results:
        assert set(result["alone"]) == {"loss", "wer"}
        assert abs(result["alone"]["loss"] - results[0]["alone"]["loss"]) < 1e-5
        assert abs(result["alone"]["wer"] - results[0]["alone"]["wer"]) < 1e-9
    assert results[0]["dev_batches"] >= 3  # both learners scored a share
    for result in results:  # every learner holds the same reduced figures
        assert result["sharded"] == results[0]["sharded"]
        assert abs(result["sharded"]["loss"] - result["alone"]["loss"]) < 1e-4 * max(
            1.0, abs(result["alone"]["loss"])
        )
        assert result["sharded"]["wer"] == result["alone"]["wer"]


def test_recipe_stage_launches_learners_with_torchrun(tmp_path: Path) -> None:
    """`run --stage 4 strategy=... strategy.learners=2` starts torchrun itself."""
    from tests.helpers import tiny_recipe

    result = tiny_recipe(
        tmp_path,
        "strategy=adpsgd",
        "strategy.learners=2",
        f"strategy.master_port={free_port()}",
        "strategy.timeout_s=60",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    import json

    summary = json.loads((tmp_path / "exp" / "learners.json").read_text())
    assert summary["learners"] == 2 and summary["strategy"] == "adpsgd"
    assert (tmp_path / "exp" / "model.pt").is_file()
    assert "test: %WER" in result.stdout
