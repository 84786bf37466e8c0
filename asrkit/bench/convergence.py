"""Convergence per wall clock: held-out loss and WER against training time, per strategy.

When the AN4 recipe's strategy comparison has run (``recipes/an4/local/compare_strategies.sh``:
``exp/an4_2l_<strategy>/train_summary.json``), its per-epoch dev loss and WER are used
as they are, against the cumulative training time of the epochs. Otherwise each
strategy trains the demo model with 2 learners for a few epochs on the data dir
(the first 3/4 of its utterances; the rest is the held-out set) through
:mod:`asrkit.bench.strategy_worker`. The time to reach a target loss can be read off
the plot; the table reports the time to the lowest loss all strategies reach.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from asrkit.bench.strategies import run_workers

STRATEGIES = {
    "sync": ("sync", "fixed"),
    "adpsgd-fixed": ("adpsgd", "fixed"),
    "adpsgd-random": ("adpsgd", "random"),
    "delay-by-one": ("delay_by_one", "fixed"),
    "hybrid": ("hybrid", "fixed"),
}


def _curves_from_recipe(exp_root: Path) -> dict[str, list[dict]] | None:
    curves = {}
    for name in STRATEGIES:
        summary = exp_root / f"an4_2l_{name}" / "train_summary.json"
        if not summary.is_file():
            return None
        curves[name] = json.loads(summary.read_text())["history"]
    return curves


def bench_convergence(
    data_dir: str | Path, *, exp_root: str | Path = "recipes/an4/exp", epochs: int = 4, quick: bool = False
) -> dict:
    """Per strategy: ``[(seconds, dev loss, dev WER)]`` by epoch, and the time each needs
    to reach the best loss that every strategy reaches."""
    curves = None if quick else _curves_from_recipe(Path(exp_root))
    source = f"{exp_root}/an4_2l_*/train_summary.json (compare_strategies.sh)"
    if curves is None:
        source = f"short runs on {data_dir}"
        curves = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, (strategy, pattern) in STRATEGIES.items():
                history = run_workers(
                    Path(tmp),
                    Path(data_dir),
                    name=name,
                    learners=2,
                    strategy=strategy,
                    pattern=pattern,
                    straggler="none",
                    utterances=0,
                    epochs=1 if quick else epochs,
                    held_out=True,
                )["history"]
                curves[name] = history
    points = {}
    for name, history in curves.items():
        elapsed, rows = 0.0, []
        for h in history:
            elapsed += h["seconds"]
            rows.append([round(elapsed, 1), round(h["loss"], 4), round(h.get("wer", float("nan")), 2)])
        points[name] = rows
    target = max(min(r[1] for r in rows) for rows in points.values())
    reach = {name: next(r[0] for r in rows if r[1] <= target) for name, rows in points.items()}
    return {"source": source, "target_loss": round(target, 4), "seconds_to_target": reach, "curves": points}
