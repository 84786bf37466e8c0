"""A study's records on disk, read with checks: a damaged file is one line naming it, and
a run counts as finished only when its records are whole and were made by the plan's
settings for that run.

A run's dir holds ``run.json`` (what the plan asked: its overrides and learning rate),
``sim.json``, ``train_summary.json`` and ``learners.json`` (what the simulation wrote).
A run whose training diverged has ``run.json`` (``"diverged": true``) and
``diverged.json`` only. ``run.json`` is written last, once the simulation has finished (and, in a plan that
decodes, ``decode.json`` once the model is decoded: :mod:`asrkit.study.decode`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from asrkit.errors import DataError

__all__ = ["DIVERGED_FILE", "RUN_FILES", "expected_record", "read_record", "run_state"]

#: The files a finished run has (``learners.json`` is optional: a single learner has none).
RUN_FILES = ("run.json", "sim.json", "train_summary.json")
#: A run whose training diverged (its loss not a number) has this record instead of the
#: simulation's: the step and the message; ``run.json`` says ``diverged``.
DIVERGED_FILE = "diverged.json"
#: What ``run.json`` must agree on with the plan for the run to count as the plan's.
_COMPARED = ("overrides", "lr")


def read_record(path: Path) -> Any:
    """The JSON in ``path``; a missing or damaged file raises a one-line DataError naming it."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise DataError(f"{path}: damaged ({type(err).__name__}: {err})") from None


def expected_record(run: Any, overrides: list[str], lr: float, *, decoded: bool = False) -> dict[str, Any]:
    """The ``run.json`` the plan's run makes (plain JSON data); ``decoded``: the run's
    model is decoded too (its ``decode.json`` belongs to a finished run)."""
    from dataclasses import asdict

    record = {**asdict(run), "name": run.name, "overrides": list(overrides), "lr": lr}
    if decoded:
        record["decoded"] = True
    return json.loads(json.dumps(record))


def run_state(where: Path, expected: dict[str, Any]) -> tuple[str, str]:
    """``("finished", "")``, ``("unfinished", why)`` (absent or damaged records: run it
    again) or ``("other", what differs)`` (a finished run made with other settings)."""
    if not (where / "run.json").is_file():
        return "unfinished", "" if not where.exists() else f"{where / 'run.json'}: missing"
    needed: tuple[str, ...] = (*RUN_FILES, "decode.json") if expected.get("decoded") else RUN_FILES
    try:
        first = read_record(where / "run.json")
        if isinstance(first, dict) and first.get("diverged"):
            needed = ("run.json", DIVERGED_FILE)
        records = {name: read_record(where / name) for name in needed}
        summary = records.get("train_summary.json", {"history": []})
        if not isinstance(summary, dict) or "history" not in summary:
            raise DataError(f"{where / 'train_summary.json'}: damaged (no history)")
    except DataError as err:
        return "unfinished", str(err)
    theirs = records["run.json"]
    differs = [k for k in _COMPARED if not isinstance(theirs, dict) or theirs.get(k) != expected.get(k)]
    if differs:
        shown = "; ".join(
            f"{k}: {theirs.get(k) if isinstance(theirs, dict) else '?'} there, {expected.get(k)} here"
            for k in differs
        )
        return "other", shown
    return "finished", ""
