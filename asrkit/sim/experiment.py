"""Simulate an experiment's training as ``asrkit simulate`` does: the experiment's data
read into memory once, the step cost read from its file or measured and saved there, and
the run written to its output dir.

A finished run in the output dir is the answer only to the same question: ``sim.json``
records the settings that shape the result (:func:`run_settings`) and a rerun with
other settings is refused with the first differences named (``--force`` replaces it). The
default output dir's name ends with a hash of those settings, so runs that differ in any
of them (a bandwidth, a straggler, a learning rate) land side by side. A step cost is
keyed the same way on what changes a step's compute (:func:`step_cost_settings`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from asrkit.config import HASHED_WHEN_CHANGED, NOT_OUTPUT_SETTINGS, AsrkitConfig, differences, flatten
from asrkit.errors import ConfigError, DataError
from asrkit.sim.network import Network

if TYPE_CHECKING:
    from asrkit.learner import LearnerParts
    from asrkit.sim.run import StepCost

__all__ = ["default_out", "run_settings", "simulate_experiment", "step_cost_settings"]

log = logging.getLogger(__name__)

#: Config sections that shape a simulated run's result (less ``NOT_OUTPUT_SETTINGS``).
RUN_SECTIONS = (
    "seed",
    "objective",
    "pipeline",
    "data",
    "features",
    "tokenizer",
    "model",
    "optim",
    "schedule",
    "specaug",
    "train",
    "strategy",
    "align",
)
#: What changes one step's compute time: the model and its input and output sizes, the
#: objective, the optimizer's kind, masking and chunking, the threads.
STEP_COST_KEYS = (
    "objective",
    "pipeline",
    "features",
    "tokenizer",
    "model",
    "optim.name",
    "optim.fused",
    "specaug",
    "train.num_threads",
    "train.chunk_frames",
    "train.chunk_context",
    "train.clip_grad_norm",
    "train.precision",
)
#: Settings added after simulated runs and step costs were recorded: named in their
#: settings only where they differ from these defaults, so the records still answer.
ADDED_SETTINGS: dict[str, Any] = {k: HASHED_WHEN_CHANGED[k] for k in ("train.precision",)}


def _without_added_defaults(flat: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flat.items() if k not in ADDED_SETTINGS or v != ADDED_SETTINGS[k]}


def _plain(cfg: AsrkitConfig) -> dict[str, Any]:
    plain = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    assert isinstance(plain, dict)
    return {str(k): v for k, v in plain.items()}


def run_settings(cfg: AsrkitConfig, network: Network, *, comm_ratio: float | None = None) -> dict[str, Any]:
    """The settings a simulated run's result depends on, flat (``strategy.learners``:
    value), with the network (its ``bytes_scale`` and the ``comm_ratio`` only when they
    change anything); the step cost is keyed separately and recorded beside."""
    flat = _without_added_defaults(flatten({key: _plain(cfg)[key] for key in RUN_SECTIONS}))
    chosen = {k: v for k, v in flat.items() if k not in NOT_OUTPUT_SETTINGS}
    chosen.update(
        {"network.bandwidth_gbps": network.bandwidth_gbps, "network.latency_us": network.latency_us}
    )
    if network.bytes_scale != 1.0:
        chosen["network.bytes_scale"] = network.bytes_scale
    if comm_ratio is not None:
        chosen["network.comm_ratio"] = comm_ratio
    return dict(sorted(chosen.items()))


def mean_step_compute_s(cfg: AsrkitConfig, parts: LearnerParts, cost: StepCost) -> float:
    """One learner's mean training step of computation: the step cost at its share of the
    batch caps filled with utterances of the training set's mean length (unpadded), the
    denominator of a communication ratio."""
    from asrkit.sim.calibrate import learner_batch_caps

    max_batch, max_frames = learner_batch_caps(cfg)
    mean_frames = float(parts.train_set.lengths.mean())
    return cost.step_s + cost.frame_s * min(max_frames, max_batch * mean_frames)


def network_at(
    network: Network, comm_ratio: float | None, cfg: AsrkitConfig, parts: LearnerParts, cost: StepCost
) -> Network:
    """``network``, its messages scaled so that one exchange of the whole model takes
    ``comm_ratio`` x one learner's mean step of computation (None: as it is)."""
    if comm_ratio is None:
        return network
    model_bytes = sum(p.numel() * p.element_size() for p in parts.new_model().parameters())
    try:
        return network.at_ratio(
            comm_ratio, model_bytes=model_bytes, step_s=mean_step_compute_s(cfg, parts, cost)
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None


def step_cost_settings(cfg: AsrkitConfig) -> dict[str, Any]:
    """What a step cost measured for ``cfg`` depends on: :data:`STEP_COST_KEYS` and one
    learner's batch caps."""
    from asrkit.sim.calibrate import learner_batch_caps

    flat = _without_added_defaults(flatten(_plain(cfg)))
    chosen = {k: v for k, v in flat.items() if any(k == p or k.startswith(p + ".") for p in STEP_COST_KEYS)}
    max_batch, max_frames = learner_batch_caps(cfg)
    chosen.update({"learner.max_batch": max_batch, "learner.max_frames": max_frames})
    return dict(sorted(chosen.items()))


def default_out(cfg: AsrkitConfig, network: Network, *, comm_ratio: float | None = None) -> Path:
    """``<exp_dir>/sim/<strategy>_n<learners>_<network>_seed<seed>_<settings hash>``."""
    from asrkit.sim.run import settings_digest

    digest = settings_digest(run_settings(cfg, network, comm_ratio=comm_ratio))[:8]
    name = f"{cfg.strategy.name}_n{cfg.strategy.learners}_{network.name}_seed{cfg.seed}_{digest}"
    return Path(cfg.exp_dir) / "sim" / name


def default_step_cost(cfg: AsrkitConfig) -> Path:
    """``<exp_dir>/sim/step_cost_b<batch>_f<frames>_<hash>.json``: one learner's batch caps,
    and a hash of :func:`step_cost_settings`."""
    from asrkit.sim.run import settings_digest

    settings = step_cost_settings(cfg)
    b, f = settings["learner.max_batch"], settings["learner.max_frames"]
    return Path(cfg.exp_dir) / "sim" / f"step_cost_b{b}_f{f}_{settings_digest(settings)[:8]}.json"


def _read_record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        return record
    except (OSError, ValueError) as err:
        raise DataError(
            f"{path}: unreadable ({type(err).__name__}: {err}); remove it or pass --force to simulate again"
        ) from None


def simulate_experiment(
    cfg: AsrkitConfig,
    *,
    network: Network,
    out: Path | None = None,
    step_cost: Path | None = None,
    force: bool = False,
    signals: bool = True,
    comm_ratio: float | None = None,
) -> tuple[Path, bool]:
    """Simulate ``cfg``'s training into ``out`` (default :func:`default_out`); returns the
    dir and whether it ran now (False: it had finished before and ``force`` is off).

    The step cost comes from ``step_cost`` (default :func:`default_step_cost`), measured
    and saved there when missing. ``sim.json`` is
    written last, so a run stopped half-way is simulated again from the start. ``signals``:
    take SIGINT and SIGTERM here (off in a process whose parent handles them).
    ``comm_ratio``: charge communication so that one whole-model exchange takes this many
    times one learner's mean step of computation (:func:`network_at`).
    """
    from asrkit.learner import prepare_learner
    from asrkit.sim.calibrate import load_or_measure
    from asrkit.sim.run import settings_digest, simulate
    from asrkit.training.stop import StopRequest

    exp_dir, data_root = Path(cfg.exp_dir), Path(cfg.data_root)
    if not (exp_dir / "tokenizer").is_dir():
        raise ConfigError(
            f"{exp_dir / 'tokenizer'} is missing: run the experiment's stages up to its tokenizer "
            "(and for CE its alignments) first, e.g. asrkit run --stop-stage 3 with the same overrides"
        )
    settings = run_settings(cfg, network, comm_ratio=comm_ratio)
    out = out or default_out(cfg, network, comm_ratio=comm_ratio)
    if (out / "sim.json").is_file() and not force:
        record = _read_record(out / "sim.json")
        theirs = record.get("settings")
        if record.get("settings_hash") != settings_digest(settings):
            what = differences(theirs, settings)[1] if isinstance(theirs, dict) else "it records no settings"
            raise ConfigError(
                f"{out} holds a finished simulation with other settings ({what}); give another "
                "--out to keep both, or --force to replace it"
            )
        log.info("%s: finished before (%.1f virtual s); --force simulates again", out, record["virtual_s"])
        return out, False
    cost_file = step_cost or default_step_cost(cfg)
    in_memory = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, in_memory=True, prefetch=0))
    # Ctrl-C and SIGTERM stop the measurement after its step and the simulation once each
    # learner's computation in hand ends: one line, exit 3, no thread left computing.
    stop = StopRequest()
    installed = signals and stop.install()
    try:
        parts = prepare_learner(in_memory, data_root=data_root, exp_dir=exp_dir, log_it=True)
        cost, measured = load_or_measure(cost_file, in_memory, parts, stop=stop)
        log.info(
            "step cost (%s %s): %.4f s + %.3g s per padded frame; forward without gradients %.2f of a step",
            "measured now, saved as" if measured else "from",
            cost_file,
            cost.step_s,
            cost.frame_s,
            cost.eval_fraction,
        )
        charged = network_at(network, comm_ratio, in_memory, parts, cost)
        if comm_ratio is not None:
            log.info(
                "communication at ratio %g: tensors charged as %.4g x their bytes on %s",
                comm_ratio,
                charged.bytes_scale,
                network.name,
            )
        out.mkdir(parents=True, exist_ok=True)
        (out / "sim.json").unlink(missing_ok=True)
        if not (out / "tokenizer").is_dir():
            shutil.copytree(exp_dir / "tokenizer", out / "tokenizer")
        simulate(
            in_memory,
            data_root=data_root,
            exp_dir=out,
            network=charged,
            cost=cost,
            parts=parts,
            stop=stop,
            settings=settings,
        )
    finally:
        if installed:
            stop.wind_down()
    return out, True
