"""The study report's time to a target loss, between a run's few validations."""

from __future__ import annotations

import pytest

from asrkit.study.report import _time_to


def _run(*points: tuple[float, float]) -> dict:
    return {"curve": [{"epoch": i + 1, "time": t, "loss": loss} for i, (t, loss) in enumerate(points)]}


def test_the_crossing_is_interpolated_between_the_validations_either_side() -> None:
    run = _run((4.0, 5.0), (8.0, 3.0))
    assert _time_to(run, 4.0) == pytest.approx(6.0)  # half-way down from 5 to 3
    assert _time_to(run, 3.5) == pytest.approx(7.0)
    assert _time_to(run, 3.0) == pytest.approx(8.0)


def test_a_run_at_the_target_at_its_first_validation_or_never_there() -> None:
    assert _time_to(_run((4.0, 3.0), (8.0, 2.0)), 3.5) == 4.0  # nothing earlier to interpolate from
    assert _time_to(_run((4.0, 3.0), (8.0, 2.5)), 2.0) is None
    # a loss that went up and came back: the crossing after the rise
    assert _time_to(_run((2.0, 3.0), (4.0, 3.4), (6.0, 2.6)), 2.8) == pytest.approx(5.5)


def _record(out, strategy: str, n: int, batch: int, losses: list[float], questions: list[str]) -> None:
    import json

    name = f"m_{strategy}_n{n}_b{batch}_none_s1"
    where = out / "runs" / name
    where.mkdir(parents=True)
    run = {"model": "m", "strategy": strategy, "learners": n, "batch": batch, "straggler": "none"}
    run.update(seed=1, questions=questions, name=name, overrides=[], lr=0.01 * batch)
    (where / "run.json").write_text(json.dumps(run))
    (where / "sim.json").write_text("{}")
    history = [{"epoch": e + 1, "loss": x, "seconds": 2.0, "frame_acc": 40.0} for e, x in enumerate(losses)]
    (where / "train_summary.json").write_text(json.dumps({"history": history}))
    learners = {"steady_samples_per_s": 100.0, "mean_consensus_distance": 0.5}
    (where / "learners.json").write_text(json.dumps(learners))


def test_the_report_compares_runs_by_their_axes_and_drops_stale_figures(tmp_path) -> None:
    from asrkit.study.report import write_report

    out, docs = tmp_path / "study", tmp_path / "docs"
    # a batch pair the plan made for another question: the report still compares the batches
    _record(out, "sync", 4, 8, [3.0, 2.0], ["equal_speed"])
    _record(out, "sync", 4, 32, [3.2, 2.4], ["equal_speed"])
    _record(out, "adpsgd_random", 4, 8, [3.1, 2.2], ["spectral"])
    _record(out, "adpsgd_fixed", 4, 32, [3.1, 2.5], ["batch"])  # its batch-8 run is missing
    (docs / "study").mkdir(parents=True)
    (docs / "study" / "stragglers_old_n64_b192.png").write_bytes(b"stale")
    text = write_report(out, docs).read_text()
    assert "| sync | 8 | 0.08 | 2.000 | 1.000 |" in text and "| sync | 32 | 0.32 | 2.400 | 1.200 |" in text
    # Seen in the field: an intact run whose baseline was missing lost its row.
    assert "| adpsgd_random | 8 | 0.08 | 2.200 | 1.000 |" in text  # its own group's smallest batch
    assert "| adpsgd_fixed | 32 | 0.32 | 2.500 | — |" in text  # kept, nothing to compare it with
    assert "### Stragglers" not in text  # no straggler run: no empty section
    assert "| m | 4 | 8 | random |" in text  # the spectral table takes every ADPSGD run
    figures = sorted(p.name for p in (docs / "study").glob("*.png"))
    assert figures == ["batch_m_n4.png", "equal_m_n4_b32.png", "equal_m_n4_b8.png"]


def test_the_cost_counts_processor_time_and_the_decoding_where_recorded(tmp_path) -> None:
    """Seen in the study: runs paused during a CI run (SIGSTOP) counted their pause in
    ``real_s``, and the report said decoding took about a minute where weak models took 30."""
    import json

    from asrkit.study.report import _cost, load_runs

    out = tmp_path / "study"
    _record(out, "sync", 4, 8, [3.0, 2.0], ["equal_speed"])
    _record(out, "adpsgd_fixed", 4, 8, [3.0, 2.5], ["equal_speed"])
    first, second = sorted((out / "runs").iterdir())
    (first / "sim.json").write_text(json.dumps({"real_s": 9000.0, "cpu_s": 3600.0}))  # paused 1.5 h
    (second / "sim.json").write_text(json.dumps({"real_s": 1800.0}))  # made before cpu_s was recorded
    decoded = {"tuned_on": "dev", "sets": {"dev": {"wer": 10.0}}, "seconds": 2000.0, "cpu_s": 1800.0}
    (first / "decode.json").write_text(json.dumps(decoded))
    text = _cost(out, load_runs(out))
    assert "took **1.5 core-hours** on this machine: the 2 finished runs'" in text
    assert "(1 of them recorded as wall time, which counts pauses)" in text
    assert (
        "Decoding took 0.5 core-hours more for the 1 run that recorded it (from 30.0 to 30.0 minutes" in text
    )
    (second / "decode.json").write_text(json.dumps({**decoded, "cpu_s": 60.0}))
    assert (
        "Decoding took 0.5 core-hours more for the 2 runs that recorded it (from 1.0 to 30.0 minutes"
        in _cost(out, load_runs(out))
    )
    (first / "decode.json").unlink()
    (second / "decode.json").unlink()
    assert "Decoding each run's model comes on top (not recorded for these runs)" in _cost(
        out, load_runs(out)
    )


def test_the_sittings_line_says_what_was_dropped_and_the_processor_time_of_every_run_started(
    tmp_path,
) -> None:
    """Seen in the study: its sittings line said 52 runs finished where 23 were kept (the
    others dropped with their inputs), and its wall hours counted CI pauses."""
    import json

    from asrkit.study.report import _cost, load_runs

    out = tmp_path / "study"
    _record(out, "sync", 4, 8, [3.0, 2.0], ["equal_speed"])
    sittings = [
        {"started": "a", "seconds": 7200.0, "jobs": 2, "runs_finished": 3},  # before cpu_s
        {"started": "b", "seconds": 9000.0, "cpu_s": 10800.0, "cores": 2, "jobs": 2, "runs_finished": 1},
        {"started": "c", "seconds": 3600.0, "cpu_s": 7200.0, "cores": 4, "jobs": 2, "runs_finished": 1},
    ]
    (out / "sittings.json").write_text(json.dumps(sittings))
    text = _cost(out, load_runs(out))
    assert "Sittings recorded whole: 3, 5.50 hours of wall time" in text
    assert "5 runs finished in them, 4 more than are kept" in text
    assert "The 2 sittings that recorded processor time used 5.00 core-hours in all" in text
    assert "2.00 hours of the whole machine" in text  # 3 h on 2 cores, 2 h on 4
    (out / "sittings.json").write_text(json.dumps(sittings[:1]))
    text = _cost(out, load_runs(out))
    assert "more than are kept" in text and "recorded processor time" not in text


def test_a_sitting_records_the_processor_time_of_its_workers(tmp_path) -> None:
    """``cpu_s`` counts the children the sitting waited for (the runs' processes), not
    only its own."""
    import json
    import subprocess
    import sys

    from asrkit.study.runner import _sitting

    counts = {"run_now": 1}
    with _sitting(tmp_path, 2, counts):
        busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"
        subprocess.run([sys.executable, "-c", busy], check=True)
    (sitting,) = json.loads((tmp_path / "sittings.json").read_text())
    assert sitting["cpu_s"] >= 0.5 and sitting["cores"] >= 1 and sitting["runs_finished"] == 1


def test_a_study_with_its_plan_and_no_run_kept_reports_none_finished(tmp_path) -> None:
    """A study whose runs were all dropped (made on inputs no machine makes again) still
    reports: nothing finished, every planned run listed; without a plan it is an error."""
    import json

    from asrkit.cli.main import main

    out, docs = tmp_path / "study", tmp_path / "docs"
    assert main(["study", "report", "--out", str(out), "--docs", str(docs)]) == 2
    out.mkdir()
    (out / "plan.json").write_text(json.dumps({"runs": [{"name": "a"}, {"name": "b"}]}))
    assert main(["study", "report", "--out", str(out), "--docs", str(docs)]) == 0
    text = (docs / "study_results.md").read_text()
    assert "# Study results (0 of 2 planned runs finished)" in text and "Not finished: a, b." in text


def test_the_batch_table_pools_seeds_and_judges_a_batch_by_their_mean(tmp_path) -> None:
    """One seed of SYNC moved by 2 points with how a batch was split among learners: a
    batch is good or not by its seeds' mean, and the table shows every seed."""
    from asrkit.study.converged import GOOD_WER_MARGIN, _batch

    def run(strategy: str, batch: int, seed: int, wer: float) -> dict:
        return {
            "strategy": strategy, "learners": 16, "batch": batch, "seed": seed, "straggler": "none",
            "comm": "today", "lr": 0.05 * batch / 32, "steps": 30720 // batch, "dev_wer": wer,
            "curve": [{"epoch": 1, "loss": 1.0 + wer / 100}],
        }  # fmt: skip

    reference = 8.0
    runs = [
        run("sync", 32, 1, 8.5),
        run("sync", 128, 1, 9.9),  # alone: not good ...
        run("sync", 128, 2, 8.1),
        run("sync", 128, 3, 8.3),  # ... but the three seeds' mean (8.77) is
        run("sync", 512, 1, 58.0),
        run("adpsgd_random", 32, 1, 10.2),
        run("adpsgd_random", 32, 2, 7.6),
        run("adpsgd_random", 128, 1, 14.7),
    ]
    assert 8.77 <= reference + GOOD_WER_MARGIN < 9.9
    text = _batch(runs, tmp_path, reference, [])
    assert "Largest good batch: sync **128**, adpsgd_random **32**" in text
    assert "| sync | 128 | 0.2 | 240 | 3 | 8.77 ± 0.99 | 9.90 / 8.10 / 8.30 |" in text
    assert "| adpsgd_random | 32 | 0.05 | 960 | 2 | 8.90 ± 1.84 | 10.20 / 7.60 |" in text
    assert "| sync | 512 | 0.8 | 60 | 1 | 58.00 |  |" in text
    assert (tmp_path / "batch_n16.png").is_file()
