"""The study report's time to a target loss, between a run's few validations."""

from __future__ import annotations

import pytest

from asrkit.study.report import _time_to


def _run(*points: tuple[float, float]) -> dict:
    return {"curve": [{"epoch": i + 1, "time": t, "loss": loss} for i, (t, loss) in enumerate(points)]}


def test_the_crossing_is_interpolated_between_the_validations_either_side() -> None:
    run = _run((4.0, 5.0), (8.0, 3.0))
    assert _time_to(run, 4.0) == pytest.approx(6.0)  # half-way down from 5 to 3
    assert _time_to(run, 3.5) == pytest.approx(7.0)
    assert _time_to(run, 3.0) == pytest.approx(8.0)


def test_a_run_at_the_target_at_its_first_validation_or_never_there() -> None:
    assert _time_to(_run((4.0, 3.0), (8.0, 2.0)), 3.5) == 4.0  # nothing earlier to interpolate from
    assert _time_to(_run((4.0, 3.0), (8.0, 2.5)), 2.0) is None
    # a loss that went up and came back: the crossing after the rise
    assert _time_to(_run((2.0, 3.0), (4.0, 3.4), (6.0, 2.6)), 2.8) == pytest.approx(5.5)
