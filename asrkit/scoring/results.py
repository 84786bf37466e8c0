"""Every scored decoding under an experiment root in one table (``asrkit results``).

Kaldi's ``utils/best_wer.sh`` over ``exp/*/decode*`` and ESPnet's ``show_asr_result.sh`` in
spirit, reading what the decoding stages leave (:func:`asrkit.stages.common.tune_and_decode`):

- ``<folder>/scoring/wer`` for each set decoded (written by
  :func:`~asrkit.scoring.write_scoring_dir`; its first line Kaldi's ``%WER`` line), where
  ``<folder>`` is ``decode_<set>`` (greedy), ``decode_<method>_<set>`` (``beam``,
  ``beam_lm``, ``hybrid``, ``combined``), ``gmm/<system>/decode_<set>`` (the GMM systems)
  or ``gmm/<system>/decode_<set>.si`` (a SAT system's speaker-independent first pass);
- ``<folder>/setting``: the weights the set was decoded at (``lm_weight=8 word_penalty=-0.5``);
- in the folder of the set the weights were swept on (``decode.tune_set``, default the dev
  set): one ``wer_<w>_<s>`` per point of the sweep and Kaldi's ``best_wer`` (the best
  point's ``%WER`` line and its ``wer_<w>_<s>`` file). When the tune set was not among the
  decoded sets (``decode.sets``), ``best_wer`` is the only score of that set.

An experiment is the nearest folder holding ``config.yaml`` (a combination's members,
``member<i>/``, are experiments of their own); its config names the sets, which tells the
set apart from the method in a folder's name. Models a rerun kept aside in ``previous/``
are left out. Reads files only (no torch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from asrkit.errors import DataError
from asrkit.scoring.wer import BEST_WER_FILE

#: Where a rerun keeps the model it replaces until it finishes (the registry's
#: ``PREVIOUS_DIR``, not imported: the registry brings torch).
_PREVIOUS_DIR = "previous"
#: ``%WER 5.25 [ 31 / 591, 2 ins, 7 del, 22 sub ]`` (and, in ``best_wer``, the file after it).
_WER_LINE = re.compile(r"^%WER\s+([0-9.]+)\s+(\[\s*(\d+)\s*/\s*(\d+)[^\]]*\])\s*(\S*)")
#: A sweep point's file: ``wer_<lm weight>_<word score or penalty>``.
_SWEEP_FILE = re.compile(r"^wer_(-?[0-9.e+-]+)_(-?[0-9.e+-]+)$")


@dataclass(frozen=True)
class ResultRow:
    """One scored set of one decoding.

    Attributes:
        experiment: the experiment dir, relative to the root (the root's name when the root
            is the experiment).
        system: the decoder or GMM system: ``greedy``, ``beam``, ``beam_lm``, ``hybrid``,
            ``combined``, ``gmm tri3``, ``gmm tri3.si``.
        dataset: the set's name.
        wer: percent WER.
        errors: substitutions + deletions + insertions.
        words: reference words.
        counts: Kaldi's bracket, ``[ 52 / 773, 10 ins, 0 del, 42 sub ]``.
        setting: the weights it was decoded at (``""``: none, as greedy).
        tuned_on: the set those weights were picked on (``""``: no sweep found).
        sweep: points of the sweep, when ``tuned_on`` is this set (else 0).
        source: the file the score was read from, relative to the root.
    """

    experiment: str
    system: str
    dataset: str
    wer: float
    errors: int
    words: int
    counts: str
    setting: str
    tuned_on: str
    sweep: int
    source: str

    @property
    def tuned_here(self) -> bool:
        """The weights were picked on this set (its row is the best point of a sweep)."""
        return self.sweep > 0

    @property
    def from_sweep(self) -> bool:
        """The score is read from the sweep's ``best_wer`` (the set was not decoded on its own)."""
        return Path(self.source).name == BEST_WER_FILE


def _section(cfg: Any, key: str) -> dict[str, Any]:
    """``cfg[key]`` when both are mappings, else nothing (a damaged or foreign config)."""
    section = cfg.get(key) if isinstance(cfg, dict) else None
    return section if isinstance(section, dict) else {}


def _set_names(exp_dir: Path) -> list[str]:
    """The set names the experiment's ``config.yaml`` mentions, longest first (so that
    ``train_dev`` is tried before ``dev``)."""
    config = exp_dir / "config.yaml"
    names: set[str] = set()
    if config.is_file():
        try:
            cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError):
            cfg = None  # a damaged config: the folder names alone
        data, decode = _section(cfg, "data"), _section(cfg, "decode")
        for value in (data.get("train_set"), data.get("dev_set"), decode.get("tune_set")):
            if isinstance(value, str) and value:
                names.add(Path(value).name)
        for entries in (data.get("test_sets"), decode.get("sets")):
            if isinstance(entries, list):
                # A decode.sets entry may be a data dir's path: the stage names it by its folder.
                names.update(Path(str(entry)).name for entry in entries if entry)
    return sorted(names, key=len, reverse=True)


def _method_set_suffix(folder: str, sets: list[str]) -> tuple[str, str, str]:
    """``decode_beam_lm_train_dev`` -> (``beam_lm``, ``train_dev``, ``""``) and
    ``decode_test.si`` -> (``""``, ``test``, ``si``), given the experiment's set names."""
    rest = folder.removeprefix("decode_")
    candidates = [(rest, "")]
    if "." in rest:
        stem, _, suffix = rest.rpartition(".")
        candidates.append((stem, suffix))
    for name_part, suffix in candidates:
        for name in sets:
            if name_part == name:
                return "", name, suffix
            if name_part.endswith(f"_{name}"):
                return name_part[: -len(name) - 1], name, suffix
    # A set the config does not name: its last word.
    stem, suffix = candidates[-1]
    method, _, name = stem.rpartition("_")
    return method, name, suffix


def _experiment_of(root: Path, folder: Path) -> Path:
    """The nearest folder from ``folder`` up to ``root`` holding ``config.yaml`` (the
    experiment), else the first folder under ``root`` (``root`` for a decoding right in it)."""
    for parent in folder.parents:
        if (parent / "config.yaml").is_file():
            return parent
        if parent == root:
            break
    relative = folder.relative_to(root)
    return root / relative.parts[0] if len(relative.parts) > 1 else root


def _score_of(folder: Path) -> tuple[re.Match[str], Path] | None:
    """The ``%WER`` line of ``folder``'s ``scoring/wer``, else of its ``best_wer`` (a tune set
    that was not decoded on its own), and its file; None when neither holds one."""
    for path in (folder / "scoring" / "wer", folder / BEST_WER_FILE):
        if path.is_file():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            found = _WER_LINE.match(lines[0]) if lines else None
            if found is not None:
                return found, path
    return None


def _row(root: Path, folder: Path) -> ResultRow | None:
    """The row of decode folder ``folder`` (None: it holds no %WER line)."""
    scored = _score_of(folder)
    if scored is None:
        return None
    found, path = scored
    exp_dir = _experiment_of(root, folder)
    method, dataset, suffix = _method_set_suffix(folder.name, _set_names(exp_dir))
    inside = folder.parent.relative_to(exp_dir).parts
    system = " ".join(("gmm", *inside[1:])) if inside[:1] == ("gmm",) else method or "greedy"
    setting_file = folder / "setting"
    setting = setting_file.read_text(encoding="utf-8").strip() if setting_file.is_file() else ""
    if not setting and path.name == BEST_WER_FILE:
        setting = Path(found.group(5)).name  # the best point's wer_<w>_<s>
    sweep = 0
    if (folder / BEST_WER_FILE).is_file():
        sweep = sum(1 for f in folder.iterdir() if _SWEEP_FILE.match(f.name))
    return ResultRow(
        experiment=exp_dir.relative_to(root).as_posix() if exp_dir != root else root.resolve().name,
        system=f"{system}.{suffix}" if suffix else system,
        dataset=dataset,
        wer=float(found.group(1)),
        errors=int(found.group(3)),
        words=int(found.group(4)),
        counts=found.group(2),
        setting=setting,
        tuned_on=dataset if sweep else "",
        sweep=sweep,
        source=path.relative_to(root).as_posix(),
    )


def _nist_rows(root: Path, folder: Path, row: ResultRow) -> list[ResultRow]:
    """A set scored against an STM as hubscr does (``scoring_nist/wer``): a row per line, its
    set ``<set>:all`` or ``<set>:<subset>`` (eval2000's ``swbd`` and ``callhm``)."""
    path = folder / "scoring_nist" / "wer"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        found = _WER_LINE.match(line)
        name = line.rsplit("]", 1)[-1].split()
        if found is None or not name:
            continue
        out.append(
            replace(
                row,
                dataset=f"{row.dataset}:{name[0]}",
                wer=float(found.group(1)),
                errors=int(found.group(3)),
                words=int(found.group(4)),
                counts=found.group(2),
                source=path.relative_to(root).as_posix(),
            )
        )
    return out


def collect_results(root: str | Path) -> list[ResultRow]:
    """Every scored decoding under ``root``, sorted by experiment, set, WER and system.

    Args:
        root: an experiment root such as ``recipes/an4/exp``, or one experiment dir.

    Returns:
        One row per decoded (or tuned-on) set of each decoder and GMM system; a row decoded
        at weights swept on another set names that set in ``tuned_on``.

    Raises:
        DataError: ``root`` is not a directory or holds no scored decoding.
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: not a directory; give an experiment root such as recipes/an4/exp")
    folders = {path.parent.parent for path in root.rglob("scoring/wer")}
    folders.update(path.parent for path in root.rglob(BEST_WER_FILE))
    rows = []
    for folder in sorted(folders):
        if not folder.name.startswith("decode_") or _PREVIOUS_DIR in folder.relative_to(root).parts:
            continue
        row = _row(root, folder)
        if row is not None:
            rows.append(row)
            rows += _nist_rows(root, folder, row)
    if not rows:
        raise DataError(
            f"no scored decodings under {root}: run a recipe's decode stage first (or give its exp dir)"
        )
    # Every set of a decoder is decoded at the point its sweep picked: the other sets name the
    # set it was picked on, and a set scored only by its sweep (best_wer) gets their setting.
    tuned_on = {(r.experiment, r.system): r.dataset for r in rows if r.tuned_here}
    decoded_at = {(r.experiment, r.system): r.setting for r in rows if r.setting and not r.from_sweep}
    for i, row in enumerate(rows):
        key = (row.experiment, row.system)
        rows[i] = replace(
            row,
            tuned_on=row.tuned_on or tuned_on.get(key, ""),
            setting=decoded_at.get(key, row.setting) if row.from_sweep else row.setting,
        )
    return sorted(rows, key=lambda r: (r.experiment, r.dataset, r.wer, r.system))


def format_results(rows: list[ResultRow]) -> str:
    """A plain-text table with a header, one row per scored set: experiment, set, system,
    ``%WER`` (``*`` on each experiment's best of the set), counts, the weights and where
    they were picked (``best of 64 here``: the row is a sweep's best point; ``tuned on
    train_dev``: decoded at the point picked there) and the file."""
    best: dict[tuple[str, str], float] = {}
    for row in rows:
        key = (row.experiment, row.dataset)
        best[key] = min(best.get(key, row.wer), row.wer)
    table = [("experiment", "set", "system", "%WER", "errors / words", "weights", "file")]
    for row in rows:
        mark = "*" if row.wer == best[(row.experiment, row.dataset)] else " "
        if row.tuned_here:
            where = f"best of {row.sweep} here"
        elif row.tuned_on:
            where = f"tuned on {row.tuned_on}"
        else:
            where = ""
        weights = f"{row.setting} ({where})" if row.setting and where else row.setting or where
        table.append(
            (row.experiment, row.dataset, row.system, f"{mark}{row.wer:.2f}", row.counts, weights, row.source)
        )
    widths = [max(len(line[k]) for line in table) for k in range(len(table[0]))]
    wer_column = 3
    return "".join(
        "  ".join(
            cell.rjust(width) if k == wer_column else cell.ljust(width)
            for k, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        + "\n"
        for line in table
    )
