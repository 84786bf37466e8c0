"""Every scored decoding under an experiment root in one table (``asrkit results``).

Kaldi's ``utils/best_wer.sh`` over ``exp/*/decode*`` and ESPnet's ``show_asr_result.sh`` in
spirit. A decoding stage leaves ``<folder>/scoring/wer`` (its first line Kaldi's ``%WER``
line) for each set it scored, where ``<folder>`` is ``decode_<set>`` (greedy),
``decode_<method>_<set>`` (``beam``, ``beam_lm``, ``hybrid``, ``combined``, ...) or
``gmm/<system>/decode_<set>`` (the GMM systems), with the weights it was decoded at in
``<folder>/setting`` and, in the folder of the set the weights were tuned on, Kaldi's
``best_wer``. The experiment's ``config.yaml`` names its sets, which tells the set apart
from the method in a folder's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from asrkit.errors import DataError
from asrkit.scoring.wer import BEST_WER_FILE


@dataclass(frozen=True)
class ResultRow:
    """One scored set of one decoding."""

    experiment: str  # the experiment dir, relative to the root
    system: str  # e.g. "greedy", "beam_lm", "hybrid", "gmm tri3"
    dataset: str
    wer: float
    counts: str  # "[ 52 / 773, 10 ins, 0 del, 42 sub ]"
    setting: str  # the weights it was decoded at ("" for none)
    tuned_here: bool  # the weights were picked on this set
    source: str  # the wer file, relative to the root


def _sets(exp_dir: Path) -> list[str]:
    """The set names the experiment's config mentions, longest first."""
    config = exp_dir / "config.yaml"
    names: set[str] = set()
    if config.is_file():
        try:
            cfg = yaml.safe_load(config.read_text()) or {}
        except yaml.YAMLError:
            cfg = {}
        data, decode = cfg.get("data") or {}, cfg.get("decode") or {}
        for value in (data.get("train_set"), data.get("dev_set"), decode.get("tune_set")):
            if isinstance(value, str) and value:
                names.add(value)
        for key in ("test_sets", "sets"):
            for source in (data.get(key), decode.get(key)):
                if isinstance(source, list):
                    names.update(str(v) for v in source)
    return sorted(names, key=len, reverse=True)


def _method_and_set(folder: str, sets: list[str]) -> tuple[str, str]:
    """``decode_beam_lm_train_dev`` -> (``beam_lm``, ``train_dev``) given the set names."""
    rest = folder.removeprefix("decode_")
    for name in sets:
        if rest == name:
            return "", name
        if rest.endswith(f"_{name}"):
            return rest[: -len(name) - 1], name
    method, _, name = rest.rpartition("_")  # a set the config does not name: its last word
    return method, name or rest


def _experiment_of(root: Path, wer_file: Path) -> Path:
    """The nearest folder above ``wer_file`` holding ``config.yaml`` (the experiment), else
    the first folder under ``root``."""
    for parent in wer_file.parents:
        if parent == root.parent:
            break
        if (parent / "config.yaml").is_file():
            return parent
    relative = wer_file.relative_to(root)
    return root / relative.parts[0] if len(relative.parts) > 3 else root


def collect_results(root: str | Path) -> list[ResultRow]:
    """Every ``scoring/wer`` under ``root`` (an experiment root such as ``recipes/an4/exp``, or
    one experiment dir), sorted by experiment, set and WER.

    Raises:
        DataError: ``root`` is not a directory or holds no scored decoding.
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: not a directory; give an experiment root such as recipes/an4/exp")
    rows: list[ResultRow] = []
    for wer_file in sorted(root.rglob("scoring/wer")):
        folder = wer_file.parent.parent
        if not folder.name.startswith("decode") or "previous" in folder.relative_to(root).parts:
            continue  # a model kept aside by a rerun (previous/) is not this experiment's
        first = wer_file.read_text(encoding="utf-8", errors="replace").splitlines()[:1]
        if not first or not first[0].startswith("%WER "):
            continue
        wer, _, counts = first[0].removeprefix("%WER ").partition(" ")
        exp_dir = _experiment_of(root, wer_file)
        method, dataset = _method_and_set(folder.name, _sets(exp_dir))
        inside = folder.parent.relative_to(exp_dir).parts
        if inside and inside[0] == "gmm":  # gmm/<system>/decode_<set>
            system = " ".join(("gmm", *inside[1:]))
        else:
            system = method or "greedy"
        setting = folder / "setting"
        rows.append(
            ResultRow(
                experiment=exp_dir.relative_to(root).as_posix() if exp_dir != root else root.name,
                system=system,
                dataset=dataset,
                wer=float(wer),
                counts=counts.strip(),
                setting=setting.read_text().strip() if setting.is_file() else "",
                tuned_here=(folder / BEST_WER_FILE).is_file(),
                source=wer_file.relative_to(root).as_posix(),
            )
        )
    if not rows:
        raise DataError(
            f"no scored decodings under {root}: run a recipe's decode stage first (or give its exp dir)"
        )
    return sorted(rows, key=lambda r: (r.experiment, r.dataset, r.wer, r.system))


def format_results(rows: list[ResultRow]) -> str:
    """A plain-text table, one block per experiment; the best WER of each set marked ``*``
    and the set the weights were tuned on marked ``(tuned)``."""
    best: dict[tuple[str, str], float] = {}
    for row in rows:
        key = (row.experiment, row.dataset)
        best[key] = min(best.get(key, row.wer), row.wer)
    system_w = max(len(r.system) for r in rows)
    set_w = max(len(r.dataset) for r in rows)
    out: list[str] = []
    current = None
    for row in rows:
        if row.experiment != current:
            if current is not None:
                out.append("")
            out.append(row.experiment)
            current = row.experiment
        mark = "*" if row.wer == best[(row.experiment, row.dataset)] else " "
        note = "  ".join(x for x in (row.setting, "(tuned)" if row.tuned_here else "", row.source) if x)
        out.append(
            f"  {row.dataset:<{set_w}}  {row.system:<{system_w}}  {mark}{row.wer:7.2f}%  {row.counts}  {note}"
        )
    return "\n".join(out) + "\n"
