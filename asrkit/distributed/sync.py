"""SYNC: synchronous SGD. Gradients are averaged every step by DistributedDataParallel.

Learners take the same steps as one process training on the global batch: each
global batch (bucketed over the whole training set, ``train.max_frames`` and
``train.max_batch`` counted globally) is split ``rank::world`` across learners, and
each learner divides its summed loss by ``global size / learners`` so that DDP's
gradient mean equals the global batch's mean gradient. ``optim.lr`` is therefore the
learning rate for the global batch, exactly as in a single-process run. Replicas start
from rank 0's weights (DDP broadcasts them) and stay bitwise identical.
"""

from __future__ import annotations

from torch import nn

from asrkit.distributed.base import DistributedStrategy
from asrkit.distributed.config import SyncConfig


class Sync(DistributedStrategy):
    """Gradient averaging over all learners (DDP: communication overlaps the backward
    pass, so its waiting time is not separated: ``comm_wait_s`` is null in the metrics)."""

    overlapped_comm = True
    cfg: SyncConfig

    def attach(self, model: nn.Module) -> nn.Module:
        return self.groups.data.data_parallel(model, ordered_sum=self.cfg.ordered_sum)
