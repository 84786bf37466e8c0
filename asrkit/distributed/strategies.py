"""The strategy registry: ``strategy.name`` -> the hooks that plug into the trainer."""

from __future__ import annotations

from collections.abc import Callable

from asrkit.distributed.config import StrategyConfig
from asrkit.distributed.launch import DistContext
from asrkit.distributed.sync import SyncHooks
from asrkit.errors import ConfigError
from asrkit.training.trainer import TrainHooks

STRATEGIES: dict[str, Callable[[StrategyConfig, DistContext], TrainHooks]] = {
    "single": lambda cfg, ctx: TrainHooks(),
    "sync": lambda cfg, ctx: SyncHooks(ctx),
}


def build_hooks(cfg: StrategyConfig, ctx: DistContext) -> TrainHooks:
    if cfg.name not in STRATEGIES:
        raise ConfigError(f"strategy.name={cfg.name!r} is unknown; choose one of {sorted(STRATEGIES)}")
    return STRATEGIES[cfg.name](cfg, ctx)
