"""Training: the trainer loop and the strategy seam, schedules, objectives, resume states.

The data a learner trains on (:mod:`asrkit.loader`) and model files
(:mod:`asrkit.models.checkpoint`) live with the data and the models, shared with decoding;
they are re-exported here.

Public API:
    - :class:`TrainConfig`, :class:`OptimConfig`, :class:`ScheduleConfig`,
      :class:`SpecAugConfig` — typed settings.
    - :func:`open_data_dir` (a data dir streamed from its feature archives),
      :func:`load_utterances` (read into memory), :class:`CmvnNormalizer`,
      :class:`BucketBatches`, :func:`collate` — normalised features and token targets,
      length-bucketed batches capped by frames, read ahead by background worker
      processes or threads (:mod:`asrkit.loader.prefetch`).
    - :class:`Trainer`, :class:`Strategy`, :class:`TrainState` — the loop and the
      six points where a distributed strategy plugs in.
    - :class:`LRSchedule` — warm-up + cosine/exponential annealing by step.
    - :func:`save_checkpoint`, :func:`load_checkpoint`, :func:`load_model_bundle`.
"""

from asrkit.loader.batch import CmvnNormalizer, collate
from asrkit.loader.opening import load_utterances, open_data_dir
from asrkit.loader.planning import BucketBatches
from asrkit.models.checkpoint import load_checkpoint, load_model_bundle, save_checkpoint
from asrkit.training.config import OptimConfig, ScheduleConfig, SpecAugConfig, TrainConfig
from asrkit.training.schedule import LRSchedule
from asrkit.training.strategy import Strategy, TrainState
from asrkit.training.trainer import Trainer

__all__ = [
    "BucketBatches",
    "CmvnNormalizer",
    "LRSchedule",
    "OptimConfig",
    "ScheduleConfig",
    "SpecAugConfig",
    "TrainConfig",
    "Strategy",
    "TrainState",
    "Trainer",
    "collate",
    "load_checkpoint",
    "load_model_bundle",
    "load_utterances",
    "open_data_dir",
    "save_checkpoint",
]
