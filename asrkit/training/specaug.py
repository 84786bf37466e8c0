"""SpecAugment-style frequency and time masking on a padded batch."""

from __future__ import annotations

import torch

from asrkit.training.config import SpecAugConfig


def spec_augment(
    feats: torch.Tensor, lengths: torch.Tensor, cfg: SpecAugConfig, generator: torch.Generator
) -> torch.Tensor:
    """Mask ``feats`` ``(B, T, F)`` (normalised, so 0 is the mean) and return a copy.

    Each utterance gets ``freq_masks`` bands of up to ``freq_width`` bins and
    ``time_masks`` spans of up to ``min(time_width, time_ratio x length)`` frames,
    drawn from ``generator`` so a seeded run masks the same way every time.
    """
    if not cfg.enabled:
        return feats
    out = feats.clone()
    batch, _, dim = feats.shape

    def draw(high: int) -> int:
        return int(torch.randint(0, max(1, high), (1,), generator=generator))

    for b in range(batch):
        length = int(lengths[b])
        for _ in range(cfg.freq_masks):
            width = draw(cfg.freq_width + 1)
            start = draw(dim - width + 1)
            out[b, :, start : start + width] = 0.0
        limit = min(cfg.time_width, int(cfg.time_ratio * length))
        for _ in range(cfg.time_masks):
            width = draw(limit + 1)
            start = draw(length - width + 1)
            out[b, start : start + width, :] = 0.0
    return out
