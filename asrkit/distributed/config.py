"""Settings of the ``strategy`` config group: how learners cooperate."""

from __future__ import annotations

from dataclasses import dataclass, field

from asrkit.choices import BACKENDS, PARTNER_PATTERNS, STALENESS, STRAGGLER_MODES, unknown
from asrkit.distributed.topology import group_problems, pairing_problems
from asrkit.errors import ConfigError, raise_all


@dataclass
class StragglerConfig:
    """``strategy.straggler``: simulated slow learners (see :class:`asrkit.distributed.base.Straggler`).

    Attributes:
        mode: ``none``, ``one`` (learner ``rank`` is ``factor`` x slower), ``random`` (a
            random learner is ``factor`` x slower each step), ``delay`` (random delays) or
            ``exponential`` (every step of every learner takes a shifted-exponential time:
            its own plus an exponential extra, ``factor`` x its own on average).
        rank: the slow learner for ``one`` (-1 = the last).
        factor: how much longer a slow step takes.
        max_delay_ms: ``delay``: the longest random pause per step.
        seed: seeds ``random``, ``delay`` and ``exponential``.
    """

    mode: str = "none"
    rank: int = -1
    factor: float = 2.0
    max_delay_ms: float = 50.0
    seed: int = 0

    def problems(self) -> list[str]:
        problems = unknown("strategy.straggler.mode", self.mode, STRAGGLER_MODES)
        if self.factor < 1.0 or self.max_delay_ms < 0:
            problems.append(
                f"strategy.straggler.factor={self.factor} must be >= 1 and "
                f"max_delay_ms={self.max_delay_ms} >= 0"
            )
        return problems


@dataclass
class StrategyConfig:
    """The ``strategy`` group: what every strategy has. ``strategy=NAME`` picks the
    dataclass of that strategy (:data:`STRATEGIES`), which adds its own settings; a
    setting of another strategy is an unknown key.

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
    straggler: StragglerConfig = field(default_factory=StragglerConfig)

    @property
    def world_size(self) -> int:
        return self.learners * self.nnodes

    def check(self) -> None:
        raise_all(self.problems())

    def problems(self) -> list[str]:
        """Every bad value (subclasses add theirs to ``super().problems()``)."""
        problems = []
        if self.name not in STRATEGIES:
            problems.append(f"strategy.name={self.name!r} is unknown; choose one of {list(STRATEGIES)}")
        elif type(self) is not STRATEGIES[self.name].config:
            problems.append(
                f"strategy.name={self.name!r} needs the {STRATEGIES[self.name].config.__name__} "
                f"settings, not {type(self).__name__}; choose it with strategy={self.name}"
            )
        if self.learners < 1 or self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes:
            problems.append(
                f"strategy: learners={self.learners} and nnodes={self.nnodes} must be >= 1 "
                f"and node_rank={self.node_rank} in [0, nnodes)"
            )
        if self.name == "single" and self.world_size > 1:
            problems.append(
                f"strategy=single runs one learner but learners x nnodes = {self.world_size}; "
                "pick strategy=sync or set strategy.learners=1"
            )
        problems += unknown("strategy.backend", self.backend, BACKENDS)
        if self.straggler.rank >= self.world_size:
            problems.append(
                f"strategy.straggler.rank={self.straggler.rank} but there are only "
                f"{self.world_size} learners; use -1 (the last) or a rank below that"
            )
        if self.max_restarts < 0:
            problems.append(f"strategy.max_restarts={self.max_restarts} must be >= 0")
        if self.timeout_s <= 0:
            problems.append(f"strategy.timeout_s={self.timeout_s} must be positive")
        return problems + self.straggler.problems()


@dataclass
class SyncConfig(StrategyConfig):
    """``strategy=sync``.

    Attributes:
        ordered_sum: add the learners' gradients in rank order (each gathers all, then
            sums) instead of the backend's all-reduce, whose order of addition depends on
            its algorithm (gloo's ring starts each chunk at another learner). The result
            is then bitwise the same on any backend and in the simulator; the price is
            ``learners`` x the all-reduce's traffic into each learner.
    """

    name: str = "sync"
    learners: int = 2
    ordered_sum: bool = False


@dataclass
class AveragingConfig(StrategyConfig):
    """What the weight-averaging strategies share.

    Attributes:
        pattern: partner pattern, ``fixed`` (ring) or ``random`` (seeded matching).
        final_consensus: average all replicas into one model at the end.
    """

    pattern: str = "random"
    final_consensus: bool = True

    def problems(self) -> list[str]:
        problems = super().problems()
        problems += unknown("strategy.pattern", self.pattern, PARTNER_PATTERNS)
        if self.name != "hybrid":
            problems += pairing_problems(self.world_size, key=f"strategy={self.name}")
        return problems


@dataclass
class AdpsgdConfig(AveragingConfig):
    """``strategy=adpsgd``.

    Attributes:
        averaging_period: pacing, local steps per averaging round.
        check_every: rounds between progress/stop all-reduces.
    """

    name: str = "adpsgd"
    learners: int = 2
    averaging_period: int = 1
    check_every: int = 1

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.averaging_period < 1 or self.check_every < 1:
            problems.append(
                f"strategy.averaging_period={self.averaging_period} and "
                f"strategy.check_every={self.check_every} must be >= 1"
            )
        return problems


@dataclass
class DelayByOneConfig(AveragingConfig):
    """``strategy=delay_by_one``.

    Attributes:
        staleness: steps between starting an exchange and merging it (0 or 1).
        mix_weight: weight ``w`` of the merged partner difference, ``x += w (x_j - x_i)``;
            0 = automatic: 1/2 with staleness 0 (an exact pair average), 1/8 with
            staleness 1 (why: :mod:`asrkit.distributed.delay_by_one`).
    """

    name: str = "delay_by_one"
    learners: int = 2
    staleness: int = 1
    mix_weight: float = 0.0

    def problems(self) -> list[str]:
        problems = super().problems()
        problems += unknown("strategy.staleness", self.staleness, STALENESS)
        if not 0.0 <= self.mix_weight <= 0.5:
            problems.append(f"strategy.mix_weight={self.mix_weight} must be in [0, 0.5] (0 = automatic)")
        return problems

    @property
    def merge_weight(self) -> float:
        """The weight of the partner difference (``mix_weight`` resolved)."""
        if self.mix_weight > 0:
            return self.mix_weight
        return 0.5 if self.staleness == 0 else 0.125


@dataclass
class HybridConfig(AdpsgdConfig):
    """``strategy=hybrid``: ADPSGD's settings for the group leaders, and

    Attributes:
        group_size: learners per all-reduce group (divides the learner count into 1 or an
            even number of groups).
    """

    name: str = "hybrid"
    learners: int = 4
    group_size: int = 2

    def problems(self) -> list[str]:
        problems = super().problems()
        return problems + group_problems(self.world_size, self.group_size, key="strategy=hybrid")


@dataclass(frozen=True)
class StrategyInfo:
    """One entry of the strategy registry.

    Attributes:
        config: its settings' dataclass (what ``strategy=NAME`` composes).
        summary: one line for help texts.
        runs: the class that runs it, ``module:Class`` (imported only when a learner
            builds it, so the settings stay light); empty for the single process, which
            runs the trainer's own no-op strategy.
    """

    config: type[StrategyConfig]
    summary: str
    runs: str = ""

    @property
    def weight_averaging(self) -> bool:
        """Learners average weights (replicas differ during training and
        ``final_consensus`` averages them at the end), not gradients."""
        return issubclass(self.config, AveragingConfig)


#: The strategies, by ``strategy.name``: the one list that the config (schemas and
#: checks), the train stage and the command line read.
STRATEGIES: dict[str, StrategyInfo] = {
    "single": StrategyInfo(StrategyConfig, "one process"),
    "sync": StrategyInfo(
        SyncConfig,
        "synchronous SGD: gradients all-reduced every step (DDP)",
        "asrkit.distributed.sync:Sync",
    ),
    "adpsgd": StrategyInfo(
        AdpsgdConfig,
        "asynchronous decentralized pairwise weight averaging",
        "asrkit.distributed.adpsgd:Adpsgd",
    ),
    "delay_by_one": StrategyInfo(
        DelayByOneConfig,
        "lock-step pairwise averaging overlapped with the next step",
        "asrkit.distributed.delay_by_one:DelayByOne",
    ),
    "hybrid": StrategyInfo(
        HybridConfig,
        "DDP inside groups, ADPSGD among the groups' leaders",
        "asrkit.distributed.hybrid:Hybrid",
    ),
}
#: The strategies that average weights between learners instead of all-reducing gradients.
WEIGHT_AVERAGING = tuple(name for name, info in STRATEGIES.items() if info.weight_averaging)


def strategy_config(name: str, **settings: object) -> StrategyConfig:
    """``name``'s settings dataclass with ``settings`` (for code and tests; recipes compose
    it with ``strategy=NAME``)."""
    if name not in STRATEGIES:
        raise ConfigError(f"strategy.name={name!r} is unknown; choose one of {list(STRATEGIES)}")
    return STRATEGIES[name].config(name=name, **settings)  # type: ignore[arg-type]
