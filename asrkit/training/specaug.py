"""SpecAugment-style frequency and time masking on a padded batch."""

from __future__ import annotations

import torch

from asrkit.errors import ConfigError
from asrkit.training.config import SpecAugConfig


def spec_augment(
    feats: torch.Tensor, lengths: torch.Tensor, cfg: SpecAugConfig, generator: torch.Generator
) -> torch.Tensor:
    """Mask ``feats`` ``(B, T, F)`` (normalised, so 0 is the mean) and return a copy.

    Each utterance gets ``freq_masks`` bands of up to ``freq_width`` bins (within the
    first ``freq_dims`` dims, where set) and ``time_masks`` spans of up to
    ``min(time_width, time_ratio x length)`` frames, drawn from ``generator`` so a seeded
    run masks the same way every time.
    """
    if not cfg.enabled:
        return feats
    out = feats.clone()
    batch, _, dim = feats.shape
    if cfg.freq_dims > dim:
        raise ConfigError(
            f"specaug.freq_dims={cfg.freq_dims}, but the input has {dim} dims: set it to the "
            f"filterbank's bins within them (features.num_mel_bins), or 0 to mask any dim"
        )
    span = cfg.freq_dims or dim

    def draw(high: int) -> int:
        return int(torch.randint(0, max(1, high), (1,), generator=generator))

    for b in range(batch):
        length = int(lengths[b])
        for _ in range(cfg.freq_masks):
            width = min(draw(cfg.freq_width + 1), span)  # the same draws as without freq_dims
            start = draw(span - width + 1)
            out[b, :, start : start + width] = 0.0
        limit = min(cfg.time_width, int(cfg.time_ratio * length))
        for _ in range(cfg.time_masks):
            width = draw(limit + 1)
            start = draw(length - width + 1)
            out[b, start : start + width, :] = 0.0
    return out
