"""A model's parameters as one flat CPU vector, and a flat delta added back: what the
weight-averaging strategies exchange."""

from __future__ import annotations

import torch
from torch import nn


def flatten(params: list[nn.Parameter]) -> torch.Tensor:
    """All parameters as one CPU vector (a copy)."""
    return torch.cat([p.detach().reshape(-1) for p in params]).cpu()


@torch.no_grad()
def add_flat_(params: list[nn.Parameter], delta: torch.Tensor, *, scale: float = 1.0) -> None:
    """``params += scale * delta`` for a flat ``delta`` laid out as :func:`flatten`."""
    offset = 0
    for p in params:
        n = p.numel()
        p.add_(delta[offset : offset + n].view_as(p).to(p.device), alpha=scale)
        offset += n
