"""Training: the trainer loop and the strategy seam, schedules, objectives, resume states.

The data a learner trains on lives in :mod:`asrkit.loader` and model files in
:mod:`asrkit.models.checkpoint`, shared with decoding; import them from there.

Public API:
    - :class:`TrainConfig`, :class:`OptimConfig`, :class:`ScheduleConfig`,
      :class:`SpecAugConfig` — typed settings.
    - :class:`Trainer`, :class:`Strategy`, :class:`TrainState` — the loop and the
      points where a distributed strategy plugs in.
    - :class:`LRSchedule` — warm-up + cosine/exponential annealing by step.
"""

from asrkit.training.config import OptimConfig, ScheduleConfig, SpecAugConfig, TrainConfig
from asrkit.training.schedule import LRSchedule
from asrkit.training.strategy import Strategy, TrainState
from asrkit.training.trainer import Trainer

__all__ = [
    "LRSchedule",
    "OptimConfig",
    "ScheduleConfig",
    "SpecAugConfig",
    "Strategy",
    "TrainConfig",
    "TrainState",
    "Trainer",
]
