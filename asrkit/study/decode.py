"""Decode a study run's final model as the hybrid recipe's stage 7 does: the run's
``model.pt`` (the consensus model of the averaging strategies) scored against the priors
of the experiment's alignments and decoded through the experiment's HCLG, the LM weight
and word penalty swept on the dev set (the only set decoded: the study's measure; the
test sets stay out of its choices).

The run dir stands in for the experiment dir (its ``decode_hybrid_<set>/`` go there); the
graph, the transition model and the alignments the priors come from stay the experiment's.
``decode.json`` sums it up: each set's WER line and word error rate, the pair chosen and
the grid it was chosen from, and what the decoding took (``seconds`` of wall time,
``cpu_s`` of processor time).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any

from asrkit.config import AsrkitConfig
from asrkit.data.io import atomic_write
from asrkit.errors import ConfigError, DataError
from asrkit.gmm.config import WfstConfig
from asrkit.progress import cpu_seconds

__all__ = ["DECODE_FILE", "decode_grid", "decode_run", "read_wer_line"]

#: A decoded run's summary, written last by :func:`decode_run`.
DECODE_FILE = "decode.json"

_WER = re.compile(r"%WER\s+([0-9.]+)\s+\[\s*(\d+)\s*/\s*(\d+)")


def decode_grid(wfst: WfstConfig) -> dict[str, Any]:
    """What decoding with ``wfst``'s settings is (``decode.json``'s ``grid``): the LM weights
    and word penalties it sweeps and the lattice search's beams, which decide the lattice
    swept."""
    return {
        "lm_weights": [float(w) for w in wfst.lm_weights],
        "word_penalties": [float(p) for p in wfst.word_penalties],
        "beam": float(wfst.beam),
        "lattice_beam": float(wfst.lattice_beam),
    }


def read_wer_line(line: str) -> tuple[float, int, int]:
    """``(WER %, errors, reference words)`` of a Kaldi ``%WER`` line."""
    found = _WER.search(line)
    if found is None:
        raise DataError(f"not a Kaldi %WER line: {line!r}")
    return float(found.group(1)), int(found.group(2)), int(found.group(3))


def decode_run(cfg: AsrkitConfig, run_dir: Path) -> dict[str, Any]:
    """Decode ``run_dir/model.pt`` through ``cfg``'s experiment's HCLG (see the module);
    writes and returns the ``decode.json`` record."""
    from asrkit.stages.common import decode_targets
    from asrkit.stages.hmm import gmm_dir, hybrid_decode, system_names
    from asrkit.stages.registry import StageContext

    if cfg.pipeline != "hybrid" or cfg.objective != "ce":
        raise ConfigError(
            f"decoding study runs through HCLG needs a hybrid CE experiment (pipeline={cfg.pipeline}, "
            f"objective={cfg.objective}); give the plan decode=False for other models"
        )
    experiment = StageContext(
        cfg=cfg, data_root=Path(cfg.data_root), feats_root=Path(cfg.feats_root), exp_dir=Path(cfg.exp_dir)
    )
    root = gmm_dir(experiment)
    graph = Path(cfg.wfst.graph) if cfg.wfst.graph else root / system_names(experiment)[-1] / "graph"
    if not (graph / "HCLG.fst").is_file():
        raise DataError(
            f"{graph}/HCLG.fst: missing; run the experiment's stage 5 (gmm_decode) before decoding study runs"
        )
    align = dataclasses.replace(
        cfg.align,
        train=cfg.align.train or str(root / f"ali_{cfg.data.train_set}"),
        dev=cfg.align.dev or str(root / f"ali_{cfg.data.dev_set}"),
    )
    wfst = dataclasses.replace(cfg.wfst, graph=str(graph), nj=1)
    # The dev set only: the study's measure, tuned on itself as every run is alike; the
    # test sets stay out of the study's choices.
    decode = dataclasses.replace(cfg.decode, model="model.pt", sets=[cfg.data.dev_set])
    run_cfg = dataclasses.replace(cfg, align=align, wfst=wfst, decode=decode)
    ctx = dataclasses.replace(experiment, cfg=run_cfg, exp_dir=run_dir)
    (run_dir / DECODE_FILE).unlink(missing_ok=True)
    began, began_cpu = time.monotonic(), cpu_seconds()
    hybrid_decode(ctx)
    seconds, cpu_s = time.monotonic() - began, cpu_seconds() - began_cpu
    sets: dict[str, Any] = {}
    for name, _ in decode_targets(ctx):
        folder = run_dir / f"decode_hybrid_{name}"
        line = (folder / "scoring" / "wer").read_text().splitlines()[0]
        wer, errors, words = read_wer_line(line)
        sets[name] = {"wer": wer, "errors": errors, "words": words, "line": line}
        setting = (folder / "setting").read_text().strip()
    record = {
        "graph": str(graph),
        "tuned_on": cfg.decode.tune_set or cfg.data.dev_set,
        "setting": setting,
        "grid": decode_grid(cfg.wfst),
        "sets": sets,
        "seconds": round(seconds, 3),
        "cpu_s": round(cpu_s, 3),
    }
    atomic_write(run_dir / DECODE_FILE, json.dumps(record, indent=2) + "\n")
    return record
