"""Build a strategy's hooks from the registry (:data:`asrkit.distributed.config.STRATEGIES`)."""

from __future__ import annotations

import importlib

from asrkit.distributed.comm import Communicator, TorchCommunicator
from asrkit.distributed.config import STRATEGIES, StrategyConfig
from asrkit.distributed.launch import DistContext
from asrkit.errors import ConfigError
from asrkit.training.trainer import TrainHooks


def build_strategy(cfg: StrategyConfig, comm: Communicator, *, seed: int = 1) -> TrainHooks:
    """``cfg.name``'s hooks for the learner behind ``comm`` (the group of all learners)."""
    if cfg.name not in STRATEGIES:
        raise ConfigError(f"strategy.name={cfg.name!r} is unknown; choose one of {sorted(STRATEGIES)}")
    target = STRATEGIES[cfg.name].hooks
    if not target or comm.size == 1:
        return TrainHooks()  # one learner is a plain process, whatever the strategy
    module, _, name = target.partition(":")
    hooks = getattr(importlib.import_module(module), name)(cfg, comm, seed=seed)
    assert isinstance(hooks, TrainHooks)
    return hooks


def build_hooks(cfg: StrategyConfig, ctx: DistContext, *, seed: int = 1) -> TrainHooks:
    """The hooks of a learner started by torchrun (``ctx``), over torch.distributed."""
    if cfg.name not in STRATEGIES:
        raise ConfigError(f"strategy.name={cfg.name!r} is unknown; choose one of {sorted(STRATEGIES)}")
    if ctx.world_size == 1 or not STRATEGIES[cfg.name].hooks:
        return TrainHooks()
    return build_strategy(cfg, TorchCommunicator.world(device=ctx.device, timeout_s=cfg.timeout_s), seed=seed)
