"""Small helpers the study's reports share: a run's last loss and time to a target loss,
mean ± sd over seeds, markdown tables, groups of runs, saving a figure.

Times are virtual seconds of the simulated cluster (training epochs only, as
``train_summary.json`` counts them). A group's *target loss* is the lowest dev loss every
run of the group reaches; *time to target* is the virtual time the dev loss crosses it,
interpolated linearly between the two validations either side of the crossing (the first
validation's time where that one is already at or below it): a run validates at its
epochs' ends only.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["Run"]

#: A finished run: its ``run.json`` with its curve and summaries (``report.load_runs``).
Run = dict[str, Any]


def _target(runs: Iterable[Run]) -> float:
    return max(min(p["loss"] for p in r["curve"]) for r in runs)


def _time_to(run: Run, target: float) -> float | None:
    before = None
    for point in run["curve"]:
        if point["loss"] <= target:
            if before is None or before["loss"] <= point["loss"]:
                return float(point["time"])
            share = (before["loss"] - target) / (before["loss"] - point["loss"])
            return float(before["time"] + share * (point["time"] - before["time"]))
        before = point
    return None


def _loss(run: Run) -> float:
    """The run's last dev loss."""
    return float(run["curve"][-1]["loss"])


def _final(run: Run, key: str) -> float | None:
    return run["curve"][-1][key] if run["curve"] else None


def _mean_sd(values: list[float | None], digits: int = 2) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "—"
    if len(known) == 1:
        return f"{known[0]:.{digits}f}"
    return f"{statistics.fmean(known):.{digits}f} ± {statistics.stdev(known):.{digits}f}"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _groups(runs: list[Run], key: Callable[[Run], tuple]) -> dict[tuple, list[Run]]:
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        groups[key(r)].append(r)
    return dict(sorted(groups.items()))


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
