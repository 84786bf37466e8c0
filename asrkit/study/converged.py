"""The report of a study trained to the end (the ``converged`` and ``sweep`` plans:
docs/study.md): every figure from the runs' records, dev WER from each run's HCLG decode
(``decode.json``) besides the dev loss and frame accuracy of its last epoch.

Tables: the one-learner recipes (and a learning-rate sweep), the headline (every strategy
at the largest learner count and the headline batch, seeds as mean ± sd, both optimizers),
communication at the papers' ratio against today's, stragglers, the global batch with each
strategy's largest good batch, and fixed ring against random pairing. A *good* batch is one
whose dev WER is within :data:`GOOD_WER_MARGIN` points of the one-learner SGD recipe's mean.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from asrkit.distributed.topology import expected_mixing_matrix, spectral_gap
from asrkit.study.plan import STRATEGIES
from asrkit.study.tables import Run, _fmt, _groups, _loss, _mean_sd, _save, _table, _target, _time_to

__all__ = ["GOOD_WER_MARGIN", "converged_sections"]

#: A batch is good while its dev WER stays within this many points of one learner's (the
#: seed spread of the one-learner runs is about a point).
GOOD_WER_MARGIN = 1.0


def _wer(run: Run) -> float | None:
    return run.get("dev_wer")


def _acc(run: Run) -> float | None:
    return run["curve"][-1].get("acc") if run["curve"] else None


def _order(run: Run) -> tuple:
    strategies = [*STRATEGIES, "single"]
    return (strategies.index(run["strategy"]), run.get("optim", ""), run["seed"])


def _pick(runs: list[Run], **axes: Any) -> list[Run]:
    return sorted((r for r in runs if all(r.get(k, "") == v for k, v in axes.items())), key=_order)


def _by_strategy(runs: list[Run]) -> list[tuple[str, list[Run]]]:
    groups = _groups(runs, lambda r: (r["strategy"],))
    return sorted(((k[0], v) for k, v in groups.items()), key=lambda kv: _order(kv[1][0]))


def _curves(
    groups: list[tuple[str, list[Run]]], figure: Path, title: str, target: float | None = None
) -> None:
    """Dev loss against epochs and against virtual seconds, the mean of each group's seeds."""
    fig, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, members in groups:
        epochs = min(len(r["curve"]) for r in members)
        xs = [statistics.fmean(r["curve"][e]["time"] for r in members) for e in range(epochs)]
        ys = [statistics.fmean(r["curve"][e]["loss"] for r in members) for e in range(epochs)]
        by_epoch.plot(range(1, epochs + 1), ys, marker=".", label=label)
        by_time.plot(xs, ys, marker=".", label=label)
    for axis, xlabel in ((by_epoch, "epoch"), (by_time, "virtual seconds (training)")):
        if target is not None:
            axis.axhline(target, color="grey", linestyle=":")
        axis.set_xlabel(xlabel)
        axis.set_ylabel("dev loss (frame cross-entropy)")
    by_time.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    _save(fig, figure)


def _recipe(runs: list[Run], figures: Path) -> tuple[str, float | None]:
    """One learner at the base batch: each optimizer's dev WER over seeds; returns the
    section and the SGD recipe's mean dev WER (the batch table's reference)."""
    alone = [r for r in runs if r["learners"] == 1]
    if not alone:
        return "", None
    rows, groups = [], []
    for (optim,), members in sorted(_groups(alone, lambda r: (r.get("optim", ""),)).items()):
        members.sort(key=lambda r: r["seed"])
        rows.append(
            [
                optim,
                f"{members[0]['lr']:.3g}",
                len(members),
                _mean_sd([_wer(r) for r in members]),
                " / ".join(_fmt(_wer(r)) for r in members),
                _mean_sd([_loss(r) for r in members], 3),
                _mean_sd([_acc(r) for r in members]),
            ]
        )
        groups.append((optim, members))
    _curves(groups, figures / "recipe.png", f"one learner, batch {alone[0]['batch']}")
    header = ["optimizer", "peak lr", "seeds", "dev WER %", "by seed", "final dev loss", "frame acc %"]
    sgd = [w for w in (_wer(r) for r in alone if r.get("optim") == "sgd") if w is not None]
    reference = statistics.fmean(sgd) if sgd else None
    section = (
        f"### One learner, global batch {alone[0]['batch']}\n\n{_table(header, rows)}\n\n"
        "![](study/recipe.png)\n"
    )
    return section, reference


def _headline(runs: list[Run], figures: Path) -> str:
    n = max(r["learners"] for r in runs)
    equal = [r for r in runs if r["learners"] == n and r["straggler"] == "none" and r.get("comm") == "today"]
    batches = _groups(equal, lambda r: (r["batch"],))
    if not batches:
        return ""
    (batch,), chosen = max(batches.items(), key=lambda kv: len(kv[1]))
    optims = sorted({r.get("optim", "") for r in chosen}, key=lambda o: (not o.startswith("sgd"), o))
    target = _target(chosen)
    rows, groups = [], []
    for optim in optims:
        for strategy, members in _by_strategy(_pick(chosen, optim=optim)):
            rows.append(
                [
                    strategy,
                    optim,
                    len(members),
                    _mean_sd([_wer(r) for r in members]),
                    _mean_sd([_loss(r) for r in members], 3),
                    _mean_sd([_acc(r) for r in members]),
                    _mean_sd([_time_to(r, target) for r in members], 1),
                    _mean_sd([r["samples_per_s"] for r in members], 0),
                    _mean_sd([r["consensus"] for r in members], 4),
                ]
            )
            groups.append((f"{strategy} ({optim})", members))
    _curves(groups, figures / "headline.png", f"{n} learners, global batch {batch}, equal speed", target)
    header = [
        "strategy",
        "optimizer",
        "seeds",
        "dev WER %",
        "final dev loss",
        "frame acc %",
        f"virtual s to loss {target:.3f}",
        "samples / virtual s",
        "consensus distance",
    ]
    return (
        f"### Headline: {n} learners, global batch {batch}, equal speed, today's communication\n\n"
        f"{_table(header, rows)}\n\n![](study/headline.png)\n"
    )


def _comm(runs: list[Run], figures: Path) -> str:
    paper = [r for r in runs if r.get("comm") == "paper" and r["straggler"] == "none"]
    parts = []
    for (n, batch), group in _groups(paper, lambda r: (r["learners"], r["batch"])).items():
        today = {
            r["strategy"]: r
            for r in runs
            if r.get("comm") == "today"
            and r["straggler"] == "none"
            and r["seed"] == 1
            and (r["learners"], r["batch"], r.get("optim")) == (n, batch, group[0].get("optim"))
        }
        target = _target(group)
        rows = []
        for r in sorted(group, key=_order):
            base = today.get(r["strategy"])
            rows.append(
                [
                    r["strategy"],
                    _fmt(base["samples_per_s"] if base else None, 0),
                    _fmt(r["samples_per_s"], 0),
                    _fmt(
                        r["samples_per_s"] / base["samples_per_s"]
                        if base and base["samples_per_s"]
                        else None,
                        3,
                    ),
                    _fmt(_time_to(r, target), 1),
                    _fmt(_wer(r)),
                    f"{_loss(r):.3f}",
                ]
            )
        name = f"comm_n{n}_b{batch}.png"
        _curves(
            [(r["strategy"], [r]) for r in sorted(group, key=_order)],
            figures / name,
            f"{n} learners, batch {batch}, papers' ratio",
            target,
        )
        header = [
            "strategy",
            "samples/s today",
            "samples/s at the papers' ratio",
            "kept",
            f"virtual s to {target:.3f}",
            "dev WER %",
            "final dev loss",
        ]
        parts.append(
            f"**{n} learners, global batch {batch}**\n\n{_table(header, rows)}\n\n![](study/{name})\n"
        )
    return "### Communication at the papers' ratio\n\n" + "\n".join(parts) if parts else ""


def _stragglers(runs: list[Run]) -> str:
    slow = [r for r in runs if r["straggler"] != "none"]
    rows = []
    for r in sorted(slow, key=lambda r: (r.get("comm", ""), r["straggler"], _order(r))):
        equal = _pick(
            runs,
            strategy=r["strategy"],
            learners=r["learners"],
            batch=r["batch"],
            straggler="none",
            seed=r["seed"],
            optim=r.get("optim", ""),
            comm=r.get("comm", ""),
        )
        base = equal[0] if equal else None
        group = [r, *equal]
        target = _target(group)
        rows.append(
            [
                r.get("comm", ""),
                r["straggler"],
                r["strategy"],
                _fmt(r["samples_per_s"], 0),
                _fmt(
                    r["samples_per_s"] / base["samples_per_s"] if base and base["samples_per_s"] else None, 3
                ),
                _fmt(_time_to(r, target), 1),
                _fmt(_time_to(base, target) if base else None, 1),
                _fmt(_wer(r)),
                _fmt(_wer(base) if base else None),
            ]
        )
    header = [
        "communication",
        "straggler",
        "strategy",
        "samples/s",
        "vs equal speed",
        "virtual s to the pair's target",
        "at equal speed",
        "dev WER %",
        "at equal speed",
    ]
    return "### Stragglers (one learner slow)\n\n" + _table(header, rows) + "\n" if rows else ""


def _batch(runs: list[Run], figures: Path, reference: float | None, diverged: list[Run]) -> str:
    """SYNC and ADPSGD over global batches at the smallest learner count; a batch's seeds
    pooled (mean ± sd), and a batch good when the seeds' mean dev WER is within the margin."""
    small = min(r["learners"] for r in runs if r["learners"] > 1)
    chosen = [
        r for r in runs if r["learners"] == small and r["straggler"] == "none" and r.get("comm") == "today"
    ]
    if len({r["batch"] for r in chosen}) < 2:
        return ""
    rows: list[list[Any]] = []
    largest: dict[str, int] = {}
    fig = plt.figure(figsize=(6, 3.5))
    for strategy, members in _by_strategy(chosen):
        batches = _groups(members, lambda r: (r["batch"],))
        means: list[float] = []
        spreads: list[float] = []
        for (batch,), group in batches.items():
            group.sort(key=lambda r: r["seed"])
            wers = [w for w in (_wer(r) for r in group) if w is not None]
            mean = statistics.fmean(wers) if wers else None
            good = reference is not None and mean is not None and mean <= reference + GOOD_WER_MARGIN
            if good:
                largest[strategy] = max(largest.get(strategy, 0), batch)
            means.append(mean if mean is not None else float("nan"))
            spreads.append(statistics.stdev(wers) if len(wers) > 1 else 0.0)
            rows.append(
                [
                    strategy,
                    batch,
                    f"{group[0]['lr']:.3g}",
                    _fmt(group[0].get("steps"), 0),
                    len(group),
                    _mean_sd([_wer(r) for r in group]),
                    " / ".join(_fmt(_wer(r)) for r in group) if len(group) > 1 else "",
                    _mean_sd([_loss(r) for r in group], 3),
                    "yes" if good else "no",
                ]
            )
        plt.errorbar(list(b for (b,) in batches), means, yerr=spreads, marker="o", capsize=3, label=strategy)
    if reference is not None:
        plt.axhline(reference, color="grey", linestyle=":", label="one learner (SGD)")
        plt.axhline(reference + GOOD_WER_MARGIN, color="grey", linestyle="--", linewidth=0.8)
    plt.xscale("log")
    plt.xlabel("global batch (utterances)")
    plt.ylabel("dev WER % (mean of seeds)")
    plt.title(f"{small} learners", fontsize=9)
    plt.legend(fontsize=7)
    _save(fig, figures / f"batch_n{small}.png")
    for r in sorted(diverged, key=_order):
        if r["learners"] == small and r["straggler"] == "none" and r.get("comm") == "today":
            step = r["diverged_step"]
            rows.append(
                [
                    r["strategy"],
                    r["batch"],
                    f"{r['lr']:.3g}",
                    step,
                    1,
                    f"diverged at step {step}",
                    "",
                    "—",
                    "no",
                ]
            )
    header = [
        "strategy",
        "global batch",
        "peak lr",
        "steps",
        "seeds",
        "dev WER %",
        "by seed",
        "final dev loss",
        "good",
    ]
    summary = ", ".join(f"{s} **{b}**" for s, b in largest.items()) or "none"
    ref = f"{reference:.2f}%" if reference is not None else "—"
    return (
        f"### Global batch, {small} learners\n\nGood: the seeds' mean dev WER within {GOOD_WER_MARGIN:g} "
        f"point of one learner's SGD recipe ({ref}). Largest good batch: {summary}.\n\n"
        f"{_table(header, rows)}\n\n![](study/batch_n{small}.png)\n"
    )


def _spectral(runs: list[Run]) -> str:
    chosen = [
        r
        for r in runs
        if r["strategy"] in ("adpsgd_fixed", "adpsgd_random")
        and r["straggler"] == "none"
        and r.get("comm") == "today"
    ]
    rows = []
    for (n, batch, optim, pattern), members in _groups(
        chosen, lambda r: (r["learners"], r["batch"], r.get("optim", ""), r["strategy"].split("_")[1])
    ).items():
        gap = spectral_gap(expected_mixing_matrix(pattern, n))
        rows.append(
            [
                n,
                batch,
                optim,
                pattern,
                len(members),
                f"{gap:.4f}",
                _mean_sd([r["consensus"] for r in members], 4),
                _mean_sd([_wer(r) for r in members]),
                _mean_sd([_loss(r) for r in members], 3),
            ]
        )
    header = [
        "learners",
        "global batch",
        "optimizer",
        "pattern",
        "seeds",
        "spectral gap of E[W]",
        "consensus distance",
        "dev WER %",
        "final dev loss",
    ]
    return "### Fixed ring against random pairing\n\n" + _table(header, rows) + "\n" if rows else ""


def converged_sections(runs: list[Run], figures: Path, diverged: list[Run] = ()) -> list[str]:  # type: ignore[assignment]
    """The report's sections for runs of a study trained to the end (``diverged``: the
    ``run.json`` of runs whose training diverged, with their ``diverged_step``)."""
    recipe, reference = _recipe(runs, figures)
    many = [r for r in runs if r["learners"] > 1]
    if not many:
        return [recipe]
    sections: list[Callable[[], str]] = [
        lambda: _headline(many, figures),
        lambda: _comm(many, figures),
        lambda: _stragglers(many),
        lambda: _batch(many, figures, reference, list(diverged)),
        lambda: _spectral(many),
    ]
    lost = [f"{r['name']} (step {r['diverged_step']})" for r in sorted(diverged, key=lambda r: r["name"])]
    tail = [f"### Diverged runs\n\nTraining loss not a number: {', '.join(lost)}.\n"] if lost else []
    return [recipe, *(make() for make in sections), *tail]
