"""Build a learner's strategy: the class that runs each ``strategy.name`` is named in its
entry of :data:`asrkit.distributed.config.STRATEGIES`, the one registry of strategies."""

from __future__ import annotations

import importlib

from asrkit.comm import Communicator, SoloCommunicator, TorchCommunicator
from asrkit.distributed.base import DistributedStrategy
from asrkit.distributed.config import STRATEGIES, StrategyConfig
from asrkit.distributed.groups import Groups, make_groups
from asrkit.distributed.launch import DistContext
from asrkit.training.strategy import Strategy


def strategy_class(cfg: StrategyConfig) -> type[DistributedStrategy] | None:
    """The class that runs ``cfg``'s strategy; None for the single process."""
    runs = STRATEGIES[cfg.name].runs
    if not runs:
        return None
    module, _, name = runs.partition(":")
    return getattr(importlib.import_module(module), name)


def build_strategy(cfg: StrategyConfig, groups: Groups, *, seed: int = 1) -> Strategy:
    """``cfg``'s strategy for the learner whose groups are ``groups``; ``cfg`` is a checked
    config (``strategy.name`` matches its class)."""
    kind = strategy_class(cfg)
    if kind is None or groups.world.size == 1:
        return Strategy()  # one learner is a plain process, whatever the strategy
    return kind(cfg, groups, seed=seed)


def join(cfg: StrategyConfig, world: Communicator, *, seed: int = 1) -> tuple[Strategy, Communicator]:
    """A learner of ``world`` (the communicator of all learners) joins the run: its
    strategy, and the communicator its trainer sums, agrees and waits through. A learner
    alone, or a strategy with none (``single``), trains as a plain process."""
    if world.size == 1 or not STRATEGIES[cfg.name].runs:
        return Strategy(), SoloCommunicator()
    groups = make_groups(cfg, world)
    return build_strategy(cfg, groups, seed=seed), groups.world


def join_torchrun(cfg: StrategyConfig, ctx: DistContext, *, seed: int = 1) -> tuple[Strategy, Communicator]:
    """:func:`join` for a learner started by torchrun (``ctx``), over torch.distributed."""
    if ctx.world_size == 1 or not STRATEGIES[cfg.name].runs:
        return join(cfg, SoloCommunicator(), seed=seed)  # no process group needed
    return join(cfg, TorchCommunicator.world(device=ctx.device, timeout_s=cfg.timeout_s), seed=seed)
