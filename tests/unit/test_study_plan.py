"""The study's plan: which runs answer which claim, their overrides and learning rates."""

from __future__ import annotations

import math

import pytest

from asrkit.config import compose, to_object
from asrkit.study.plan import STRATEGIES, StudyPlan, study_plan


def test_the_ibm_plan_covers_every_claim_with_unique_runs() -> None:
    plan = study_plan("ibm")
    runs = plan.runs()
    names = [r.name for r in runs]
    assert len(names) == len(set(names)) and 60 <= len(runs) <= 90  # about 3 hours at ~135 s a run
    questions = {q for r in runs for q in r.questions}
    assert questions == {"equal_speed", "spectral", "stragglers", "batch"}
    headline = [
        r
        for r in runs
        if r.learners == 64 and r.batch == 192 and r.straggler == "none" and r.model == "hybrid"
    ]
    assert {(r.strategy, r.seed) for r in headline} == {(s, k) for s in STRATEGIES for k in (1, 2, 3)}
    assert runs[: len(headline)] == headline  # the headline runs first
    # then IBM's first claim at the largest learner count: the first model's straggler runs
    stragglers = runs[len(headline) : len(headline) + 10]
    assert {(r.model, r.learners) for r in stragglers} == {("hybrid", 64)}
    assert {r.straggler for r in stragglers} == {"one_2x", "exp_2x"}
    assert runs[-1].model == "ctc"  # the other model last
    batches = {r.batch for r in runs if "batch" in r.questions}
    assert max(batches) >= 10 * min(batches)  # the batch spans at least 10x
    assert {r.straggler for r in runs if "stragglers" in r.questions} == {"one_2x", "exp_2x"}
    assert all(r.batch >= r.learners for r in runs)  # every learner has at least one utterance a step


def test_hybrid_runs_need_an_even_number_of_groups() -> None:
    plan = StudyPlan(
        models={"m": ()}, learners=(4, 12, 16), batches=(16,), headline_seeds=(1,), hybrid_group=4
    )
    hybrid = {r.learners for r in plan.runs() if r.strategy == "hybrid"}
    assert hybrid == {16}  # 4 learners make 1 group, 12 make 3
    run = next(r for r in plan.runs() if r.strategy == "hybrid")
    assert "strategy.group_size=4" in plan.overrides(run)


def test_overrides_compose_and_the_learning_rate_grows_with_the_square_root_of_the_batch() -> None:
    plan = StudyPlan(
        models={"m": ("model=tiny",)},
        learners=(4,),
        batches=(8, 32),
        base_batch=8,
        headline_seeds=(1,),
        hybrid_group=2,
    )
    run = next(r for r in plan.runs() if r.strategy == "hybrid" and r.batch == 32 and r.straggler == "exp_2x")
    cfg = to_object(compose(plan.overrides(run)))
    assert (cfg.strategy.name, cfg.strategy.learners, cfg.strategy.group_size) == ("hybrid", 4, 2)
    assert (cfg.strategy.straggler.mode, cfg.strategy.straggler.factor) == ("exponential", 2.0)
    assert (cfg.train.max_batch, cfg.seed, cfg.train.epochs) == (32, 1, plan.epochs)
    assert cfg.schedule.warmup_steps == round(plan.warmup_samples / 32)  # the same samples at any batch
    assert plan.lr_scale(run) == pytest.approx(math.sqrt(32 / 8))


def test_git_keeps_the_study_records_and_not_the_models() -> None:
    """A fresh clone must resume the study and regenerate its report from what git keeps
    of ``recipes/speechocean762/study`` (its .gitignore): every record the report and the
    runner read, none of the models, tokenizers or logs."""
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    study = "recipes/speechocean762/study"
    kept = [
        "plan.json",
        "sittings.json",
        "step_costs/hybrid_b3_f100000000.json",
        *(f"runs/r/{f}" for f in ("run.json", "sim.json", "train_summary.json", "learners.json")),
    ]
    dropped = ["runs/r/model.pt", "runs/r/tokenizer/tokens.txt", "runs/r/tensorboard/events.out"]

    def ignored(path: str) -> bool:
        done = subprocess.run(["git", "check-ignore", "-q", f"{study}/{path}"], cwd=root, check=False)
        assert done.returncode in (0, 1), done
        return done.returncode == 0

    assert [p for p in kept if ignored(p)] == []
    assert [p for p in dropped if not ignored(p)] == []
