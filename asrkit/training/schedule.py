"""Learning-rate schedules driven by progress (steps), not by the optimizer.

The scale is a pure function of the step count, so a distributed strategy can
drive it from global progress (samples processed by all learners) and a
resumed run lands on the same value.
"""

from __future__ import annotations

import math

from asrkit.training.config import ScheduleConfig


class LRSchedule:
    """``lr(step)`` = peak x warm-up ramp x annealing.

    Args:
        cfg: schedule settings.
        peak_lr: the optimizer's configured learning rate.
        total_steps: steps in the whole run (for cosine).
        steps_per_epoch: steps in one epoch (for exponential decay).
    """

    def __init__(
        self, cfg: ScheduleConfig, *, peak_lr: float, total_steps: int, steps_per_epoch: int
    ) -> None:
        self.cfg, self.peak_lr = cfg, peak_lr
        self.total_steps, self.steps_per_epoch = max(1, total_steps), max(1, steps_per_epoch)
        #: Steps of warm-up: ``warmup_epochs`` of this learner's epoch when set.
        self.warmup: float = (
            cfg.warmup_epochs * self.steps_per_epoch if cfg.warmup_epochs > 0 else float(cfg.warmup_steps)
        )

    def __call__(self, step: float) -> float:
        cfg, warmup = self.cfg, self.warmup
        scale = min(1.0, (step + 1) / warmup) if warmup else 1.0
        if cfg.anneal == "cosine":
            span = max(1.0, self.total_steps - warmup)
            done = min(1.0, max(0.0, (step - warmup) / span))
            scale *= cfg.final_scale + (1 - cfg.final_scale) * 0.5 * (1 + math.cos(math.pi * done))
        elif cfg.anneal == "exponential":
            epoch = int(step // self.steps_per_epoch) + 1  # 1-based, as in the logs
            scale *= cfg.decay ** max(0, epoch - cfg.decay_start_epoch + 1)
        return self.peak_lr * scale
