"""Typed settings of the trainer (the ``train`` config key) and its optimizers."""

from __future__ import annotations

from dataclasses import dataclass, field

from asrkit.choices import (
    ANNEALING,
    BEST_METRICS,
    DEVICES,
    LOADERS,
    LR_SCALINGS,
    OPTIMIZERS,
    PRECISIONS,
    unknown,
)
from asrkit.errors import raise_all


@dataclass
class OptimConfig:
    """The ``optim`` config group.

    Attributes:
        name: ``adam`` or ``sgd`` (SGD with momentum; Nesterov when ``nesterov``).
        lr: peak learning rate (reached at the end of warm-up) at the global batch
            ``base_batch``; the run's own is :meth:`peak_lr`.
        base_batch: the global batch, in utterances, ``lr`` is meant for (0: ``lr`` as
            given at any batch). A run at global batch B (``train.max_batch``, the
            utterances of one step of all learners together) trains at
            ``lr x B / base_batch`` (``lr_scaling=linear``: the papers' rule for SGD, each
            ADPSGD learner included: its steps average to one step of the global batch)
            or ``lr x sqrt(B / base_batch)`` (``sqrt``: a rule for Adam).
        lr_scaling: ``linear`` or ``sqrt`` (see ``base_batch``).
        momentum, nesterov: SGD settings (the papers: 0.9, Nesterov).
        betas, eps: Adam settings.
        weight_decay: L2 penalty.
        fused: torch's fused kernel for the update (one pass over the weights instead of
            one per arithmetic step: ~5x faster on CPU). It rounds differently, so a run
            with it is repeatable but not bitwise equal to one without; off by default so
            results stay bitwise those of earlier runs (and, at its default, it leaves
            the train stage's settings hash as it was: ``asrkit.config.HASHED_WHEN_CHANGED``).
            The simulator's benchmark and the study turn it on (many learners at small
            batches spend much of their time in the update).
    """

    name: str = "adam"
    lr: float = 2.0e-3
    momentum: float = 0.9
    nesterov: bool = True
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1.0e-8
    weight_decay: float = 0.0
    fused: bool = False
    base_batch: int = 0
    lr_scaling: str = "linear"

    def peak_lr(self, global_batch: int) -> float:
        """The learning rate at the end of warm-up for a run whose steps take
        ``global_batch`` utterances in all (see ``base_batch``)."""
        if not self.base_batch:
            return self.lr
        ratio = global_batch / self.base_batch
        return self.lr * (ratio if self.lr_scaling == "linear" else ratio**0.5)

    def check(self) -> None:
        problems = unknown("optim.name", self.name, OPTIMIZERS)
        problems += unknown("optim.lr_scaling", self.lr_scaling, LR_SCALINGS)
        if self.base_batch < 0:
            problems.append(
                f"optim.base_batch={self.base_batch} must be >= 0 (the global batch optim.lr is for; "
                "0: optim.lr at any batch)"
            )
        if not self.lr > 0:
            problems.append(f"optim.lr={self.lr} must be positive (e.g. optim.lr=1e-3)")
        if self.momentum < 0 or self.weight_decay < 0 or self.eps <= 0:
            problems.append(
                f"optim.momentum={self.momentum} and optim.weight_decay="
                f"{self.weight_decay} must be >= 0 and optim.eps={self.eps} > 0"
            )
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            problems.append(f"optim.betas={list(self.betas)} must be two numbers in [0, 1)")
        raise_all(problems)


@dataclass
class ScheduleConfig:
    """Learning-rate schedule: linear warm-up, then annealing.

    Attributes:
        warmup_steps: steps of linear warm-up from ~0 to the peak learning rate.
        warmup_epochs: when > 0, warm-up spans this many epochs instead of
            ``warmup_steps``: the same samples at every global batch (a learner counts its
            epoch in its own steps, and the strategies that do not step in lock-step by
            the samples all learners have processed), so a larger batch warms up over as
            much data in fewer steps (the papers' linear warm-up for a grown batch).
        anneal: ``none`` (constant), ``cosine`` (to ``final_scale`` x lr at the
            last step) or ``exponential`` (x ``decay`` per epoch from
            ``decay_start_epoch`` on, the papers' 1/sqrt(2) late annealing).
        final_scale: cosine's end point as a fraction of the peak.
        decay, decay_start_epoch: exponential annealing.
    """

    warmup_steps: int = 200
    warmup_epochs: float = 0.0
    anneal: str = "cosine"
    final_scale: float = 0.02
    decay: float = 0.7071
    decay_start_epoch: int = 10

    def check(self) -> None:
        problems = []
        if self.warmup_steps < 0 or self.decay_start_epoch < 0 or not self.warmup_epochs >= 0:
            problems.append(
                f"schedule.warmup_steps={self.warmup_steps}, schedule.warmup_epochs="
                f"{self.warmup_epochs} and schedule.decay_start_epoch={self.decay_start_epoch} "
                "must be >= 0"
            )
        problems += unknown("schedule.anneal", self.anneal, ANNEALING)
        if not 0 <= self.final_scale <= 1 or not 0 < self.decay <= 1:
            problems.append(
                f"schedule.final_scale={self.final_scale} must be in [0, 1] and "
                f"schedule.decay={self.decay} in (0, 1]"
            )
        raise_all(problems)


@dataclass
class SpecAugConfig:
    """SpecAugment-style masking of training features (no time warping).

    Attributes:
        enabled: mask during training.
        freq_masks / freq_width: number of frequency masks, widest mask in bins.
        time_masks / time_width: number of time masks, widest mask in frames.
        time_ratio: a time mask never covers more than this fraction of the utterance.
        freq_dims: frequency masks fall within the input's first ``freq_dims`` dims (0: any
            dim). The hybrid's joined input (``align.fmllr``) is the fbank's bins, then the
            fMLLR features (and an i-vector): set it to ``features.num_mel_bins`` so the
            masks stay in the filterbank, where neighbouring dims are neighbouring bands.
    """

    enabled: bool = True
    freq_masks: int = 2
    freq_width: int = 15
    time_masks: int = 2
    time_width: int = 25
    time_ratio: float = 0.1
    freq_dims: int = 0

    def check(self) -> None:
        counts = {
            "freq_masks": self.freq_masks,
            "freq_width": self.freq_width,
            "time_masks": self.time_masks,
            "time_width": self.time_width,
            "freq_dims": self.freq_dims,
        }
        problems = [f"specaug.{name}={value} must be >= 0" for name, value in counts.items() if value < 0]
        if not 0 <= self.time_ratio <= 1:
            problems.append(f"specaug.time_ratio={self.time_ratio} must be in [0, 1]")
        raise_all(problems)


@dataclass
class TrainConfig:
    """Settings of the ``train`` key.

    Attributes:
        epochs: passes over the training set.
        max_frames: cap on padded input frames per batch (batch x longest).
        max_batch: cap on utterances per batch.
        clip_grad_norm: gradient-norm clipping (0 = off) at the global batch: a learner
            whose optimizer steps on a share s of it (ADPSGD's, delay-by-one's: 1/n;
            HYBRID's groups: G/n) clips at this / sqrt(s), its gradient's larger noise
            (``Strategy.gradient_share``), so clipping does not shorten averaged steps.
        device: ``auto`` (CUDA when present), ``cpu`` or ``cuda``.
        num_threads: intra-op CPU threads (0 = torch's default).
        adapt_threads: on CPU, lower the intra-op threads to the cores other processes
            leave free, and raise them back (at most the configured count) when the cores
            free up; checked every 2 s (:mod:`asrkit.threads`). The results do
            not depend on it.
        best_metric: ``wer`` or ``loss`` on the dev set picks the best checkpoint.
        keep_checkpoints: epoch checkpoints kept (older ones are removed).
        average_last: when > 1, ``model.pt`` is the average of the last this-many epoch
            checkpoints instead of the best one (at most ``keep_checkpoints``; a run of
            fewer epochs averages them all).
        init_from: a model bundle or checkpoint whose parameters start this model
            (those with the same name and shape; e.g. a CE model from the CTC model that
            aligned its data: the encoder carries over, the new frame head does not).
        log_every: steps between TensorBoard/progress updates.
        progress: show a progress bar.
        save_every: besides each epoch end, save the resume state every this many steps
            (0 = epoch ends only; the lock-step strategies only — ADPSGD and HYBRID
            learners take different numbers of steps, so they resume from epoch ends).
        prefetch: batches read and collated ahead of the training step by background
            workers (0 = each batch is read when the step asks for it).
        loader: what reads ahead: ``process`` (worker processes forked from the learner,
            filling shared memory; Linux) or ``thread`` (threads in the learner).
        loader_workers: reading workers (each keeps its own open archives).
        in_memory: read the whole training and dev sets into memory before the first
            step instead of streaming them from the feature archives (small sets only).
        max_steps: stop after this many optimizer steps in all (0 = run every epoch;
            benchmarks and smoke tests).
        chunk_frames: frame-target (CE) training only: cut each batch's utterances into
            chunks of this many input frames (0 = whole utterances), each seeing
            ``chunk_context`` more frames of its utterance on either side that are not
            scored (Kaldi's BLSTM chunks; :func:`asrkit.loader.batch.chunk_batch`). Multiples
            of the model's subsampling factor. Validation and decoding use whole utterances.
        chunk_context: see ``chunk_frames``.
        precision: ``fp32``, or ``bf16``: the training step's forward and backward under
            bfloat16 autocast (matrix products in bfloat16, the loss, the weights, the
            gradients' accumulation and the optimizer in float32). What it gains depends
            on the CPU and the shapes: on this VM's (AMX) the speechocean762 hybrid's
            epochs (256 cells, batches of up to 12,000 frames) ran 1.6-1.9x faster, the
            compute benchmark's small batches 1.16x (demo) and 0.92x (paper size, 4
            utterances); ``asrkit bench compute`` measures both side by side. Validation
            and decoding stay float32. At its default it leaves the settings hashes as
            they were (``asrkit.config.HASHED_WHEN_CHANGED``).
    """

    epochs: int = 20
    max_frames: int = 12000
    max_batch: int = 32
    clip_grad_norm: float = 5.0
    device: str = "auto"
    num_threads: int = 0
    adapt_threads: bool = True
    best_metric: str = "wer"
    keep_checkpoints: int = 5
    average_last: int = 0
    init_from: str = ""
    log_every: int = 10
    progress: bool = True
    save_every: int = 0
    prefetch: int = 4
    loader: str = "process"
    loader_workers: int = 1
    in_memory: bool = False
    max_steps: int = 0
    chunk_frames: int = 0
    chunk_context: int = 0
    precision: str = "fp32"

    def check(self) -> None:
        problems = []
        if self.max_frames < 1 or self.max_batch < 1:
            problems.append(
                f"train.max_frames={self.max_frames} and train.max_batch="
                f"{self.max_batch} must be >= 1 (padded frames and utterances per "
                "batch)"
            )
        if self.epochs < 1:
            problems.append(f"train.epochs={self.epochs} must be at least 1")
        problems += unknown("train.device", self.device, DEVICES)
        problems += unknown("train.best_metric", self.best_metric, BEST_METRICS)
        if self.save_every < 0:
            problems.append(f"train.save_every={self.save_every} must be >= 0 (0: epoch ends)")
        if self.prefetch < 0 or self.loader_workers < 1 or self.max_steps < 0:
            problems.append(
                f"train.prefetch={self.prefetch}, train.loader_workers="
                f"{self.loader_workers} and train.max_steps={self.max_steps}: "
                "prefetch and max_steps must be >= 0 and loader_workers >= 1"
            )
        problems += unknown("train.loader", self.loader, LOADERS)
        problems += unknown("train.precision", self.precision, PRECISIONS)
        if self.chunk_frames < 0 or self.chunk_context < 0 or (self.chunk_context and not self.chunk_frames):
            problems.append(
                f"train.chunk_frames={self.chunk_frames}, train.chunk_context={self.chunk_context}: "
                "both >= 0, and context only with chunks (chunk_frames=0: whole utterances)"
            )
        if self.keep_checkpoints < 1:
            problems.append(f"train.keep_checkpoints={self.keep_checkpoints} must be >= 1")
        elif self.average_last > self.keep_checkpoints:
            problems.append(
                f"train.average_last={self.average_last} exceeds the epoch checkpoints "
                f"kept (train.keep_checkpoints={self.keep_checkpoints}); raise "
                "train.keep_checkpoints or lower train.average_last"
            )
        raise_all(problems)
