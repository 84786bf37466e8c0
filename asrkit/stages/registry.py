"""The stage registry and runner (see :mod:`asrkit.stages`)."""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from asrkit.config import AsrkitConfig, to_object
from asrkit.data.io import atomic_write
from asrkit.errors import ConfigError

log = logging.getLogger("asrkit.stages")


@dataclass(frozen=True)
class StageContext:
    """What a stage gets: the typed config and the directories it works in."""

    cfg: AsrkitConfig
    data_root: Path
    feats_root: Path
    exp_dir: Path


@dataclass(frozen=True)
class Stage:
    number: int
    name: str
    description: str
    run: Callable[[StageContext], None]


STAGES: dict[int, Stage] = {}


def stage(number: int, name: str, description: str) -> Callable:
    """Register ``func(ctx)`` as recipe stage ``number``."""

    def add(func: Callable[[StageContext], None]) -> Callable[[StageContext], None]:
        if number in STAGES:
            raise RuntimeError(f"stage {number} registered twice ({STAGES[number].name}, {name})")
        STAGES[number] = Stage(number, name, description, func)
        return func

    return add


def describe_stages() -> str:
    return "\n".join(f"  {s.number:>2}  {s.name:<10} {s.description}"
                     for s in sorted(STAGES.values(), key=lambda s: s.number))


def run_stages(
    cfg: DictConfig, *, start: int, stop: int | None, command: Sequence[str]
) -> None:
    """Run every registered stage numbered ``start..stop`` (inclusive).

    Args:
        cfg: the composed config (:func:`asrkit.config.compose`).
        start, stop: stage range; ``stop=None`` runs to the last stage.
        command: the command line that started the run, saved verbatim.
    """
    last = max(STAGES)
    stop = last if stop is None else stop
    if start > stop:
        raise ConfigError(f"--stage {start} is after --stop-stage {stop}; swap them")
    selected = [STAGES[n] for n in sorted(STAGES) if start <= n <= stop]
    if not selected:
        raise ConfigError(f"no stage between {start} and {stop}; stages are:\n{describe_stages()}")
    typed = to_object(cfg)
    ctx = StageContext(
        cfg=typed,
        data_root=Path(typed.data_root),
        feats_root=Path(typed.feats_root),
        exp_dir=Path(typed.exp_dir),
    )
    ctx.exp_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(ctx.exp_dir / "config.yaml", OmegaConf.to_yaml(cfg))
    atomic_write(ctx.exp_dir / "command", shlex.join(command) + "\n")
    handler = logging.FileHandler(_log_file(ctx.exp_dir), encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    try:
        log.info("command: %s", shlex.join(command))
        log.info("experiment dir: %s (config saved as config.yaml)", ctx.exp_dir)
        for current in selected:
            log.info("stage %d (%s): start — %s", current.number, current.name,
                     current.description)
            began = time.monotonic()
            current.run(ctx)
            log.info("stage %d (%s): done in %.1f s", current.number, current.name,
                     time.monotonic() - began)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()


def _log_file(exp_dir: Path) -> Path:
    (exp_dir / "log").mkdir(parents=True, exist_ok=True)
    return exp_dir / "log" / "run.log"
