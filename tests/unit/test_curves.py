"""``curves.png``: the training curves drawn from a run's history."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import pytest

from asrkit.training.curves import plot_training_curves


def _history(metric: str, *, with_train: bool = True) -> list[dict[str, float]]:
    rows = []
    for epoch in range(1, 6):
        row = {"epoch": epoch, "loss": 3.0 / epoch, metric: 80.0 - 10 * epoch, "seconds": 1.0}
        if with_train:
            row |= {"train_loss": 3.5 / epoch, "lr": 1e-3 * 0.7**epoch}
        rows.append(row)
    return rows


@pytest.mark.parametrize("metric", ["wer", "frame_acc"])
def test_three_panels_for_a_full_history(tmp_path: Path, metric: str) -> None:
    path = tmp_path / "curves.png"
    assert plot_training_curves(_history(metric), path, title="an4_demo (sync)")
    image = matplotlib.image.imread(path)
    height, width = image.shape[:2]
    assert width > 2.5 * height  # loss, the dev metric and the learning rate side by side
    assert not list(tmp_path.glob(".curves.png.*"))  # written atomically, no temporary left


def test_an_older_history_plots_the_dev_loss_alone(tmp_path: Path) -> None:
    history = [{"epoch": e, "loss": 1.0 / e} for e in (1, 2, 3)]
    assert plot_training_curves(history, tmp_path / "curves.png", title="old run")
    height, width = matplotlib.image.imread(tmp_path / "curves.png").shape[:2]
    assert width < 1.5 * height  # one panel


def test_no_history_writes_nothing(tmp_path: Path) -> None:
    assert not plot_training_curves([], tmp_path / "curves.png", title="empty")
    assert not (tmp_path / "curves.png").exists()
