"""Build a strategy's hooks: :data:`HOOKS` maps each strategy's settings class (which
``strategy.name`` picks: :data:`asrkit.distributed.config.STRATEGIES`) to its hooks class."""

from __future__ import annotations

from asrkit.distributed.adpsgd import AdpsgdHooks
from asrkit.distributed.base import StrategyHooks
from asrkit.distributed.comm import Communicator, TorchCommunicator
from asrkit.distributed.config import (
    AdpsgdConfig,
    DelayByOneConfig,
    HybridConfig,
    StrategyConfig,
    SyncConfig,
)
from asrkit.distributed.delay_by_one import DelayByOneHooks
from asrkit.distributed.hybrid import HybridHooks
from asrkit.distributed.launch import DistContext
from asrkit.distributed.sync import SyncHooks
from asrkit.training.trainer import TrainHooks

#: Each multi-learner strategy's hooks, by its settings' exact class; the single process
#: (``StrategyConfig``) has none.
HOOKS: dict[type[StrategyConfig], type[StrategyHooks]] = {
    SyncConfig: SyncHooks,
    AdpsgdConfig: AdpsgdHooks,
    DelayByOneConfig: DelayByOneHooks,
    HybridConfig: HybridHooks,
}


def build_strategy(cfg: StrategyConfig, comm: Communicator, *, seed: int = 1) -> TrainHooks:
    """``cfg``'s hooks for the learner behind ``comm`` (the group of all learners); ``cfg``
    is a checked config (``strategy.name`` matches its class)."""
    hooks = HOOKS.get(type(cfg))
    if hooks is None or comm.size == 1:
        return TrainHooks()  # one learner is a plain process, whatever the strategy
    return hooks(cfg, comm, seed=seed)


def build_hooks(cfg: StrategyConfig, ctx: DistContext, *, seed: int = 1) -> TrainHooks:
    """The hooks of a learner started by torchrun (``ctx``), over torch.distributed."""
    if ctx.world_size == 1 or type(cfg) not in HOOKS:
        return TrainHooks()
    return build_strategy(cfg, TorchCommunicator.world(device=ctx.device, timeout_s=cfg.timeout_s), seed=seed)
