"""A study's records on disk, read with checks: a damaged file is one line naming it, and
a run counts as finished only when its records are whole and were made by the plan's
settings for that run.

A run's dir holds ``run.json`` (what the plan asked: its overrides and learning rate),
``sim.json``, ``train_summary.json`` and ``learners.json`` (what the simulation wrote).
A run whose training diverged has ``run.json`` (``"diverged": true``) and
``diverged.json`` only. ``run.json`` is written last, once the simulation has finished (and, in a plan that
decodes, ``decode.json`` once the model is decoded: :mod:`asrkit.study.decode`).

``run.json`` also holds the fingerprint of the experiment's files the run trained and
decoded with (``inputs``: its alignments, its graph; :func:`inputs_fingerprint`). Seen in
the study: the experiment's GMM stage ran again with newer code between sittings, and
runs trained on the old alignments still counted as finished beside runs on the new ones
(the same SYNC run's first dev loss 3.160 against 3.131). A run made on other inputs, or
before runs recorded theirs, is done again.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from asrkit.errors import DataError

__all__ = [
    "DIVERGED_FILE",
    "RUN_FILES",
    "TRAINED_FILE",
    "expected_record",
    "inputs_fingerprint",
    "read_record",
    "run_state",
]

#: The files a finished run has (``learners.json`` is optional: a single learner has none).
RUN_FILES = ("run.json", "sim.json", "train_summary.json")
#: A run whose training diverged (its loss not a number) has this record instead of the
#: simulation's: the step and the message; ``run.json`` says ``diverged``.
DIVERGED_FILE = "diverged.json"
#: A run trained and not yet decoded has this record (``run.json``'s, written before the
#: decoding; ``run.json`` itself comes only once the decoding is back): stopped during its
#: first decoding, the run's model is decoded next time, not trained again.
TRAINED_FILE = "trained.json"
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


def inputs_fingerprint(files: Iterable[Path]) -> str:
    """A short hash of ``files``' names and contents (``.gz`` files decompressed, so a
    header's time stamp does not count; a missing file counts as missing). A file is named
    by its folder and name only (``ali_train/ali.1.gz``), so a study dir that moves keeps
    its fingerprints."""
    sha = hashlib.sha256()
    for path in sorted(Path(f) for f in files):
        sha.update("/".join(path.parts[-2:]).encode() + b"\0")
        try:
            data = path.read_bytes()
            sha.update(gzip.decompress(data) if path.suffix == ".gz" else data)
        except OSError:
            sha.update(b"\0missing")
        except (EOFError, gzip.BadGzipFile):
            sha.update(b"\0damaged")
    return sha.hexdigest()[:16]


def expected_record(
    run: Any,
    overrides: list[str],
    lr: float,
    *,
    decoded: bool = False,
    inputs: str | None = None,
    grid: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``run.json`` the plan's run makes (plain JSON data); ``decoded``: the run's
    model is decoded too (its ``decode.json`` belongs to a finished run); ``inputs``: the
    fingerprint of the experiment's files it uses (:func:`inputs_fingerprint`); ``grid``:
    the LM weights and word penalties its decoding sweeps and the search's beams."""
    from dataclasses import asdict

    record = {**asdict(run), "name": run.name, "overrides": list(overrides), "lr": lr}
    if decoded:
        record["decoded"] = True
    if inputs is not None:
        record["inputs"] = inputs
    if decoded and grid is not None:
        record["decode_grid"] = grid
    return json.loads(json.dumps(record))


def _default_grid() -> dict[str, Any]:
    """What a ``decode.json`` without a grid, or whose grid names no beams, was decoded at:
    ``wfst``'s defaults then. (The beams are right for every study decoded before grids
    named them, AN4's hybrid experiment's; for an experiment with other beams, such as
    ``so762_hybrid``'s 11 / 6, they would only make its runs decode again.)"""
    from asrkit.gmm.config import WfstConfig
    from asrkit.study.decode import decode_grid

    return decode_grid(WfstConfig())


def run_state(where: Path, expected: dict[str, Any]) -> tuple[str, str]:
    """``("finished", "")``, ``("unfinished", why)`` (absent or damaged records: run it
    again), ``("redecode", why)`` (trained as the plan asks and its ``model.pt`` is here, but
    decoded at another grid of LM weights and word penalties or with other beams, or not
    decoded: decode that model again) or ``("other", what differs)`` (a finished run made
    with other settings).
    A run that needs decoding again without its model (git does not keep it) is
    ``"unfinished"``: trained again."""
    state, why = _state(where, expected)
    if state == "redecode" and not (where / "model.pt").is_file():
        return "unfinished", f"{why}, and its model.pt is not here"
    return state, why


def _state(where: Path, expected: dict[str, Any]) -> tuple[str, str]:
    if not (where / "run.json").is_file():
        if expected.get("decoded") and (where / TRAINED_FILE).is_file():
            return _trained_state(where, expected)
        return "unfinished", "" if not where.exists() else f"{where / 'run.json'}: missing"
    needed: tuple[str, ...] = (*RUN_FILES, "decode.json") if expected.get("decoded") else RUN_FILES
    if "decode.json" in needed and not (where / "decode.json").exists():
        needed = RUN_FILES  # trained, its decoding stopped half-way: decode it (run_state)
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
    if "inputs" in expected and isinstance(theirs, dict) and theirs.get("inputs") != expected["inputs"]:
        return "unfinished", (
            f"{where / 'run.json'}: made on other inputs than the experiment's files now (its alignments "
            f"or graph: {theirs.get('inputs', 'not recorded')} there, {expected['inputs']} here)"
        )
    differs = _differs(theirs, expected)
    if differs:
        return "other", differs
    if expected.get("decoded") and "decode.json" not in records and not theirs.get("diverged"):
        return "redecode", f"{where / 'decode.json'}: missing"
    if "decode_grid" in expected and "decode.json" in records:
        decoded = records["decode.json"]
        recorded = decoded.get("grid", {}) if isinstance(decoded, dict) else None
        grid = {**_default_grid(), **recorded} if isinstance(recorded, dict) else None
        if grid != expected["decode_grid"]:
            return "redecode", (
                f"{where / 'decode.json'}: decoded at another LM weight x word penalty grid "
                "or with other beams"
            )
    return "finished", ""


def _differs(theirs: Any, expected: dict[str, Any]) -> str:
    """What of ``_COMPARED`` a run's record has otherwise than ``expected`` ("" if nothing)."""
    differs = [k for k in _COMPARED if not isinstance(theirs, dict) or theirs.get(k) != expected.get(k)]
    return "; ".join(
        f"{k}: {theirs.get(k) if isinstance(theirs, dict) else '?'} there, {expected.get(k)} here"
        for k in differs
    )


def _trained_state(where: Path, expected: dict[str, Any]) -> tuple[str, str]:
    """A run with ``trained.json`` and no ``run.json``: trained, stopped during its first
    decoding. ``"redecode"`` when it was trained as the plan asks on the same inputs and its
    records are whole, else ``"unfinished"`` (never finished, so never another run's to keep)."""
    try:
        theirs = read_record(where / TRAINED_FILE)
        summary = read_record(where / "train_summary.json")
        read_record(where / "sim.json")
        if not isinstance(summary, dict) or "history" not in summary:
            raise DataError(f"{where / 'train_summary.json'}: damaged (no history)")
    except DataError as err:
        return "unfinished", str(err)
    if not isinstance(theirs, dict) or theirs.get("inputs") != expected.get("inputs"):
        return "unfinished", f"{where / TRAINED_FILE}: trained on other inputs than the experiment's now"
    differs = _differs(theirs, expected)
    if differs:
        return "unfinished", f"{where / TRAINED_FILE}: trained with other settings ({differs})"
    return "redecode", f"{where / TRAINED_FILE}: trained, but stopped during its first decoding"
