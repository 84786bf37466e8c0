"""``asrkit study``: the tiny plan on a generated corpus, stopped after a few runs and
started again (it goes on where it stopped) two runs at a time, then its report; a run
made beside another is bitwise the one made alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers import run_cli
from tests.integration.test_sim import _prepare


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_study_resumes_where_it_stopped_and_reports_every_question(tmp_path: Path) -> None:
    common = _prepare(tmp_path)
    model = "ctc=" + " ".join([*common, f"exp_dir={tmp_path / 'prep'}"])
    out = tmp_path / "study"
    first = run_cli(
        "study",
        "run",
        "--plan",
        "tiny",
        "--out",
        str(out),
        "--model",
        model,
        "--max-runs",
        "3",
        "--jobs",
        "1",
    )
    assert first.returncode == 0, first.stderr[-3000:]
    plan = json.loads((out / "plan.json").read_text())["runs"]
    assert f"0 finished before, 3 run now, {len(plan) - 3} left" in first.stdout
    done = sorted(p.parent.name for p in (out / "runs").glob("*/sim.json"))
    assert done == sorted(r["name"] for r in plan[:3])
    stamp = (out / "runs" / done[0] / "sim.json").stat().st_mtime_ns

    rest = run_cli("study", "run", "--plan", "tiny", "--out", str(out), "--model", model, "--jobs", "2")
    assert rest.returncode == 0, rest.stderr[-3000:]
    assert "2 at a time" in rest.stderr
    assert f"3 finished before, {len(plan) - 3} run now, 0 left" in rest.stdout
    assert (out / "runs" / done[0] / "sim.json").stat().st_mtime_ns == stamp  # not run again
    costs = list((out / "step_costs").glob("ctc_b*_f*.json"))
    assert len(costs) == 2  # batches 4 and 8 over 4 learners: 1 and 2 utterances each

    # The 4th run again, alone in another study dir with the same step costs: bitwise equal.
    again = tmp_path / "again"
    shutil.copytree(out / "step_costs", again / "step_costs")
    alone = run_cli(
        "study",
        "run",
        "--plan",
        "tiny",
        "--out",
        str(again),
        "--model",
        model,
        "--max-runs",
        "4",
        "--jobs",
        "1",
    )
    assert alone.returncode == 0, alone.stderr[-3000:]
    fourth = plan[3]["name"]
    ours = torch.load(again / "runs" / fourth / "model.pt", map_location="cpu", weights_only=False)
    theirs = torch.load(out / "runs" / fourth / "model.pt", map_location="cpu", weights_only=False)
    for key, value in theirs["model"].items():
        assert torch.equal(ours["model"][key], value), key

    other = run_cli("study", "run", "--plan", "tiny", "--out", str(out), "--model", model, "--epochs", "2")
    assert other.returncode == 2 and "epochs differ" in other.stderr and "another --out" in other.stderr

    report = run_cli("study", "report", "--out", str(out), "--docs", str(tmp_path / "docs"))
    assert report.returncode == 0, report.stderr[-3000:]
    text = (tmp_path / "docs" / "study_results.md").read_text()
    assert f"{len(plan)} of {len(plan)} planned runs finished" in text
    sittings = json.loads((out / "sittings.json").read_text())
    assert [s["runs_finished"] for s in sittings] == [3, len(plan) - 3]  # the refused start: none
    sims = [json.loads((out / "runs" / r["name"] / "sim.json").read_text()) for r in plan]
    assert all(0 < sim["cpu_s"] for sim in sims)
    core_hours = sum(sim["cpu_s"] for sim in sims) / 3600
    assert f"took **{core_hours:.1f} core-hours** on this machine: the {len(plan)} finished runs'" in text
    assert "Sittings recorded whole: 2, " in text
    assert "hours of wall time (pauses and other work on the machine included), 1/2 run(s) at a time" in text
    for title in ("Headline", "Equal speed", "Stragglers", "Batch size", "Fixed ring against random pairing"):
        assert f"### {title}" in text, title
    figures = sorted(p.name for p in (tmp_path / "docs" / "study").glob("*.png"))
    assert "headline.png" in figures and any(f.startswith("stragglers_") for f in figures)
    for figure in figures:
        assert f"study/{figure}" in text


def test_study_errors_name_the_fix(tmp_path: Path) -> None:
    bad = run_cli("study", "run", "--plan", "huge", "--out", str(tmp_path))
    assert bad.returncode == 2 and "ibm, ibm_full, pilot, tiny" in bad.stderr
    empty = run_cli("study", "report", "--out", str(tmp_path / "none"))
    assert empty.returncode == 2 and "asrkit study run --out" in empty.stderr
    model = run_cli("study", "run", "--model", "no-equals-sign", "--out", str(tmp_path))
    assert model.returncode == 2 and "NAME=OVERRIDES" in model.stderr
