"""Training curves as a picture: ``curves.png`` beside ``train_summary.json``.

The figures are the ones the trainer already keeps per epoch (``TrainState.history``): the
main learner's mean training loss and the dev loss, the dev metric the objective reports
(greedy WER for CTC, frame accuracy for frame cross-entropy) and the learning rate at the
epoch's last step. A history written before the training loss was recorded plots without
that line.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from typing import Any

from asrkit.data.io import atomic_writer

#: Dev metric key -> axis label, in the order a panel is chosen.
_DEV_METRICS = {"wer": "dev WER (%)", "frame_acc": "dev frame accuracy (%)"}


def plot_training_curves(
    history: Sequence[Mapping[str, Any]], path: str | os.PathLike, *, title: str
) -> bool:
    """Write the curves of ``history`` to the PNG ``path`` (atomically).

    Args:
        history: one dict per validated epoch with ``epoch`` and ``loss`` (dev), and where
            known ``train_loss``, ``wer`` or ``frame_acc``, and ``lr``.
        path: the PNG to write.
        title: the figure's title (e.g. the experiment's name).

    Returns:
        False (and nothing written) when ``history`` is empty.
    """
    if not history:
        return False
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a cluster node
    import matplotlib.pyplot as plt

    epochs = [int(h["epoch"]) for h in history]
    metric = next((k for k in _DEV_METRICS if any(k in h for h in history)), None)
    has_lr = any("lr" in h for h in history)
    panels = 1 + (metric is not None) + has_lr
    fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.4), squeeze=False)
    row = list(axes[0])
    ax = row.pop(0)
    ax.plot(epochs, [h["loss"] for h in history], marker="o", label="dev")
    trained = [(e, h["train_loss"]) for e, h in zip(epochs, history, strict=True) if "train_loss" in h]
    if trained:
        ax.plot(*zip(*trained, strict=True), marker="o", label="train (main learner)")
    ax.set(xlabel="epoch", ylabel="loss")
    ax.legend()
    if metric is not None:
        ax = row.pop(0)
        points = [(e, h[metric]) for e, h in zip(epochs, history, strict=True) if metric in h]
        ax.plot(*zip(*points, strict=True), marker="o", color="tab:green")
        ax.set(xlabel="epoch", ylabel=_DEV_METRICS[metric])
    if has_lr:
        ax = row.pop(0)
        points = [(e, h["lr"]) for e, h in zip(epochs, history, strict=True) if "lr" in h]
        ax.plot(*zip(*points, strict=True), marker="o", color="tab:red")
        ax.set(xlabel="epoch", ylabel="learning rate (last step)")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    for ax in axes[0]:
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    with atomic_writer(path, "wb") as handle:
        handle.write(buffer.getvalue())
    return True
