"""Progress lines of long loops: throttled, every line different, counted across workers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from asrkit.features.compute import compute_features_for_dir
from asrkit.features.extractors import FeatureConfig
from asrkit.progress import Progress, counted, map_forked, tick
from tests.helpers import make_data_dir


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "asrkit.progress"]


def test_a_line_per_tenth_at_most_and_none_too_soon(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="asrkit.progress")
    clock = _Clock()
    with Progress("features data/train", total=1000, clock=clock, min_interval_s=30) as progress:
        for _ in range(1000):
            clock.now += 0.5  # 500 s in all: a tenth every 50 s
            progress.advance()
    lines = _lines(caplog)
    assert len(lines) == 10  # 9 tenths + the closing line
    assert lines[0] == "features data/train: 100/1000 utt (10%), 50 s, about 450 s left"
    assert lines[-1] == "features data/train: 1000 utt in 500.0 s, 2.0 utt/s"
    assert len(set(lines)) == len(lines)


def test_a_short_job_says_how_long_it_took_and_a_quick_one_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="asrkit.progress")
    clock = _Clock()
    for what, step in (("decoding (tri1)", 0.5), ("decoding (greedy)", 0.01)):
        with Progress(what, total=50, clock=clock) as progress:
            for _ in range(50):
                clock.now += step
                progress.advance()
    assert _lines(caplog) == ["decoding (tri1): 50 utt in 25.0 s, 2.0 utt/s"]


def test_no_total_and_no_items(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="asrkit.progress")
    with Progress("x", total=0, quiet_below_s=0) as progress:
        progress.advance(3)
    with Progress("y", total=5, quiet_below_s=0):
        pass
    lines = _lines(caplog)
    assert [ln.split(" in ")[0] for ln in lines] == ["x: 3 utt", "y: 0 utt"]


def test_a_failure_leaves_no_closing_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="asrkit.progress")
    with pytest.raises(RuntimeError), Progress("z", total=3):
        tick()
        raise RuntimeError("boom")
    assert _lines(caplog) == []


def _work(items: list[int]) -> int:
    return sum(x for x in counted(items))


def test_forked_workers_are_counted_in_the_parent() -> None:
    progress = Progress("sum", total=30, min_interval_s=0)
    jobs = [(list(range(j, 30, 3)),) for j in range(3)]
    results = map_forked(_work, jobs, nj=3, progress=progress, poll_s=0.05)
    assert results == [sum(range(j, 30, 3)) for j in range(3)]
    assert progress.done == 30


def test_feature_extraction_reports_its_utterances(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="asrkit.progress")
    monkeypatch.setattr(
        Progress.__init__, "__kwdefaults__", {**Progress.__init__.__kwdefaults__, "quiet_below_s": 0.0}
    )
    data = tmp_path / "data" / "train"
    make_data_dir(data, utts=6)
    for nj in (1, 2):
        compute_features_for_dir(data, tmp_path / f"fbank{nj}", FeatureConfig(nj=nj, num_mel_bins=23))
    lines = _lines(caplog)
    assert len(lines) == 2 and all(ln.startswith(f"features {data}: 6 utt in ") for ln in lines), lines
