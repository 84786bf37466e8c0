"""A study's records read with checks (seen in the field: a truncated record gave a
25-line traceback naming no file and the run still counted as finished; with plan.json
deleted, 1-epoch runs were mixed into a 2-epoch study without a word; a refused run
appended a sitting)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asrkit.errors import ConfigError, DataError
from asrkit.sim.network import NETWORKS
from asrkit.study.plan import StudyPlan
from asrkit.study.records import read_record, run_state
from asrkit.study.report import write_report
from asrkit.study.runner import _expected, run_study

CONF = Path(__file__).resolve().parents[2] / "conf"


def _plan(epochs: int = 2) -> StudyPlan:
    return StudyPlan(
        models={"m": ("model=tiny",)},
        learners=(4,),
        batches=(8,),
        base_batch=8,
        headline_seeds=(1,),
        hybrid_group=2,
        epochs=epochs,
    )


def _finish(out: Path, plan: StudyPlan) -> list[str]:
    """Records of every run of ``plan`` as a finished simulation leaves them."""
    names = []
    for run in plan.runs():
        where = out / "runs" / run.name
        where.mkdir(parents=True)
        history = [{"epoch": 1, "loss": 2.0, "seconds": 1.0, "wer": 50.0}]
        (where / "train_summary.json").write_text(json.dumps({"history": history}))
        (where / "sim.json").write_text(json.dumps({"virtual_s": 1.0, "learners": 4}))
        (where / "run.json").write_text(json.dumps(_expected(plan, run, CONF, out)))
        names.append(run.name)
    return names


def test_a_damaged_record_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "sim.json"
    path.write_text('{"virtual_s": 1.0, "lear')
    with pytest.raises(DataError) as err:
        read_record(path)
    assert str(path) in str(err.value) and "damaged" in str(err.value) and "\n" not in str(err.value)


def test_finished_runs_are_whole_and_the_plans_own(tmp_path: Path) -> None:
    plan = _plan()
    names = _finish(tmp_path, plan)
    run = plan.runs()[0]
    where = tmp_path / "runs" / names[0]
    expected = _expected(plan, run, CONF, tmp_path)
    assert run_state(where, expected) == ("finished", "")
    summary = (where / "train_summary.json").read_text()
    (where / "train_summary.json").write_text(summary[: len(summary) // 2])
    state, why = run_state(where, expected)
    assert state == "unfinished" and str(where / "train_summary.json") in why
    (where / "train_summary.json").write_text(summary)
    other = _expected(_plan(epochs=1), run, CONF, tmp_path)
    state, why = run_state(where, other)
    assert state == "other" and "train.epochs=2" in why and "train.epochs=1" in why


def test_a_study_without_its_plan_json_refuses_runs_of_other_settings_and_writes_nothing(
    tmp_path: Path,
) -> None:
    _finish(tmp_path, _plan(epochs=1))
    with pytest.raises(ConfigError) as err:
        run_study(_plan(epochs=2), tmp_path, network=NETWORKS["infiniband"], config_dir=CONF)
    assert "run.json" in str(err.value) and "other settings" in str(err.value)
    assert not (tmp_path / "plan.json").exists() and not (tmp_path / "sittings.json").exists()


def test_a_finished_study_runs_nothing_and_its_report_names_what_is_missing(tmp_path: Path) -> None:
    plan = _plan()
    names = _finish(tmp_path, plan)
    counts = run_study(plan, tmp_path, network=NETWORKS["infiniband"], config_dir=CONF)
    assert counts == {"finished_before": len(names), "run_now": 0, "left": 0}
    before = (tmp_path / "plan.json").read_text()
    run_study(plan, tmp_path, network=NETWORKS["infiniband"], config_dir=CONF)
    assert (tmp_path / "plan.json").read_text() == before and not (tmp_path / "sittings.json").exists()
    (tmp_path / "runs" / names[0] / "sim.json").write_text("{")
    report = write_report(tmp_path, tmp_path / "docs").read_text()
    assert f"{len(names) - 1} of {len(names)} planned runs finished" in report
    assert f"Not finished: {names[0]}." in report
    (tmp_path / "plan.json").write_text("[1, 2")
    with pytest.raises(DataError) as err:
        run_study(plan, tmp_path, network=NETWORKS["infiniband"], config_dir=CONF)
    assert str(tmp_path / "plan.json") in str(err.value)


def test_another_plan_in_the_dir_adds_its_runs_and_drops_none_of_the_studys(tmp_path: Path) -> None:
    """Seen in the field: `study run --plan pilot` in the study's dir replaced plan.json."""
    import dataclasses

    study = dataclasses.replace(_plan(), headline_seeds=(1, 2))
    names = _finish(tmp_path, study)
    run_study(study, tmp_path, network=NETWORKS["infiniband"], config_dir=CONF)
    before = read_record(tmp_path / "plan.json")
    fewer = dataclasses.replace(study, headline_seeds=(1,))  # a subset: every run finished
    counts = run_study(fewer, tmp_path, network=NETWORKS["infiniband"], config_dir=CONF)
    assert counts["run_now"] == 0 and counts["finished_before"] < len(names)
    after = read_record(tmp_path / "plan.json")
    assert after == before and sorted(r["name"] for r in after["runs"]) == sorted(names)


def test_a_diverged_run_is_finished_reported_and_needs_no_decode(tmp_path: Path) -> None:
    """A run whose loss became NaN is an answer (this rate fails at this batch): it counts as
    finished with run.json and diverged.json, the report names it, and it is not decoded."""
    import dataclasses

    plan = dataclasses.replace(_plan(), decode=True)
    run = plan.runs()[0]
    where = tmp_path / "runs" / run.name
    where.mkdir(parents=True)
    expected = _expected(plan, run, CONF, tmp_path)
    assert expected["decoded"] is True
    (where / "run.json").write_text(json.dumps({**expected, "diverged": True}))
    assert run_state(where, expected)[0] == "unfinished"  # diverged.json missing
    (where / "diverged.json").write_text(json.dumps({"step": 7, "message": "loss nan"}))
    assert run_state(where, expected) == ("finished", "")
    # A decoded plan's ordinary run needs its decode.json.
    other = plan.runs()[1]
    there = tmp_path / "runs" / other.name
    there.mkdir(parents=True)
    (there / "train_summary.json").write_text(
        json.dumps({"history": [{"epoch": 1, "loss": 2.0, "seconds": 1.0}]})
    )
    (there / "sim.json").write_text("{}")
    (there / "run.json").write_text(json.dumps(_expected(plan, other, CONF, tmp_path)))
    state, why = run_state(there, _expected(plan, other, CONF, tmp_path))
    assert state == "unfinished" and "decode.json: missing" in why
    (there / "decode.json").write_text(json.dumps({"tuned_on": "dev", "sets": {"dev": {"wer": 9.5}}}))
    assert run_state(there, _expected(plan, other, CONF, tmp_path))[0] == "finished"
    from asrkit.study.report import load_diverged, load_runs

    assert [r["name"] for r in load_diverged(tmp_path)] == [run.name]
    assert load_diverged(tmp_path)[0]["diverged_step"] == 7
    assert [r["dev_wer"] for r in load_runs(tmp_path)] == [9.5]


def test_a_second_study_run_in_the_same_dir_is_refused(tmp_path: Path) -> None:
    """Seen in the field: a second `study run` on a dir started the run the first one had
    in flight again, into the same run dir."""
    from asrkit.stages.lock import experiment_lock
    from asrkit.study.runner import STUDY_LOCK

    with experiment_lock(tmp_path, name=STUDY_LOCK):
        with pytest.raises(ConfigError, match=str(tmp_path)):
            run_study(_plan(), tmp_path, network=NETWORKS["infiniband"], config_dir=CONF)
    assert not (tmp_path / "plan.json").exists()


def test_a_run_made_on_other_inputs_is_done_again(tmp_path: Path) -> None:
    """Seen in the study: the experiment's GMM stage ran again (newer code, new alignments)
    and runs trained on the old alignments still counted as finished; and a record from
    before runs recorded their inputs."""
    import gzip

    from asrkit.study.records import inputs_fingerprint

    ali = tmp_path / "ali.1.gz"
    ali.write_bytes(gzip.compress(b"utt1 1 2 3\n", mtime=1))
    first = inputs_fingerprint([ali, tmp_path / "tree"])
    ali.write_bytes(gzip.compress(b"utt1 1 2 3\n", mtime=2))  # the same alignments, written again
    assert inputs_fingerprint([ali, tmp_path / "tree"]) == first
    ali.write_bytes(gzip.compress(b"utt1 1 2 4\n", mtime=2))
    assert inputs_fingerprint([ali, tmp_path / "tree"]) != first
    (tmp_path / "tree").write_bytes(b"x")  # a file that was missing now exists
    assert len({first, inputs_fingerprint([ali]), inputs_fingerprint([ali, tmp_path / "tree"])}) == 3

    plan = _plan()
    names = _finish(tmp_path / "study", plan)
    where = tmp_path / "study" / "runs" / names[0]
    expected = _expected(plan, plan.runs()[0], CONF, tmp_path)
    assert expected["inputs"] and run_state(where, expected) == ("finished", "")
    state, why = run_state(where, {**expected, "inputs": "0123456789abcdef"})
    assert state == "unfinished" and "made on other inputs" in why and "0123456789abcdef here" in why
    record = json.loads((where / "run.json").read_text())
    del record["inputs"]
    (where / "run.json").write_text(json.dumps(record))
    state, why = run_state(where, expected)
    assert state == "unfinished" and "not recorded there" in why


def test_a_run_decoded_at_another_grid_is_decoded_again_not_trained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in the study: most runs' best LM weight and penalty sat on the grid's corner,
    so the plan's grid grew; its finished runs must be decoded again, their training kept."""
    import dataclasses

    from asrkit.study import runner

    grid = {"lm_weights": [1.0, 2.0], "word_penalties": [-1.0, 0.0], "beam": 11.0, "lattice_beam": 6.0}
    plan = dataclasses.replace(
        _plan(), decode=True, lm_weights=(1.0, 2.0), word_penalties=(-1.0, 0.0), beam=11.0, lattice_beam=6.0
    )
    names = _finish(tmp_path, plan)
    first, second = (tmp_path / "runs" / n for n in names[:2])
    expected = _expected(plan, plan.runs()[0], CONF, tmp_path)
    assert expected["decode_grid"] == grid
    old = {"tuned_on": "dev", "setting": "lm_weight=4 word_penalty=0", "sets": {"dev": {"wer": 20.0}}}
    for where in (tmp_path / "runs" / n for n in names):
        (where / "decode.json").write_text(json.dumps(old))  # no grid: the defaults then
        (where / "model.pt").write_bytes(b"weights")
    state, why = run_state(first, expected)
    assert state == "redecode" and "another LM weight x word penalty grid" in why
    (first / "decode.json").write_text(json.dumps({**old, "grid": grid}))
    assert run_state(first, expected) == ("finished", "")
    # The same weights searched with other beams (a grid recorded before beams were: 13 / 8)
    for beams in ({"beam": 13.0, "lattice_beam": 8.0}, {}):
        at = {k: v for k, v in grid.items() if k not in ("beam", "lattice_beam")} | beams
        (first / "decode.json").write_text(json.dumps({**old, "grid": at}))
        assert run_state(first, expected)[0] == "redecode"
        assert (
            run_state(first, {**expected, "decode_grid": {**grid, "beam": 13.0, "lattice_beam": 8.0}})[0]
            == "finished"
        )
    for damaged in (None, [1.0, 2.0], "grid"):  # a grid that is no mapping: decoded again, no crash
        (first / "decode.json").write_text(json.dumps({**old, "grid": damaged}))
        assert run_state(first, expected)[0] == "redecode"
    (first / "decode.json").unlink()  # a decoding stopped half-way: decode it again
    assert run_state(first, expected) == ("redecode", f"{first / 'decode.json'}: missing")
    (first / "model.pt").unlink()  # nothing to decode: train it again
    assert run_state(first, expected) == (
        "unfinished",
        f"{first / 'decode.json'}: missing, and its model.pt is not here",
    )

    decoded: list[str] = []

    def fake_decode(cfg, run_dir: Path) -> dict:
        assert [float(w) for w in cfg.wfst.lm_weights] == [1.0, 2.0]
        assert (cfg.wfst.beam, cfg.wfst.lattice_beam) == (11.0, 6.0)
        decoded.append(run_dir.name)
        record = {**old, "grid": grid}
        (run_dir / "decode.json").write_text(json.dumps(record))
        return record

    trained: list[str] = []

    def fake_simulate(cfg, *, out: Path, **kwargs) -> None:
        trained.append(out.name)
        (out / "model.pt").write_bytes(b"weights")
        history = [{"epoch": 1, "loss": 2.0, "seconds": 1.0}]
        (out / "train_summary.json").write_text(json.dumps({"history": history}))
        (out / "sim.json").write_text(json.dumps({"virtual_s": 1.0, "learners": 4}))

    monkeypatch.setattr(runner, "decode_run", fake_decode)
    monkeypatch.setattr(runner, "simulate_experiment", fake_simulate)
    monkeypatch.setattr(runner, "_step_cost", lambda *a, **k: None)
    run_before = json.loads((second / "run.json").read_text())
    counts = run_study(plan, tmp_path, network=NETWORKS["infiniband"], config_dir=CONF)
    assert trained == [first.name]  # its model was gone
    assert sorted(decoded) == sorted(names)
    assert counts == {"finished_before": 0, "run_now": len(names), "left": 0}
    assert json.loads((second / "run.json").read_text())["decode_grid"] == expected["decode_grid"]
    assert {k: v for k, v in run_before.items() if k != "decode_grid"} == {
        k: v for k, v in json.loads((second / "run.json").read_text()).items() if k != "decode_grid"
    }
    plan_json = json.loads((tmp_path / "plan.json").read_text())
    assert plan_json["plan"]["lm_weights"] == [1.0, 2.0] and plan_json["plan"]["beam"] == 11.0
    assert all(
        run_state(tmp_path / "runs" / n, _expected(plan, r, CONF, tmp_path))[0] == "finished"
        for n, r in zip(names, plan.runs(), strict=True)
    )


def test_a_run_stopped_during_its_first_decoding_is_decoded_next_time_not_trained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in the study (2026-11-30): a run stopped while its freshly trained model was being
    decoded had model.pt and its summaries whole, but no run.json, so the next sitting trained
    it again (1-2 hours each)."""
    import dataclasses

    from asrkit.study import runner

    plan = dataclasses.replace(_plan(), decode=True, lm_weights=(1.0,), word_penalties=(0.0,))
    run = plan.runs()[0]
    where = tmp_path / "runs" / run.name
    expected = _expected(plan, run, CONF, tmp_path)
    trained: list[str] = []
    decoded: list[str] = []

    def fake_simulate(cfg, *, out: Path, **kwargs) -> None:
        trained.append(out.name)
        out.mkdir(parents=True, exist_ok=True)
        (out / "model.pt").write_bytes(b"weights")
        history = [{"epoch": 1, "loss": 2.0, "seconds": 1.0}]
        (out / "train_summary.json").write_text(json.dumps({"history": history}))
        (out / "sim.json").write_text(json.dumps({"virtual_s": 1.0, "learners": 4}))

    def stopped(cfg, run_dir: Path) -> dict:
        raise KeyboardInterrupt  # Ctrl-C (or the sitting's SIGTERM) during the search

    def fake_decode(cfg, run_dir: Path) -> dict:
        decoded.append(run_dir.name)
        record = {"tuned_on": "dev", "sets": {"dev": {"wer": 20.0}}, "grid": expected["decode_grid"]}
        (run_dir / "decode.json").write_text(json.dumps(record))
        return record

    monkeypatch.setattr(runner, "simulate_experiment", fake_simulate)
    monkeypatch.setattr(runner, "_step_cost", lambda *a, **k: None)
    monkeypatch.setattr(runner, "decode_run", stopped)
    with pytest.raises(KeyboardInterrupt):
        run_study(plan, tmp_path, network=NETWORKS["infiniband"], config_dir=CONF, max_runs=1)
    assert trained == [run.name] and not (where / "run.json").exists()  # not finished
    state, why = run_state(where, expected)
    assert state == "redecode" and "decod" in why, (state, why)

    monkeypatch.setattr(runner, "decode_run", fake_decode)
    run_study(plan, tmp_path, network=NETWORKS["infiniband"], config_dir=CONF, max_runs=1)
    assert trained == [run.name] and decoded == [run.name]  # decoded, not trained again
    assert run_state(where, expected) == ("finished", "")
    record = json.loads((where / "run.json").read_text())
    assert {k: record[k] for k in expected} == expected and "step_cost" in record
    # Trained with other settings, then stopped: nothing of it is kept, it is trained again.
    (where / "run.json").unlink()
    (where / "decode.json").unlink()
    (where / "trained.json").write_text(json.dumps({**record, "lr": 123.0}))
    assert run_state(where, expected)[0] == "unfinished"
    (where / "trained.json").write_text('{"lr": 0.1, "le')  # damaged: trained again, no crash
    state, why = run_state(where, expected)
    assert state == "unfinished" and "trained.json" in why and "damaged" in why


def _hybrid_plan(exp: Path) -> StudyPlan:
    import dataclasses

    model = (
        "model=tiny",
        "objective=ce",
        f"exp_dir={exp}",
        f"align.train={exp}/ali_train",
        f"align.dev={exp}/ali_dev",
    )
    return dataclasses.replace(_plan(), models={"h": (*model, f"wfst.graph={exp}/graph")}, decode=True)


def _experiment(exp: Path, alignments: bytes = b"u1 1 2 3\n") -> None:
    import gzip

    for name in ("ali_train", "ali_dev"):
        (exp / name).mkdir(parents=True, exist_ok=True)
        (exp / name / "ali.1.gz").write_bytes(gzip.compress(alignments, mtime=1))
        (exp / name / "final.mdl").write_bytes(b"model")
        (exp / name / "tree").write_bytes(b"tree")
    (exp / "graph").mkdir(exist_ok=True)
    (exp / "graph" / "HCLG.fst").write_bytes(b"hclg")
    (exp / "graph" / "words.txt").write_text("<eps> 0\n")


def test_a_study_keeps_its_own_copy_of_its_inputs_and_goes_on_from_another_machine(tmp_path: Path) -> None:
    """Seen 2026-12-05: a fresh VM rebuilt AN4's GMM stage from the same code and audio and
    got other alignments (its CPU's vector kernels round differently), so none of the 32
    committed runs matched the experiment's inputs any more. The study copies its inputs
    once and trains on, decodes through and fingerprints that copy."""
    from asrkit.study.records import inputs_fingerprint
    from asrkit.study.runner import INPUTS_DIR, _fingerprint, _freeze_inputs, _run_config

    exp, out = tmp_path / "exp", tmp_path / "study"
    plan = _hybrid_plan(exp)
    run = plan.runs()[0]
    with pytest.raises(
        DataError, match=r"ali_train/final.mdl: missing; run the experiment's stages through 5"
    ):
        _freeze_inputs(plan, out, CONF)
    assert not (out / INPUTS_DIR).exists() or not any((out / INPUTS_DIR).iterdir())  # nothing half-written
    _experiment(exp)
    made_here = _expected(plan, run, CONF, out)["inputs"]
    _freeze_inputs(plan, out, CONF)
    copy = out / INPUTS_DIR / "h"
    assert sorted(p.name for p in copy.iterdir()) == ["ali_dev", "ali_train", "graph", "inputs.json"]
    cfg = _run_config(plan, run, CONF, out)[0]
    assert cfg.align.train == str(copy / "ali_train") and cfg.wfst.graph == str(copy / "graph")
    # The copy has the experiment's fingerprint: runs made on these inputs before stay finished.
    assert _expected(plan, run, CONF, out)["inputs"] == made_here
    files = [copy / d / f for d in ("ali_train", "ali_dev") for f in ("ali.1.gz", "final.mdl", "tree")]
    assert (
        inputs_fingerprint([*files, copy / "graph" / "HCLG.fst", copy / "graph" / "words.txt"]) == made_here
    )
    # Another machine's experiment: other alignments; the study's runs do not move.
    _experiment(exp, alignments=b"u1 1 2 2\n")
    _fingerprint.cache_clear()  # a sitting's fingerprints are taken once per process
    _freeze_inputs(plan, out, CONF)  # kept, not copied again
    assert _expected(plan, run, CONF, out)["inputs"] == made_here
    assert _expected(plan, run, CONF, tmp_path / "elsewhere")["inputs"] != made_here
