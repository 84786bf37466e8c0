"""Every process group a learner uses, made in one place.

torch.distributed makes groups collectively: every learner must create every group, in
the same order, even the groups it is not a member of. :func:`make_groups` is the only
caller of :meth:`Communicator.new_group <asrkit.comm.Communicator.new_group>`
in asrkit, so that order cannot drift between strategies.
"""

from __future__ import annotations

from dataclasses import dataclass

from asrkit.comm import Communicator
from asrkit.distributed.config import AdpsgdConfig, DelayByOneConfig, HybridConfig, StrategyConfig


@dataclass
class Groups:
    """A learner's groups.

    Attributes:
        world: all learners on gloo: the trainer's sums, resume agreement and save
            barriers; the strategies' starting broadcast, metrics and consensus.
        data: all learners on the default backend (NCCL on GPUs): SYNC's gradient
            all-reduce.
        pairs: all learners on gloo, for pairwise exchanges alone (ADPSGD's averaging
            thread, delay-by-one's exchanges); None for the other strategies.
        group: HYBRID: this learner's group (default backend: the in-group DDP).
        leaders: HYBRID: the groups' leaders on gloo (ADPSGD among groups); None for a
            member that does not lead.
    """

    world: Communicator
    data: Communicator
    pairs: Communicator | None = None
    group: Communicator | None = None
    leaders: Communicator | None = None


def make_groups(cfg: StrategyConfig, world: Communicator) -> Groups:
    """The groups ``cfg``'s strategy uses, made from ``world`` (the communicator of all
    learners, on the default backend); a learner alone makes none."""
    if world.size == 1:
        return Groups(world=world, data=world)
    gloo = world.new_group(backend="gloo")
    assert gloo is not None  # every learner is a member
    groups = Groups(world=gloo, data=world)
    kind = type(cfg)
    if kind in (AdpsgdConfig, DelayByOneConfig):
        groups.pairs = world.new_group(backend="gloo")
    elif kind is HybridConfig:
        assert isinstance(cfg, HybridConfig)
        size = cfg.group_size
        count = world.size // size
        made = [world.new_group(range(g * size, (g + 1) * size), backend=None) for g in range(count)]
        groups.group = made[world.rank // size]
        groups.leaders = world.new_group([g * size for g in range(count)], backend="gloo")
    return groups
