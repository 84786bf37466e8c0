"""Greedy (best-path) CTC decoding."""

from __future__ import annotations

import torch


def greedy_ctc(log_probs: torch.Tensor, lengths: torch.Tensor, *, blank: int = 0) -> list[list[int]]:
    """Best path of each utterance, repeats merged and blanks removed.

    Args:
        log_probs: ``(B, T, V)`` CTC log-probabilities (or any scores).
        lengths: ``(B,)`` valid frames.
        blank: the blank's index.

    Returns:
        One list of token ids per utterance.
    """
    best = log_probs.argmax(dim=-1).cpu()
    out: list[list[int]] = []
    for b in range(best.shape[0]):
        path = best[b, : int(lengths[b])]
        if path.numel() == 0:
            out.append([])
            continue
        keep = torch.ones_like(path, dtype=torch.bool)
        keep[1:] = path[1:] != path[:-1]
        out.append([int(t) for t in path[keep] if int(t) != blank])
    return out
