"""Tables and plots of a study's finished runs (``asrkit study report``): what docs/study.md
shows, regenerated from ``<out>/runs/*/`` (``run.json``, ``sim.json``,
``train_summary.json``, ``learners.json``, ``decode.json``). The first study's sections
are here; a study trained to the end has its own (:mod:`asrkit.study.converged`); times
and targets as :mod:`asrkit.study.tables` says.
"""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from asrkit.data.io import atomic_write  # noqa: E402
from asrkit.distributed.topology import expected_mixing_matrix, spectral_gap  # noqa: E402
from asrkit.errors import DataError  # noqa: E402
from asrkit.study.converged import converged_sections  # noqa: E402
from asrkit.study.plan import STRATEGIES  # noqa: E402
from asrkit.study.records import read_record  # noqa: E402
from asrkit.study.tables import (  # noqa: E402
    Run,
    _final,
    _fmt,
    _groups,
    _loss,
    _mean_sd,
    _save,
    _table,
    _target,
    _time_to,
)

__all__ = ["load_runs", "write_report"]

log = logging.getLogger(__name__)


def load_runs(out: Path) -> list[Run]:
    """Every finished run under ``out/runs`` with its curve (epoch, cumulative virtual
    seconds, dev loss, dev WER or frame accuracy) and its learners' summary."""
    runs = []
    for sim_file in sorted((out / "runs").glob("*/sim.json")):
        where = sim_file.parent
        try:
            run = read_record(where / "run.json")
            summary = read_record(where / "train_summary.json")
            history = summary["history"]
            decoded = read_record(where / "decode.json") if (where / "decode.json").is_file() else None
            learners = read_record(where / "learners.json") if (where / "learners.json").is_file() else {}
            sim = read_record(sim_file)
        except (DataError, KeyError, TypeError) as err:
            log.warning("study report: %s left out (%s); `asrkit study run` does it again", where.name, err)
            continue
        elapsed, curve = 0.0, []
        for h in history:
            elapsed += float(h.get("seconds", 0.0))
            curve.append(
                {
                    "epoch": h["epoch"],
                    "time": elapsed,
                    "loss": h["loss"],
                    "wer": h.get("wer"),
                    "acc": h.get("frame_acc"),
                }
            )
        dev = None
        if decoded is not None:
            sets = decoded.get("sets", {})
            dev = sets.get(decoded.get("tuned_on"), {}).get("wer")
        run.update(
            curve=curve,
            sim=sim,
            decode_cpu_s=decoded.get("cpu_s") if isinstance(decoded, dict) else None,
            steps=summary.get("steps"),
            dev_wer=dev,
            samples_per_s=learners.get("steady_samples_per_s"),
            consensus=learners.get("mean_consensus_distance"),
        )
        runs.append(run)
    return runs


def load_diverged(out: Path) -> list[Run]:
    """The ``run.json`` of every run under ``out/runs`` whose training diverged, with the
    step it diverged at (``diverged_step``)."""
    runs = []
    for where in sorted((out / "runs").glob("*/diverged.json")):
        try:
            run = read_record(where.parent / "run.json")
            run["diverged_step"] = read_record(where)["step"]
        except (DataError, KeyError, TypeError) as err:
            log.warning("study report: %s left out (%s)", where.parent.name, err)
            continue
        if run.get("diverged"):
            runs.append(run)
    return runs


def _quality(runs: list[Run]) -> tuple[str, str]:
    """The dev figure a group of runs reports besides the loss: greedy WER where the model
    decodes by itself (CTC), frame accuracy where it needs a graph (CE on tied states)."""
    if any(_final(r, "wer") is not None for r in runs):
        return "wer", "final dev WER %"
    return "acc", "final dev frame accuracy %"


def _section(title: str, header: list[str], rows: list[list[Any]], figure: str) -> str:
    return f"{title}\n\n{_table(header, rows)}\n\n![](study/{figure})\n"


def _order(strategy: str) -> int:
    return list(STRATEGIES).index(strategy)


def _headline(runs: list[Run], figures: Path) -> str:
    chosen = [r for r in runs if r["straggler"] == "none"]
    seeds = _groups(chosen, lambda r: (r["model"], r["learners"], r["batch"]))
    multi = {k: v for k, v in seeds.items() if len({r["seed"] for r in v}) > 1}
    if not multi:
        return ""
    (model, n, batch), group = next(iter(multi.items()))
    target = _target(group)
    quality, quality_header = _quality(group)
    rows, fig = [], plt.figure(figsize=(7, 4))
    for strategy, members in sorted(
        _groups(group, lambda r: (r["strategy"],)).items(), key=lambda kv: _order(kv[0][0])
    ):
        rows.append(
            [
                strategy[0],
                len(members),
                _mean_sd([_loss(r) for r in members], 3),
                _mean_sd([_final(r, quality) for r in members]),
                _mean_sd([_time_to(r, target) for r in members], 1),
                _mean_sd([r["samples_per_s"] for r in members], 1),
            ]
        )
        epochs = min(len(r["curve"]) for r in members)
        xs = [statistics.fmean(r["curve"][e]["time"] for r in members) for e in range(epochs)]
        ys = [statistics.fmean(r["curve"][e]["loss"] for r in members) for e in range(epochs)]
        plt.plot(xs, ys, marker=".", label=strategy[0])
    plt.axhline(target, color="grey", linestyle=":", label="target")
    plt.xlabel("virtual seconds (training)")
    plt.ylabel("dev loss (mean over seeds)")
    plt.title(f"{model}, {n} learners, global batch {batch}, equal speed", fontsize=9)
    plt.legend(fontsize=8)
    _save(fig, figures / "headline.png")
    header = [
        "strategy",
        "seeds",
        "final dev loss",
        quality_header,
        f"virtual s to loss {target:.3f}",
        "samples/s",
    ]
    title = f"### Headline: {model}, {n} learners, global batch {batch}, equal speed"
    return _section(title, header, rows, "headline.png")


def _equal_speed(runs: list[Run], figures: Path) -> str:
    chosen = _equal_seed_1(runs)
    parts = ["### Equal speed: time to the target loss per strategy\n"]
    for (model, n, batch), group in _groups(
        chosen, lambda r: (r["model"], r["learners"], r["batch"])
    ).items():
        # A run whose peers are missing keeps its row (its own best loss is the target).
        target = _target(group)
        quality, quality_header = _quality(group)
        rows, reached = [], {}
        fig = plt.figure(figsize=(6, 3.5))
        for r in sorted(group, key=lambda r: _order(r["strategy"])):
            reach = _time_to(r, target)
            if reach is not None:
                reached[r["strategy"]] = reach
            rows.append(
                [
                    r["strategy"],
                    f"{_loss(r):.3f}",
                    _fmt(_final(r, quality)),
                    _fmt(reach, 1),
                    _fmt(r["samples_per_s"], 1),
                ]
            )
            plt.plot(
                [p["time"] for p in r["curve"]],
                [p["loss"] for p in r["curve"]],
                marker=".",
                label=r["strategy"],
            )
        fastest = min(reached, key=reached.__getitem__, default=None)
        name = f"equal_{model}_n{n}_b{batch}.png"
        plt.xlabel("virtual seconds")
        plt.ylabel("dev loss")
        plt.title(f"{model}, {n} learners, batch {batch}", fontsize=9)
        plt.legend(fontsize=7)
        _save(fig, figures / name)
        header = ["strategy", "final dev loss", quality_header, f"virtual s to {target:.3f}", "samples/s"]
        first = f"; first to the target: **{fastest}**" if fastest else ""
        parts.append(_section(f"**{model}, {n} learners, global batch {batch}**{first}", header, rows, name))
    return "\n".join(parts) if len(parts) > 1 else ""


def _stragglers(runs: list[Run], figures: Path) -> str:
    base = {
        (r["model"], r["strategy"], r["learners"], r["batch"]): r
        for r in runs
        if r["straggler"] == "none" and r["seed"] == 1
    }
    chosen = [r for r in runs if r["straggler"] != "none"]
    parts = ["### Stragglers: simulated samples/s against the same learners at equal speed\n"]
    for (model, n, batch), group in _groups(
        chosen, lambda r: (r["model"], r["learners"], r["batch"])
    ).items():
        rows = []
        for r in sorted(group, key=lambda r: (r["straggler"], _order(r["strategy"]))):
            equal = base.get((model, r["strategy"], n, batch))
            ratio = (
                r["samples_per_s"] / equal["samples_per_s"]
                if equal and equal["samples_per_s"] and r["samples_per_s"]
                else None
            )
            rows.append(
                [
                    r["straggler"],
                    r["strategy"],
                    _fmt(r["samples_per_s"], 1),
                    _fmt(ratio, 3),
                    f"{_loss(r):.3f}",
                ]
            )
        fig = plt.figure(figsize=(6, 3.5))
        for offset, straggler in enumerate(sorted({r["straggler"] for r in group})):
            members = sorted(
                (r for r in group if r["straggler"] == straggler), key=lambda r: _order(r["strategy"])
            )
            plt.bar(
                [_order(r["strategy"]) + 0.4 * offset for r in members],
                [r["samples_per_s"] or 0 for r in members],
                width=0.4,
                label=straggler,
            )
        plt.xticks(range(len(STRATEGIES)), list(STRATEGIES), rotation=20, fontsize=7)
        plt.ylabel("samples per virtual second")
        plt.title(f"{model}, {n} learners, batch {batch}", fontsize=9)
        plt.legend(fontsize=7)
        name = f"stragglers_{model}_n{n}_b{batch}.png"
        _save(fig, figures / name)
        header = ["straggler", "strategy", "samples/s", "vs equal speed", "final dev loss"]
        parts.append(_section(f"**{model}, {n} learners, global batch {batch}**", header, rows, name))
    return "\n".join(parts) if len(parts) > 1 else ""


def _batch(runs: list[Run], figures: Path) -> str:
    parts = ["### Batch size: final dev loss and WER against the global batch\n"]
    for (model, n), group in _groups(_equal_seed_1(runs), lambda r: (r["model"], r["learners"])).items():
        # A group of a single batch compares nothing and is left out. Every run of the others
        # keeps its row; "vs smallest batch" is against the strategy's run at the group's
        # smallest batch, "—" where that run is missing.
        batches = sorted({r["batch"] for r in group})
        if len(batches) < 2:
            continue
        rows = []
        fig = plt.figure(figsize=(6, 3.5))
        strategies = _groups(group, lambda r: (r["strategy"],))
        for (strategy,), members in sorted(strategies.items(), key=lambda kv: _order(kv[0][0])):
            members.sort(key=lambda r: r["batch"])
            smallest = _loss(members[0]) if members[0]["batch"] == batches[0] else None
            for r in members:
                loss = _loss(r)
                rows.append(
                    [
                        strategy,
                        r["batch"],
                        f"{r['lr']:.3g}",
                        f"{loss:.3f}",
                        _fmt(loss / smallest if smallest else None, 3),
                        _fmt(_final(r, "wer")),
                        _fmt(_final(r, "acc")),
                    ]
                )
            plt.plot(
                [r["batch"] for r in members],
                [_loss(r) for r in members],
                marker="o",
                label=strategy,
            )
        plt.xscale("log")
        plt.xlabel("global batch (utterances)")
        plt.ylabel("final dev loss")
        plt.title(f"{model}, {n} learners", fontsize=9)
        plt.legend(fontsize=7)
        name = f"batch_{model}_n{n}.png"
        _save(fig, figures / name)
        header = [
            "strategy",
            "global batch",
            "lr",
            "final dev loss",
            "vs smallest batch",
            "final dev WER %",
            "frame acc %",
        ]
        parts.append(f"**{model}, {n} learners**\n\n{_table(header, rows)}\n\n![](study/{name})\n")
    return "\n".join(parts) if len(parts) > 1 else ""


def _spectral(runs: list[Run]) -> str:
    chosen = [r for r in _equal_seed_1(runs) if r["strategy"] in ("adpsgd_fixed", "adpsgd_random")]
    rows = []
    for r in sorted(chosen, key=lambda r: (r["model"], r["learners"], r["batch"], r["strategy"])):
        pattern = r["strategy"].split("_")[1]
        gap = spectral_gap(expected_mixing_matrix(pattern, r["learners"]))
        rows.append(
            [
                r["model"],
                r["learners"],
                r["batch"],
                pattern,
                f"{gap:.4f}",
                _fmt(r["consensus"], 4),
                f"{_loss(r):.3f}",
            ]
        )
    header = [
        "model",
        "learners",
        "global batch",
        "pattern",
        "spectral gap of E[W]",
        "consensus distance at the end",
        "final dev loss",
    ]
    return "### Fixed ring against random pairing\n\n" + _table(header, rows) + "\n" if rows else ""


def _equal_seed_1(runs: list[Run]) -> list[Run]:
    """The runs at equal speed of seed 1 (whatever question the plan made them for: the
    report compares every run that shares the other axes)."""
    return [r for r in runs if r["straggler"] == "none" and r["seed"] == 1]


def _cost(out: Path, runs: list[Run]) -> str:
    """What running the study cost this machine: each finished run's simulation (one
    single-threaded process: ``sim.json``'s ``cpu_s``, processor seconds, or ``real_s``
    where a run made before they were recorded has none) and decoding (``decode.json``'s
    ``cpu_s``, where recorded), summed, and the sittings of ``sittings.json`` (those that
    ended by themselves or by a stop; a sitting killed outright, or paused, is not or
    wrongly there, so the runs' own times are the figure)."""
    if not runs:
        return ""
    seconds = sum(float(r["sim"].get("cpu_s", r["sim"].get("real_s", 0.0))) for r in runs)
    walls = sum(1 for r in runs if "cpu_s" not in r["sim"])
    decodes = [float(r["decode_cpu_s"]) for r in runs if r.get("decode_cpu_s") is not None]
    text = (
        f"\nRunning it took **{seconds / 3600:.1f} core-hours** on this machine: the {len(runs)} "
        "finished runs' simulations, each one single-threaded process (one core), summed"
        + (f" ({walls} of them recorded as wall time, which counts pauses)" if walls else "")
        + ".\n"
    )
    if decodes:
        text += (
            f"Decoding took {sum(decodes) / 3600:.1f} core-hours more for the {len(decodes)} "
            f"run{'s' if len(decodes) > 1 else ''} that recorded it (from {min(decodes) / 60:.1f} to "
            f"{max(decodes) / 60:.1f} minutes a run; a run decoded again counts its last decoding only).\n"
        )
    else:
        text += "Decoding each run's model comes on top (not recorded for these runs).\n"
    path = out / "sittings.json"
    if path.is_file():
        sittings = json.loads(path.read_text())
        hours = sum(s["seconds"] for s in sittings) / 3600
        jobs = sorted({s["jobs"] for s in sittings})
        finished = sum(s["runs_finished"] for s in sittings)
        text += (
            f"Sittings recorded whole: {len(sittings)}, {hours:.2f} hours of wall time (pauses "
            f"and other work on the machine included), {'/'.join(map(str, jobs))} run(s) at a time; "
            f"{finished} runs finished in them"
            + (
                f", {finished - len(runs)} more than are kept (runs dropped or done again: the "
                "cost of the study as it happened)"
                if finished > len(runs)
                else ""
            )
            + ".\n"
        )
        timed = [s for s in sittings if "cpu_s" in s]
        if timed:
            core_hours = sum(s["cpu_s"] for s in timed) / 3600
            machine_hours = sum(s["cpu_s"] / s["cores"] for s in timed) / 3600
            text += (
                f"The {len(timed)} sitting{'s' if len(timed) > 1 else ''} that recorded processor time "
                f"used {core_hours:.2f} core-hours in all (every run they started, finished or not, "
                f"with its decoding): {machine_hours:.2f} hours of the whole machine, every core busy.\n"
            )
    return text


def _listing(names: list[str], most: int = 8) -> str:
    """``names`` joined, or the first ``most`` and how many more (plan.json lists them)."""
    if len(names) <= most:
        return ", ".join(names)
    return f"{len(names)} runs ({', '.join(names[:most])} and {len(names) - most} more, in plan.json)"


def write_report(out: Path, docs: Path, *, name: str = "study_results") -> Path:
    """``docs/<name>.md`` and its figures in ``docs/study/`` (``docs/<name>/`` for another
    name) from ``out``'s finished runs; returns the markdown's path."""
    runs, diverged = load_runs(out), load_diverged(out)
    figures = docs / ("study" if name == "study_results" else name)
    for stale in figures.glob("*.png"):  # every figure is drawn again; none of another plan stays
        stale.unlink()
    plan = read_record(out / "plan.json") if (out / "plan.json").exists() else {"runs": []}
    done = {r.get("name") for r in (*runs, *diverged)}
    missing = [r["name"] for r in plan.get("runs", []) if r.get("name") not in done]
    if missing:
        log.warning("study report: %d planned run(s) not finished: %s", len(missing), ", ".join(missing))
    intro = (
        "<!-- generated by `asrkit study report`; do not edit: rerun it -->\n"
        f"# Study results ({len(done)} of {len(plan['runs'])} planned runs finished)\n\n"
        + (f"Not finished: {_listing(missing)}.\n\n" if missing else "")
        + "Virtual seconds of the simulated cluster; dev loss is the CTC loss per utterance "
        "(ctc) or the frame cross-entropy (hybrid); dev WER (where decoded) through the "
        "experiment's HCLG, its weights tuned on dev. See docs/study.md for the verdicts.\n"
        + _cost(out, runs)
    )
    if any(r.get("optim") for r in runs):  # a study trained to the end (docs/study.md)
        sections = converged_sections(runs, figures, diverged)
        if figures.name != "study":
            sections = [s.replace("](study/", f"]({figures.name}/") for s in sections]
    else:
        sections = [
            _headline(runs, figures),
            _equal_speed(runs, figures),
            _stragglers(runs, figures),
            _batch(runs, figures),
            _spectral(runs),
        ]
    path = docs / f"{name}.md"
    atomic_write(path, intro + "\n" + "\n".join(s for s in sections if s))
    return path
