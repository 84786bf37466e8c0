"""Simulate an experiment's training as ``asrkit simulate`` does: the experiment's data
read into memory once, the step cost read from its file or measured and saved there, and
the run written to its output dir (a finished run is left as it is)."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

from asrkit.config import AsrkitConfig
from asrkit.errors import ConfigError
from asrkit.sim.network import Network

__all__ = ["default_out", "simulate_experiment"]

log = logging.getLogger(__name__)


def default_out(cfg: AsrkitConfig, network: Network) -> Path:
    """``<exp_dir>/sim/<strategy>_n<learners>_<network>_seed<seed>``."""
    name = f"{cfg.strategy.name}_n{cfg.strategy.learners}_{network.name}_seed{cfg.seed}"
    return Path(cfg.exp_dir) / "sim" / name


def simulate_experiment(
    cfg: AsrkitConfig,
    *,
    network: Network,
    out: Path | None = None,
    step_cost: Path | None = None,
    force: bool = False,
) -> tuple[Path, bool]:
    """Simulate ``cfg``'s training into ``out`` (default :func:`default_out`); returns the
    dir and whether it ran now (False: it had finished before and ``force`` is off).

    The step cost comes from ``step_cost`` (default ``<exp_dir>/sim/step_cost_b<batch>_f<frames>.json``
    for one learner's batch caps), measured and saved there when missing. ``sim.json`` is
    written last, so a run stopped half-way is simulated again from the start.
    """
    from asrkit.learner import prepare_learner
    from asrkit.sim.calibrate import learner_batch_caps, load_or_measure
    from asrkit.sim.run import simulate

    exp_dir, data_root = Path(cfg.exp_dir), Path(cfg.data_root)
    if not (exp_dir / "tokenizer").is_dir():
        raise ConfigError(
            f"{exp_dir / 'tokenizer'} is missing: run the experiment's stages up to its tokenizer "
            "(and for CE its alignments) first, e.g. asrkit run --stop-stage 3 with the same overrides"
        )
    out = out or default_out(cfg, network)
    if (out / "sim.json").is_file() and not force:
        record = json.loads((out / "sim.json").read_text())
        log.info("%s: finished before (%.1f virtual s); --force simulates again", out, record["virtual_s"])
        return out, False
    caps = learner_batch_caps(cfg)
    cost_file = step_cost or exp_dir / "sim" / f"step_cost_b{caps[0]}_f{caps[1]}.json"
    in_memory = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, in_memory=True, prefetch=0))
    parts = prepare_learner(in_memory, data_root=data_root, exp_dir=exp_dir, log_it=True)
    cost, measured = load_or_measure(cost_file, in_memory, parts)
    log.info(
        "step cost (%s %s): %.4f s + %.3g s per padded frame; forward without gradients %.2f of a step",
        "measured now, saved as" if measured else "from",
        cost_file,
        cost.step_s,
        cost.frame_s,
        cost.eval_fraction,
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim.json").unlink(missing_ok=True)
    if not (out / "tokenizer").is_dir():
        shutil.copytree(exp_dir / "tokenizer", out / "tokenizer")
    simulate(in_memory, data_root=data_root, exp_dir=out, network=network, cost=cost, parts=parts)
    return out, True
