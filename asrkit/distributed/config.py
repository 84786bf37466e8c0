"""Settings of the ``strategy`` config group: how learners cooperate."""

from __future__ import annotations

from dataclasses import dataclass, field

from asrkit.errors import ConfigError


@dataclass(frozen=True)
class StrategyInfo:
    """One entry of the strategy registry.

    Attributes:
        hooks: ``module:Class`` of its :class:`~asrkit.distributed.base.StrategyHooks`
            (imported when a run uses it); empty for the single process.
        weight_averaging: learners average weights (replicas differ during training and
            ``final_consensus`` averages them at the end), not gradients.
        summary: one line for help texts.
    """

    hooks: str
    weight_averaging: bool
    summary: str


#: The strategies, by ``strategy.name``: the one list that the config checks, the train
#: stage and the command line read.
STRATEGIES: dict[str, StrategyInfo] = {
    "single": StrategyInfo("", False, "one process"),
    "sync": StrategyInfo("asrkit.distributed.sync:SyncHooks", False,
                         "synchronous SGD: gradients all-reduced every step (DDP)"),
    "adpsgd": StrategyInfo("asrkit.distributed.adpsgd:AdpsgdHooks", True,
                           "asynchronous decentralized pairwise weight averaging"),
    "delay_by_one": StrategyInfo("asrkit.distributed.delay_by_one:DelayByOneHooks", True,
                                 "lock-step pairwise averaging overlapped with the next step"),
    "hybrid": StrategyInfo("asrkit.distributed.hybrid:HybridHooks", True,
                           "DDP inside groups, ADPSGD among the groups' leaders"),
}
STRATEGY_NAMES = tuple(STRATEGIES)
#: The strategies that average weights between learners instead of all-reducing gradients.
WEIGHT_AVERAGING = tuple(name for name, info in STRATEGIES.items() if info.weight_averaging)



@dataclass
class StragglerConfig:
    """``strategy.straggler``: simulated slow learners (see :class:`asrkit.distributed.base.Straggler`).

    Attributes:
        mode: ``none``, ``one`` (learner ``rank`` is ``factor`` x slower), ``random`` (a
            random learner is ``factor`` x slower each step) or ``delay`` (random delays).
        rank: the slow learner for ``one`` (-1 = the last).
        factor: how much longer a slow step takes.
        max_delay_ms: ``delay``: the longest random pause per step.
        seed: seeds ``random`` and ``delay``.
    """

    mode: str = "none"
    rank: int = -1
    factor: float = 2.0
    max_delay_ms: float = 50.0
    seed: int = 0

    def check(self) -> None:
        if self.mode not in ("none", "one", "random", "delay"):
            raise ConfigError(f"strategy.straggler.mode={self.mode!r}; choose none, one, random "
                              "or delay")
        if self.factor < 1.0 or self.max_delay_ms < 0:
            raise ConfigError(f"strategy.straggler.factor={self.factor} must be >= 1 and "
                              f"max_delay_ms={self.max_delay_ms} >= 0")


@dataclass
class StrategyConfig:
    """The ``strategy`` group.

    Attributes:
        name: ``single`` (one process), ``sync`` (synchronous SGD, DDP), ``adpsgd``
            (asynchronous decentralized pairwise averaging), ``delay_by_one`` (lock-step
            pairwise averaging overlapped with the next step) or ``hybrid`` (DDP inside
            groups of ``group_size``, ADPSGD among the groups' leaders).
        learners: learner processes per node (``torchrun --nproc-per-node``).
        nnodes / node_rank / master_addr / master_port: multi-node rendezvous (one
            ``torchrun`` per node; every node gives the same address and port).
        backend: ``auto`` (gloo on CPU, NCCL on CUDA), ``gloo`` or ``nccl``.
        timeout_s: process-group timeout; a dead or stuck learner makes the others
            fail with an error after this long instead of hanging.
        threads_per_learner: intra-op CPU threads per learner process.
        max_restarts: times torchrun restarts the learners after one fails (each restart
            resumes from the last checkpoint every learner holds; ``resume=auto``).
        pattern: ADPSGD partner pattern, ``fixed`` (ring) or ``random`` (seeded matching).
        averaging_period: ADPSGD pacing, local steps per averaging round.
        check_every: ADPSGD rounds between progress/stop all-reduces.
        final_consensus: average all replicas into one model at the end.
        staleness: delay-by-one: steps between starting an exchange and merging it (0 or 1).
        mix_weight: delay-by-one: weight ``w`` of the merged partner difference,
            ``x += w (x_j - x_i)``; 0 = automatic: 1/2 with staleness 0 (an exact pair
            average), 1/8 with staleness 1 (why: :mod:`asrkit.distributed.delay_by_one`).
        group_size: HYBRID: learners per all-reduce group (divides the learner count).
        straggler: simulated slow learners.
    """

    name: str = "single"
    learners: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29531
    backend: str = "auto"
    timeout_s: float = 300.0
    threads_per_learner: int = 1
    max_restarts: int = 0
    pattern: str = "random"
    averaging_period: int = 1
    check_every: int = 1
    final_consensus: bool = True
    staleness: int = 1
    mix_weight: float = 0.0
    group_size: int = 1
    straggler: StragglerConfig = field(default_factory=StragglerConfig)

    @property
    def world_size(self) -> int:
        return self.learners * self.nnodes

    def check(self) -> None:
        if self.name not in STRATEGY_NAMES:
            raise ConfigError(f"strategy.name={self.name!r} is unknown; choose one of "
                              f"{list(STRATEGY_NAMES)}")
        if self.learners < 1 or self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes:
            raise ConfigError(f"strategy: learners={self.learners} and nnodes={self.nnodes} must "
                              f"be >= 1 and node_rank={self.node_rank} in [0, nnodes)")
        if self.name == "single" and self.world_size > 1:
            raise ConfigError(f"strategy=single runs one learner but learners x nnodes = "
                              f"{self.world_size}; pick strategy=sync or set strategy.learners=1")
        if self.backend not in ("auto", "gloo", "nccl"):
            raise ConfigError(f"strategy.backend={self.backend!r}; choose auto, gloo or nccl")
        if self.pattern not in ("fixed", "random"):
            raise ConfigError(f"strategy.pattern={self.pattern!r}; choose fixed or random")
        if self.averaging_period < 1 or self.check_every < 1:
            raise ConfigError(f"strategy.averaging_period={self.averaging_period} and "
                              f"strategy.check_every={self.check_every} must be >= 1")
        if self.name in ("adpsgd", "delay_by_one") and self.world_size > 1 and self.world_size % 2:
            raise ConfigError(f"strategy={self.name} pairs even with odd ranks, so it needs an even "
                              f"number of learners, got {self.world_size}")
        if self.staleness not in (0, 1):
            raise ConfigError(f"strategy.staleness={self.staleness}; choose 0 or 1")
        if not 0.0 <= self.mix_weight <= 0.5:
            raise ConfigError(f"strategy.mix_weight={self.mix_weight} must be in (0, 0.5] "
                              "(0 = automatic)")
        if self.name == "hybrid":
            groups, left = divmod(self.world_size, max(1, self.group_size))
            if self.group_size < 1 or left or (groups > 1 and groups % 2):
                raise ConfigError(
                    f"strategy.group_size={self.group_size} must divide the {self.world_size} "
                    "learners into 1 or an even number of groups (leaders pair up as in ADPSGD)")
        self.straggler.check()
        if self.straggler.rank >= self.world_size:
            raise ConfigError(f"strategy.straggler.rank={self.straggler.rank} but there are only "
                              f"{self.world_size} learners; use -1 (the last) or a rank below that")
        if self.max_restarts < 0:
            raise ConfigError(f"strategy.max_restarts={self.max_restarts} must be >= 0")
        if self.timeout_s <= 0:
            raise ConfigError(f"strategy.timeout_s={self.timeout_s} must be positive")

    @property
    def merge_weight(self) -> float:
        """delay-by-one's weight of the partner difference (``mix_weight`` resolved)."""
        if self.mix_weight > 0:
            return self.mix_weight
        return 0.5 if self.staleness == 0 else 0.125
