"""The runs of a study of IBM's claims (docs/study.md): each is one simulated training run
(:func:`asrkit.sim.experiment.simulate_experiment`) of a model, a strategy, a learner
count, a global batch, a straggler setting and a seed, tagged with the questions it helps
answer.

The questions, one per claim:

* ``stragglers``: ADPSGD (fixed and random ring) keeps its speed when a learner is slow
  (one learner 2x slower; every step shifted-exponential), SYNC does not.
* ``equal_speed``: with equally fast learners and a large batch, delay-by-one reaches a
  target loss first.
* ``batch``: the global batch grows 10x without losing accuracy (with the learning rate
  scaled with it), and ADPSGD tolerates a larger batch than SYNC.
* ``spectral``: a random pairing mixes the replicas faster than a fixed ring (consensus
  distance, loss) as learners grow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from asrkit.distributed.topology import group_problems

#: Strategy label -> its overrides (HYBRID's group size is the plan's ``hybrid_group``).
STRATEGIES: dict[str, tuple[str, ...]] = {
    "sync": ("strategy=sync",),
    "adpsgd_fixed": ("strategy=adpsgd", "strategy.pattern=fixed"),
    "adpsgd_random": ("strategy=adpsgd", "strategy.pattern=random"),
    "delay_by_one": ("strategy=delay_by_one",),
    "hybrid": ("strategy=hybrid", "strategy.pattern=random"),
}

#: Straggler label -> its overrides.
STRAGGLERS: dict[str, tuple[str, ...]] = {
    "none": ("strategy.straggler.mode=none",),
    "one_2x": ("strategy.straggler.mode=one", "strategy.straggler.factor=2"),
    "one_5x": ("strategy.straggler.mode=one", "strategy.straggler.factor=5"),
    "exp_2x": ("strategy.straggler.mode=exponential", "strategy.straggler.factor=2"),
}
#: One learner alone (the recipes' baselines): not one of the strategies compared.
SINGLE: dict[str, tuple[str, ...]] = {"single": ("strategy=single",)}


@dataclass(frozen=True)
class StudyRun:
    """One simulated run; ``name`` is its directory under the study's ``runs/``."""

    model: str
    strategy: str
    learners: int
    batch: int
    straggler: str
    seed: int
    questions: tuple[str, ...]
    #: The plan's optimizer recipe (a key of ``StudyPlan.optimizers``; "": the model's own).
    optim: str = ""
    #: The plan's communication setting (a key of ``StudyPlan.comms``; "": the network's own).
    comm: str = ""

    @property
    def name(self) -> str:
        optim = f"{self.optim}_" if self.optim else ""
        comm = f"{self.comm}_" if self.comm else ""
        return (
            f"{self.model}_{optim}{self.strategy}_n{self.learners}_b{self.batch}_{self.straggler}_"
            f"{comm}s{self.seed}"
        )


def _merge_into(runs: dict[str, StudyRun], run: StudyRun) -> None:
    """Add ``run`` to ``runs`` by name; a run already there gains ``run``'s questions."""
    known = runs.get(run.name)
    merged = tuple(dict.fromkeys((*(known.questions if known else ()), *run.questions)))
    runs[run.name] = StudyRun(**{**run.__dict__, "questions": merged})


@dataclass(frozen=True)
class StudyPlan:
    """What a study runs: every model (name -> the experiment's overrides), ``base_batch``
    (the global batch, in utterances, the experiment's ``optim.lr`` is meant for; other
    batches scale it by ``sqrt(batch / base_batch)``, a rule for Adam), and the axes."""

    models: dict[str, tuple[str, ...]]
    learners: tuple[int, ...] = (16, 64)
    batches: tuple[int, ...] = (64, 192, 640)
    base_batch: int = 64
    headline_seeds: tuple[int, ...] = (1, 2, 3)
    epochs: int = 4
    hybrid_group: int = 4
    #: Overrides of every run: the fused optimizer (many learners at small batches spend
    #: much of their time in the update; see ``OptimConfig.fused``).
    common: tuple[str, ...] = field(default=("optim.fused=true",))
    #: Learning-rate warm-up, in samples (``schedule.warmup_steps`` = this / batch): the
    #: experiments' warm-up in steps (300) would outlast a study run at large batches (70
    #: steps at batch 192 in 2 epochs) and give bigger batches a lower rate throughout.
    warmup_samples: int = 2000
    #: Which runs: ``full`` is every strategy at every learner count and the middle and
    #: largest batch, for every model; ``claims`` is the fewest runs that answer each claim
    #: (:meth:`claim_runs`), for a 2-core machine's ~3 hours; ``converged`` the runs of the
    #: study trained to the end with both optimizers and two communication ratios
    #: (:meth:`converged_runs`); ``sweep`` one learner at ``base_batch`` per optimizer.
    grid: str = "full"
    #: Optimizer label -> its overrides, the first the papers' recipe, the second the one it
    #: is compared with (empty: every run keeps its model's own optimizer).
    optimizers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Communication label -> the ratio of a whole-model exchange's time to one learner's
    #: step of computation it is charged at (None: the network as it is), today's first.
    comms: dict[str, float | None] = field(default_factory=dict)
    #: How the learning rate follows the batch: ``sqrt`` (the plan scales ``optim.lr`` by
    #: ``sqrt(batch / base_batch)`` itself: the first study) or ``optim`` (each optimizer's
    #: own ``optim.base_batch`` / ``optim.lr_scaling`` and ``schedule.warmup_epochs``).
    lr_rule: str = "sqrt"
    #: The headline's global batch (0: the middle of ``batches``).
    headline_batch: int = 0
    #: Decode every run's final model through the experiment's HCLG (hybrid models):
    #: dev WER with the weights tuned on dev, test WER at those (``decode.json``).
    decode: bool = False
    #: The LM weights and word insertion penalties the decoding sweeps on dev (empty: the
    #: experiment's ``wfst.lm_weights`` / ``wfst.word_penalties``). Decoding only: a study
    #: given a wider grid decodes its finished runs' models again without training them.
    lm_weights: tuple[float, ...] = ()
    word_penalties: tuple[float, ...] = ()
    #: The lattice search's ``beam`` and ``lattice_beam`` (0: the experiment's
    #: ``wfst.beam`` / ``wfst.lattice_beam``); recorded with the grid, so a study given
    #: other beams decodes its finished runs' models again too.
    beam: float = 0.0
    lattice_beam: float = 0.0

    @property
    def middle(self) -> int:
        """The headline's global batch."""
        return self.headline_batch or self.batches[len(self.batches) // 2]

    def runs(self) -> list[StudyRun]:
        """Every run once, in the order they are run: the headline first, then the first
        model's straggler runs at the largest learner count (IBM's first claim), its
        other equal-speed runs there, its runs at the other learner counts, and the other
        models last; so a study stopped part-way has something on every claim first."""
        if self.grid in ("converged", "sweep"):
            chosen = self.converged_runs() if self.grid == "converged" else self.sweep_runs()
            return [r for r in chosen.values() if r.batch >= r.learners and self._possible(r)]
        if self.grid not in ("full", "claims"):
            raise ValueError(f"grid {self.grid!r}: full, claims, converged or sweep")
        runs = self._full_grid() if self.grid == "full" else self.claim_runs()
        first_model, middle = next(iter(self.models)), self.batches[len(self.batches) // 2]
        largest_n = max(self.learners)

        def priority(run: StudyRun) -> int:
            if run.model != first_model:
                return 5
            if run.learners != largest_n:
                return 3 if run.straggler == "none" else 4
            if run.straggler != "none":
                return 1
            return 0 if run.batch == middle else 2

        kept = [r for r in runs.values() if r.batch >= r.learners and self._possible(r)]
        return sorted(kept, key=priority)  # stable: the order of the grid within each

    def claim_runs(self) -> dict[str, StudyRun]:
        """The fewest runs that answer every claim, by name: the headline (every strategy,
        the largest learner count, the middle batch, equal speed, every seed, the first
        model); at the same point one learner 2x slower for every strategy (``stragglers``;
        the shifted-exponential model is ``full``'s only); the largest batch
        for SYNC, ADPSGD (random) and delay-by-one (``equal_speed``: delay-by-one's claim
        is about large batches); at the smallest learner count the smallest and the
        largest batch for SYNC and ADPSGD (random) (``batch``: the 10x span, which the
        largest count's middle and largest batch only cover 3.3x of); and the
        other models at the headline's point for SYNC and ADPSGD (random). Fixed ring
        against random pairing (``spectral``) is the headline's, at the learner count where
        their spectral gaps differ most."""
        runs: dict[str, StudyRun] = {}
        first, *others = self.models
        largest_n, smallest_n = max(self.learners), min(self.learners)
        middle = self.batches[len(self.batches) // 2]
        pair = ("sync", "adpsgd_random")

        def add(model: str, strategy: str, n: int, batch: int, straggler: str, seed: int, *q: str) -> None:
            _merge_into(runs, StudyRun(model, strategy, n, batch, straggler, seed, q))

        for seed in self.headline_seeds:
            for strategy in STRATEGIES:
                add(first, strategy, largest_n, middle, "none", seed, "equal_speed", "spectral", "batch")
        for strategy in STRATEGIES:
            add(first, strategy, largest_n, middle, "one_2x", 1, "stragglers")
        for strategy in (*pair, "delay_by_one"):
            add(first, strategy, largest_n, max(self.batches), "none", 1, "equal_speed", "batch")
        for batch in (min(self.batches), max(self.batches)):
            for strategy in pair:
                add(first, strategy, smallest_n, batch, "none", 1, "batch")
        for model in others:
            for strategy in pair:
                add(model, strategy, largest_n, middle, "none", 1, "equal_speed", "spectral")
        return runs

    def converged_runs(self) -> dict[str, StudyRun]:
        """The study trained to the end (docs/study.md), in the order they run, so a study
        stopped part-way has something on every claim first. ``recipe``: one learner at
        ``base_batch`` with each optimizer, every seed (first: they are cheap);
        ``equal_speed`` / ``spectral`` / ``optimizer``: every strategy at the largest learner
        count and the headline batch with the papers' recipe (every seed) and with the other
        optimizer (the first seed); ``comm``: the same at the papers' communication ratio, and
        SYNC, ADPSGD (random) and delay-by-one at the largest batch there; ``stragglers``: one
        learner 2x slow at both ratios and 5x at the papers'; ``batch``: SYNC and ADPSGD
        (random) at the smallest learner count over every batch (the two smallest batches
        with every seed, last)."""
        runs: dict[str, StudyRun] = {}
        (model, *_), (sgd, other, *_) = self.models, self.optimizers
        today, paper = list(self.comms)[:2]
        big, small, head, first = max(self.learners), min(self.learners), self.middle, self.headline_seeds[0]
        pair = ("sync", "adpsgd_random")

        def add(
            strategy: str, n: int, batch: int, straggler: str, seed: int, optim: str, comm: str, *q: str
        ) -> None:
            _merge_into(runs, StudyRun(model, strategy, n, batch, straggler, seed, q, optim, comm))

        for seed in self.headline_seeds:  # cheap, and the recipe's verdict needs them all
            for optim in (sgd, other):
                add("single", 1, self.base_batch, "none", seed, optim, today, "recipe")
        for strategy in STRATEGIES:
            add(strategy, big, head, "none", first, sgd, today, "equal_speed", "spectral", "optimizer")
        for strategy in STRATEGIES:
            add(strategy, big, head, "none", first, other, today, "optimizer")
        for strategy in STRATEGIES:
            add(strategy, big, head, "none", first, sgd, paper, "equal_speed", "comm")
        for strategy in STRATEGIES:
            add(strategy, big, head, "one_2x", first, sgd, paper, "stragglers", "comm")
        for batch in self.batches:
            for strategy in pair:
                add(strategy, small, batch, "none", first, sgd, today, "batch")
        for strategy in STRATEGIES:
            add(strategy, big, head, "one_5x", first, sgd, paper, "stragglers")
        for strategy in STRATEGIES:
            add(strategy, big, head, "one_2x", first, sgd, today, "stragglers")
        for strategy in (*pair, "delay_by_one"):
            add(strategy, big, max(self.batches), "none", first, sgd, paper, "equal_speed", "comm")
        for seed in self.headline_seeds[1:]:
            for strategy in STRATEGIES:
                add(strategy, big, head, "none", seed, sgd, today, "equal_speed", "spectral", "optimizer")
        # The batches that decide each one's largest good batch, with every seed: one seed
        # of SYNC moved by 2 points with how the same batch was split among learners.
        for seed in self.headline_seeds[1:]:
            for batch in sorted(self.batches)[:2]:
                for strategy in pair:
                    add(strategy, small, batch, "none", seed, sgd, today, "batch")
        return runs

    def sweep_runs(self) -> dict[str, StudyRun]:
        """One learner at ``base_batch`` with each optimizer (a learning-rate sweep: one
        optimizer label per rate), the first seed, the network as it is."""
        model, seed = next(iter(self.models)), self.headline_seeds[0]
        return {
            r.name: r
            for r in (
                StudyRun(model, "single", 1, self.base_batch, "none", seed, ("recipe",), optim, "")
                for optim in self.optimizers
            )
        }

    def comm_ratio(self, run: StudyRun) -> float | None:
        """The communication ratio ``run`` is charged at (None: the network as it is)."""
        return self.comms.get(run.comm) if run.comm else None

    def _full_grid(self) -> dict[str, StudyRun]:
        runs: dict[str, StudyRun] = {}

        def add(run: StudyRun) -> None:
            _merge_into(runs, run)

        first_model, middle = next(iter(self.models)), self.batches[len(self.batches) // 2]
        largest_n = max(self.learners)
        # Headline: every strategy at the largest learner count and the middle batch, equal
        # speed, all seeds, first model.
        for seed in self.headline_seeds:
            for strategy in STRATEGIES:
                add(
                    StudyRun(
                        first_model, strategy, largest_n, middle, "none", seed, ("equal_speed", "spectral")
                    )
                )
        for model in self.models:
            for n in self.learners:
                for strategy in STRATEGIES:
                    add(StudyRun(model, strategy, n, middle, "none", 1, ("equal_speed", "spectral")))
                    # The largest batch: where delay-by-one should be fastest.
                    add(StudyRun(model, strategy, n, max(self.batches), "none", 1, ("equal_speed",)))
            for batch in self.batches:
                for strategy in ("sync", "adpsgd_random"):
                    add(StudyRun(model, strategy, min(self.learners), batch, "none", 1, ("batch",)))
        for n in self.learners:
            for straggler in ("one_2x", "exp_2x"):
                for strategy in STRATEGIES:
                    add(StudyRun(first_model, strategy, n, middle, straggler, 1, ("stragglers",)))
        return runs

    def _possible(self, run: StudyRun) -> bool:
        if run.strategy != "hybrid":
            return True
        groups = run.learners // self.hybrid_group
        return groups >= 2 and not group_problems(run.learners, self.hybrid_group, key="hybrid")

    def overrides(self, run: StudyRun) -> list[str]:
        """The run's Hydra overrides: the model's experiment, the plan's common settings,
        the strategy, the batch and the seed (the learning rate is scaled after
        composition: :meth:`lr_scale`)."""
        return [
            *self.models[run.model],
            *self.common,
            *(self.optimizers[run.optim] if run.optim else ()),
            f"train.epochs={self.epochs}",
            *{**STRATEGIES, **SINGLE}[run.strategy],
            *([f"strategy.group_size={self.hybrid_group}"] if run.strategy == "hybrid" else []),
            f"strategy.learners={run.learners}",
            *STRAGGLERS[run.straggler],
            f"train.max_batch={run.batch}",
            "train.max_frames=100000000",  # the batch is counted in utterances only
            *([f"schedule.warmup_steps={self.warmup_steps(run)}"] if self.lr_rule == "sqrt" else []),
            f"seed={run.seed}",
        ]

    def warmup_steps(self, run: StudyRun) -> int:
        """Steps of warm-up at the run's global batch (the same samples at every batch)."""
        return max(1, round(self.warmup_samples / run.batch))

    def lr_scale(self, run: StudyRun) -> float:
        """The factor the plan puts on the experiment's ``optim.lr`` for the run's batch
        (1 when the optimizer's own settings scale it: ``lr_rule`` ``optim``)."""
        return math.sqrt(run.batch / self.base_batch) if self.lr_rule == "sqrt" else 1.0


#: The study's models on speechocean762's speed-perturbed training set (recipes/
#: speechocean762/local/study.sh prepares both): the hybrid experiment's BLSTM trained with
#: frame cross-entropy on its tied states (IBM's kind of model, so it comes first: the
#: headline and the straggler runs use it) and the CTC experiment's BLSTM on phones. Both
#: stack and subsample 3 frames and have 2 layers of 128 cells per direction (0.8M
#: parameters instead of the demo size's 2.5M): 3x the samples per second, so the ``ibm``
#: plan's runs get 2 epochs each in about 3 hours of a 2-core VM (docs/study.md).
STUDY_MODEL = ("model.hidden=128", "model.layers=2", "model.stack=3", "model.subsample=3")
SO762_MODELS: dict[str, tuple[str, ...]] = {
    "hybrid": ("+experiment=so762_hybrid", *STUDY_MODEL),
    "ctc": (
        "+experiment=speechocean762",
        "data_root=data_sp",
        "feats_root=fbank_sp",
        "data.speed_perturb=[0.9,1.0,1.1]",
        "name=so762_study_ctc",
        *STUDY_MODEL,
    ),
}

#: The converged study's model (recipes/an4/local/study.sh prepares it): AN4's hybrid
#: experiment (GMM alignments of the 3-way speed-perturbed training set, 2,544 utterances;
#: HCLG of the triphone system) with the study's 2 x 128 BLSTM, trained with frame
#: cross-entropy and decoded through HCLG. AN4, not speechocean762: its epoch is a third
#: as long, so every run can be trained to the end in the 8-hour budget, and its model
#: learns to a few percent WER, where strategies that train worse show.
AN4_MODELS: dict[str, tuple[str, ...]] = {"hybrid": ("+experiment=an4_hybrid", *STUDY_MODEL)}

#: The global batch the converged study's learning rates are for: one learner's batch.
AN4_BASE_BATCH = 32


#: The papers' optimizer and learning-rate recipe (docs/distributed-training.md): SGD with
#: Nesterov momentum 0.9 (buffers local to each learner), ``lr x B / 32`` at global batch B,
#: linear warm-up over the first epoch (in samples), held, then x 1/sqrt(2) per epoch from
#: epoch 7 of 12; no gradient clipping (it would shorten each ADPSGD learner's noisier
#: small-batch steps more than SYNC's averaged one). ``lr`` from the one-learner sweep.
def sgd_recipe(lr: float, decay_start: int = 7, clip: float = 0.0) -> tuple[str, ...]:
    """The papers' recipe at peak rate ``lr`` for global batch :data:`AN4_BASE_BATCH`, the
    rate x 1/sqrt(2) per epoch from epoch ``decay_start`` on, gradients clipped at norm
    ``clip`` (0: not clipped)."""
    return (
        "optim=sgd",
        f"optim.lr={lr:g}",
        f"optim.base_batch={AN4_BASE_BATCH}",
        "optim.lr_scaling=linear",
        f"train.clip_grad_norm={clip:g}",
        "schedule.warmup_epochs=1",
        "schedule.anneal=exponential",
        "schedule.decay=0.7071",
        f"schedule.decay_start_epoch={decay_start}",
    )


#: The experiments' Adam (AN4: 3e-3 at batch 8, clipping at norm 5, cosine to 2% of the
#: peak), its rate scaled by sqrt(B / 8) (a rule for Adam), warm-up over the first epoch.
ADAM_RECIPE = (
    "optim=adam",
    "optim.base_batch=8",
    "optim.lr_scaling=sqrt",
    "schedule.warmup_epochs=1",
    "schedule.anneal=cosine",
)
#: The SGD rates the one-learner sweep tried at batch 32 (``sweep`` plan).
SWEEP_LRS = (0.05, 0.1, 0.2, 0.4, 0.025)
#: The sweep's choice (docs/study.md): the best dev WER at one learner (9.31%, against
#: 10.15-36.21% at the other rates and schedules tried; Adam 7.95%): 0.05 at batch 32,
#: the decay from epoch 4. Clipped at norm 10 (at the global batch; a learner with a share
#: s of it at 10 / sqrt(s)): unclipped, linear scaling's 0.2 at batch 128 blew SYNC's 64
#: learners up (dev loss 37 after the first epoch, still 6 after the eighth); clipped at
#: 10 they train (3.16, 1.89, 1.33 after epochs 1-3; at 25: 3.71, 2.82, 1.91).
SGD_LR = 0.05
SGD_DECAY_START = 4
SGD_CLIP = 10.0
#: Communication: today's (the 2 x 128 model's own bytes) and the papers' ratio of one
#: whole-model exchange to one learner's step of computation. docs/study.md derives it:
#: a ~43M-parameter BLSTM (172 MB) crosses a 100 Gbit/s link in 13.8 ms; one step costs
#: ~6 FLOP per parameter per frame, at 40 chunks of 21 frames per learner (global batch
#: 2,560 over 64 learners) 0.22 TFLOP, 43 ms on a V100 at 5 TFLOP/s sustained: 0.32.
PAPER_COMM_RATIO = 0.3
_CONVERGED = {
    "models": AN4_MODELS,
    "learners": (16, 64),
    "batches": (32, 128, 512, 1024),
    "headline_batch": 128,
    "base_batch": AN4_BASE_BATCH,
    "epochs": 12,
    "lr_rule": "optim",
    "comms": {"today": None, "paper": PAPER_COMM_RATIO},
    "decode": True,
}

#: The study's decoding grid: the experiment's LM weights (4-24) and penalties (-0.5-1)
#: put the best pair of 13 of the first 15 runs on the grid's edge (8 at LM weight 4),
#: and a weak model's WER was still falling there (ADPSGD's fixed ring at 64 learners:
#: 59.90% at 4 / -0.5, 62.77% at 4 / 0, 60.91% at 5 / -0.5), so the grid reaches down to
#: LM weight 1 and penalty -2.
STUDY_GRID: dict[str, Any] = {
    "lm_weights": (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.0),
    "word_penalties": (-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0),
    # The lattice search's beams, narrower than the experiment's 13 / 8 (Kaldi's
    # decode.sh): the lattice decoder has no max_active, so a weak model's nearly flat
    # posteriors keep most of the graph within the beam (ADPSGD's fixed ring at 64
    # learners: ~22 s of CPU per dev utterance, the one-learner SGD model ~0.35 s; a
    # weak run's decoding took 40 minutes). At 10 / 6 the one-learner model's best paths
    # on 20 dev utterances were the same at all 91 points, in half the time, and the fixed
    # ring's took 0.27 of the time (30 of 273 points changed, in a model above 25% WER).
    # Every run of the study is decoded with the same beams.
    "beam": 10.0,
    "lattice_beam": 6.0,
}

#: Named plans: ``ibm_sgd`` (the study trained to the end: AN4's hybrid model, 12 epochs,
#: both optimizers, both communication ratios; docs/study.md), ``sgd_sweep`` (its
#: one-learner learning-rate sweep), the first study's ``ibm`` (16 and 64 learners, global
#: batches 64-640, the runs each claim needs: 29, 2 epochs of speechocean762) and
#: ``ibm_full`` (the same axes, every strategy everywhere: 74 runs), ``pilot`` (a few
#: runs to time a plan) and ``tiny`` (the tests').
_IBM = {"learners": (16, 64), "batches": (64, 192, 640), "base_batch": 64, "epochs": 2}
PLANS: dict[str, dict] = {
    "ibm_sgd": {
        **_CONVERGED,
        "grid": "converged",
        # model.pt is the last epoch's: the consensus of the averaging strategies' replicas
        # (the experiment's average of 5 epochs would mix in learner 0's own replicas); the
        # lock-step runs keep their best dev-loss epoch, with the decay the last one or next.
        "common": ("optim.fused=true", "train.average_last=1"),
        "optimizers": {"sgd": sgd_recipe(SGD_LR, SGD_DECAY_START, SGD_CLIP), "adam": ADAM_RECIPE},
        **STUDY_GRID,
    },
    "sgd_sweep": {
        **_CONVERGED,
        "grid": "sweep",
        "comms": {},  # one learner: no communication
        "optimizers": {
            **{f"sgd{lr:g}": sgd_recipe(lr) for lr in SWEEP_LRS},
            "adam": ADAM_RECIPE,
            # The decay from epoch 4 (8 halvings of the rate's square by the end, as
            # Adam's cosine ends near 2% of its peak).
            **{f"sgd{lr:g}_d4": sgd_recipe(lr, 4) for lr in (0.05, 0.025)},
            # Clipped at norm 25 (this model's gradient norms at batch 32 are 12-120 in the
            # first steps), so a larger rate survives the spikes.
            **{f"sgd{lr:g}_d4_c25": sgd_recipe(lr, 4, 25.0) for lr in (0.1, 0.2)},
        },
    },
    "ibm": {**_IBM, "grid": "claims"},
    "ibm_full": _IBM,
    "pilot": {"learners": (16,), "batches": (64, 640), "base_batch": 64, "headline_seeds": (1,), "epochs": 1},
    "tiny": {
        "learners": (4,),
        "batches": (4, 8),
        "base_batch": 4,
        "headline_seeds": (1, 2),
        "epochs": 1,
        "hybrid_group": 2,
    },
}


def study_plan(name: str, models: dict[str, tuple[str, ...]] | None = None) -> StudyPlan:
    """The plan ``name`` (:data:`PLANS`) over ``models`` (default: the plan's own, or
    :data:`SO762_MODELS`)."""
    settings = dict(PLANS[name])
    chosen = models or settings.pop("models", None) or SO762_MODELS
    settings.pop("models", None)
    return StudyPlan(models=dict(chosen), **settings)
