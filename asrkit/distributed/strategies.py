"""The strategy registry: ``strategy.name`` -> the hooks that plug into the trainer."""

from __future__ import annotations

from collections.abc import Callable

from asrkit.distributed.adpsgd import AdpsgdHooks
from asrkit.distributed.config import StrategyConfig
from asrkit.distributed.delay_by_one import DelayByOneHooks
from asrkit.distributed.hybrid import HybridHooks
from asrkit.distributed.launch import DistContext
from asrkit.distributed.sync import SyncHooks
from asrkit.errors import ConfigError
from asrkit.training.trainer import TrainHooks

STRATEGIES: dict[str, Callable[[StrategyConfig, DistContext, int], TrainHooks]] = {
    "single": lambda cfg, ctx, seed: TrainHooks(),
    "sync": lambda cfg, ctx, seed: SyncHooks(cfg, ctx, seed=seed),
    "adpsgd": lambda cfg, ctx, seed: AdpsgdHooks(cfg, ctx, seed=seed),
    "delay_by_one": lambda cfg, ctx, seed: DelayByOneHooks(cfg, ctx, seed=seed),
    "hybrid": lambda cfg, ctx, seed: HybridHooks(cfg, ctx, seed=seed),
}


def build_hooks(cfg: StrategyConfig, ctx: DistContext, *, seed: int = 1) -> TrainHooks:
    if cfg.name not in STRATEGIES:
        raise ConfigError(f"strategy.name={cfg.name!r} is unknown; choose one of {sorted(STRATEGIES)}")
    if ctx.world_size == 1 and cfg.name != "single":
        return TrainHooks()  # one learner is a plain process, whatever the strategy
    return STRATEGIES[cfg.name](cfg, ctx, seed)
