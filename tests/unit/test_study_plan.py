"""The study's plan: which runs answer which claim, their overrides and learning rates."""

from __future__ import annotations

import math

import pytest

from asrkit.config import compose, to_object
from asrkit.study.plan import STRATEGIES, StudyPlan, study_plan


def test_the_full_ibm_plan_covers_every_claim_with_unique_runs() -> None:
    plan = study_plan("ibm_full")
    runs = plan.runs()
    names = [r.name for r in runs]
    assert len(names) == len(set(names)) and len(runs) == 74
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


def test_the_ibm_plan_runs_what_each_claim_needs_in_claim_order() -> None:
    plan, full = study_plan("ibm"), study_plan("ibm_full")
    runs = plan.runs()
    assert len({r.name for r in runs}) == len(runs) == 29  # ~3 h of a 2-core VM at ~6 min a run
    # every run is one of the full grid's, with the same overrides: a study dir can go on
    # under either plan
    same = {r.name: plan.overrides(r) for r in full.runs()}
    assert all(same[r.name] == plan.overrides(r) for r in runs)
    key = [(r.model, r.learners, r.batch, r.straggler) for r in runs]
    headline = [r for r in runs if r.seed > 1 or key[runs.index(r)] == ("hybrid", 64, 192, "none")]
    assert {(r.strategy, r.seed) for r in headline} == {(s, k) for s in STRATEGIES for k in (1, 2, 3)}
    assert runs[: len(headline)] == headline  # the headline first, then IBM's first claim:
    stragglers = runs[len(headline) : len(headline) + 5]
    where = {(r.model, r.learners, r.batch, r.straggler) for r in stragglers}
    assert where == {("hybrid", 64, 192, "one_2x")}
    assert {r.strategy for r in stragglers} == set(STRATEGIES)
    large = {r.strategy for r in runs if r.learners == 64 and r.batch == 640}
    assert large == {"sync", "adpsgd_random", "delay_by_one"}  # delay-by-one's claim
    for strategy in ("sync", "adpsgd_random"):  # the batch claim: 64 and 640 at 16 learners
        assert {r.batch for r in runs if r.learners == 16 and r.strategy == strategy} == {64, 640}
    assert {(r.strategy, r.learners, r.batch) for r in runs if r.model == "ctc"} == {
        ("sync", 64, 192),
        ("adpsgd_random", 64, 192),
    }
    assert [r.model for r in runs[-2:]] == ["ctc", "ctc"]  # the other model last
    assert {q for r in runs for q in r.questions} == {"equal_speed", "spectral", "stragglers", "batch"}


def test_a_study_dir_goes_on_under_a_plan_choosing_other_runs_but_not_other_settings(tmp_path) -> None:
    import dataclasses
    import json

    from asrkit.errors import ConfigError
    from asrkit.study.runner import _check_same_settings

    def settings(plan: StudyPlan) -> dict:
        network = {"name": "infiniband", "bandwidth_gbps": 100.0, "latency_us": 2.0}
        return json.loads(json.dumps({"plan": dataclasses.asdict(plan), "network": network}))

    full = settings(study_plan("ibm_full"))
    older = json.loads(json.dumps(full))
    del older["plan"]["grid"], older["plan"]["warmup_samples"]  # a plan.json of an older asrkit
    _check_same_settings(tmp_path, older, settings(study_plan("ibm")))  # fewer runs, same settings
    for changed in ({"epochs": 3}, {"warmup_samples": 1000}, {"common": ()}):
        other = dataclasses.replace(study_plan("ibm"), **changed)
        with pytest.raises(ConfigError, match=next(iter(changed))):
            _check_same_settings(tmp_path, older, settings(other))
    # Labelled settings: a sweep may add a learning rate; a label may not change its meaning.
    sweep = study_plan("sgd_sweep")
    fewer = dataclasses.replace(sweep, optimizers=dict(list(sweep.optimizers.items())[:2]))
    _check_same_settings(tmp_path, settings(fewer), settings(sweep))
    relabelled = dict(fewer.optimizers)
    relabelled["sgd0.05"] = ("optim=sgd", "optim.lr=1")
    with pytest.raises(ConfigError, match="optimizers"):
        _check_same_settings(
            tmp_path, settings(fewer), settings(dataclasses.replace(sweep, optimizers=relabelled))
        )


def test_the_converged_plan_answers_every_claim_with_both_optimizers_and_ratios() -> None:
    from asrkit.study.plan import PAPER_COMM_RATIO, SGD_LR

    plan = study_plan("ibm_sgd")
    runs = plan.runs()
    assert len({r.name for r in runs}) == len(runs) == 65
    by = {
        q: [r for r in runs if q in r.questions]
        for q in ("recipe", "optimizer", "comm", "stragglers", "batch")
    }
    # One learner, both optimizers, every seed; the headline with SGD every seed, Adam seed 1.
    assert {(r.optim, r.seed) for r in by["recipe"]} == {(o, s) for o in ("sgd", "adam") for s in (1, 2, 3)}
    headline = [r for r in by["optimizer"] if r.learners == 64 and r.batch == 128]
    assert {(r.strategy, r.optim, r.seed) for r in headline} == {
        *((s, "sgd", seed) for s in STRATEGIES for seed in (1, 2, 3)),
        *((s, "adam", 1) for s in STRATEGIES),
    }
    # Every strategy 2x slow at both ratios and 5x at the papers'; equal speed at the papers'.
    slow = {(r.strategy, r.straggler, r.comm) for r in by["stragglers"]}
    assert slow == {
        (s, k, c)
        for s in STRATEGIES
        for k, c in (("one_2x", "today"), ("one_2x", "paper"), ("one_5x", "paper"))
    }
    assert {r.strategy for r in by["comm"] if r.straggler == "none" and r.batch == 128} == set(STRATEGIES)
    assert plan.comm_ratio(by["comm"][0]) == PAPER_COMM_RATIO and plan.comm_ratio(runs[0]) is None
    # SYNC and ADPSGD at 16 learners over a 32x span of batches.
    assert {(r.strategy, r.batch) for r in by["batch"]} == {
        (s, b) for s in ("sync", "adpsgd_random") for b in (32, 128, 512, 1024)
    }
    # ... with every seed at the two smallest batches (they decide the largest good batch).
    assert {(r.strategy, r.batch, r.seed) for r in by["batch"] if r.seed > 1} == {
        (s, b, seed) for s in ("sync", "adpsgd_random") for b in (32, 128) for seed in (2, 3)
    }
    # The papers' recipe: SGD, the rate for batch 32 scaled by the trainer, warm-up in epochs.
    overrides = plan.overrides(headline[0])
    assert {"optim=sgd", f"optim.lr={SGD_LR:g}", "optim.base_batch=32", "optim.lr_scaling=linear"} <= set(
        overrides
    )
    assert "schedule.warmup_epochs=1" in overrides and not any("warmup_steps" in o for o in overrides)
    assert plan.lr_scale(headline[0]) == 1.0
    # Every claim has a run among the first 20, so a study stopped early says something on each.
    first = {q for r in runs[:30] for q in r.questions}
    assert {"recipe", "optimizer", "comm", "stragglers", "batch", "spectral", "equal_speed"} <= first


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
