"""Build a learner's strategy: :data:`STRATEGY_CLASSES` maps each strategy's settings class
(which ``strategy.name`` picks: :data:`asrkit.distributed.config.STRATEGIES`) to the
class that runs it."""

from __future__ import annotations

from asrkit.distributed.adpsgd import Adpsgd
from asrkit.distributed.base import DistributedStrategy
from asrkit.distributed.comm import Communicator, SoloCommunicator, TorchCommunicator
from asrkit.distributed.config import (
    AdpsgdConfig,
    DelayByOneConfig,
    HybridConfig,
    StrategyConfig,
    SyncConfig,
)
from asrkit.distributed.delay_by_one import DelayByOne
from asrkit.distributed.groups import Groups, make_groups
from asrkit.distributed.hybrid import Hybrid
from asrkit.distributed.launch import DistContext
from asrkit.distributed.sync import Sync
from asrkit.training.strategy import Strategy

#: Each multi-learner strategy's class, by its settings' exact class; the single process
#: (``StrategyConfig``) runs the trainer's own no-op :class:`Strategy`.
STRATEGY_CLASSES: dict[type[StrategyConfig], type[DistributedStrategy]] = {
    SyncConfig: Sync,
    AdpsgdConfig: Adpsgd,
    DelayByOneConfig: DelayByOne,
    HybridConfig: Hybrid,
}


def build_strategy(cfg: StrategyConfig, groups: Groups, *, seed: int = 1) -> Strategy:
    """``cfg``'s strategy for the learner whose groups are ``groups``; ``cfg`` is a checked
    config (``strategy.name`` matches its class)."""
    kind = STRATEGY_CLASSES.get(type(cfg))
    if kind is None or groups.world.size == 1:
        return Strategy()  # one learner is a plain process, whatever the strategy
    return kind(cfg, groups, seed=seed)


def join(cfg: StrategyConfig, world: Communicator, *, seed: int = 1) -> tuple[Strategy, Communicator]:
    """A learner of ``world`` (the communicator of all learners) joins the run: its
    strategy, and the communicator its trainer sums, agrees and waits through. A learner
    alone, or a strategy with none (``single``), trains as a plain process."""
    if world.size == 1 or type(cfg) not in STRATEGY_CLASSES:
        return Strategy(), SoloCommunicator()
    groups = make_groups(cfg, world)
    return build_strategy(cfg, groups, seed=seed), groups.world


def join_torchrun(cfg: StrategyConfig, ctx: DistContext, *, seed: int = 1) -> tuple[Strategy, Communicator]:
    """:func:`join` for a learner started by torchrun (``ctx``), over torch.distributed."""
    if ctx.world_size == 1 or type(cfg) not in STRATEGY_CLASSES:
        return join(cfg, SoloCommunicator(), seed=seed)  # no process group needed
    return join(cfg, TorchCommunicator.world(device=ctx.device, timeout_s=cfg.timeout_s), seed=seed)
