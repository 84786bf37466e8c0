"""Progress lines of long loops: throttled to a tenth of the work and 30 s apart, every
line different from the one before, counted across forked workers, silent when nested,
and seen from feature extraction and lattice search as the stages run them."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from asrkit.decoding.decoder import DecodingRecord, Point, Prepared
from asrkit.decoding.hclg import HclgDecoder
from asrkit.features.compute import compute_features_for_dir
from asrkit.features.extractors import FeatureConfig
from asrkit.progress import Progress, counted, format_duration, map_forked, tick
from tests.helpers import make_data_dir

PROGRESS = "asrkit.progress"


class _Clock:
    """A monotonic clock the test moves; ``step`` seconds pass at every reading."""

    def __init__(self, step: float = 0.0) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == PROGRESS]


def _number(pattern: str, line: str) -> int:
    found = re.search(pattern, line)
    assert found, (pattern, line)
    return int(found.group(1))


def _counts(lines: Sequence[str]) -> list[int]:
    """The count of finished items each line reports (``475/948``, ``30 utt so far``)."""
    return [_number(r"^.*?: (\d+)[/ ]", line) for line in lines]


def _assert_well_formed(lines: Sequence[str]) -> None:
    """No line repeats the one before, and the counts never go back."""
    assert all(a != b for a, b in zip(lines, lines[1:], strict=False)), lines
    counts = _counts(lines)
    assert counts == sorted(counts), lines


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Clock]:
    """Every Progress the library opens reads this clock (40 s per reading) and closes with
    a line however quick, so a tiny fixture shows what an hour-long set would."""
    fake = _Clock(step=40.0)
    defaults = {**Progress.__init__.__kwdefaults__, "clock": fake, "quiet_below_s": 0.0}
    monkeypatch.setattr(Progress.__init__, "__kwdefaults__", defaults)
    yield fake


@pytest.fixture(autouse=True)
def _info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=PROGRESS)


def test_a_line_per_tenth_at_most_and_none_too_soon(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    with Progress("features data/train", total=1000, clock=clock, min_interval_s=30) as progress:
        for _ in range(1000):
            clock.now += 0.5  # 500 s in all: a tenth every 50 s
            progress.advance()
    lines = _lines(caplog)
    assert len(lines) == 10  # 9 tenths + the closing line
    assert lines[0] == "features data/train: 100/1000 utt (10%), 50 s, about 7 min 30 s left"
    assert lines[8] == "features data/train: 900/1000 utt (90%), 7 min 30 s, about 50 s left"
    assert lines[-1] == "features data/train: 1000 utt in 8 min 20 s, 2.0 utt/s"
    _assert_well_formed(lines)


@pytest.mark.parametrize("seed", range(5))
def test_uneven_work_never_gets_more_than_a_line_per_tenth_or_two_lines_in_30_s(
    seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Items of random durations, finished in random bursts (as forked jobs report): lines
    stay at most one per tenth, at least 30 s apart, and the closing line comes last."""
    rng = np.random.default_rng(seed)
    clock = _Clock()
    seen_at: list[float] = []

    class Stamp(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen_at.append(clock.now)

    stamp = Stamp()
    logging.getLogger(PROGRESS).addHandler(stamp)
    try:
        with Progress("decoding dev (tri1)", total=300, clock=clock) as progress:
            done = 0
            while done < 300:
                clock.now += float(rng.exponential(4.0))
                done = min(300, done + int(rng.integers(0, 12)))
                progress.update_to(done)
    finally:
        logging.getLogger(PROGRESS).removeHandler(stamp)
    lines = _lines(caplog)
    assert 1 <= len(lines) <= 10 and lines[-1].startswith("decoding dev (tri1): 300 utt in "), lines
    tenths = [_number(r"\((\d+)%\)", line) // 10 for line in lines[:-1]]
    assert tenths == sorted(set(tenths)), lines  # a new tenth each time
    assert all(b - a >= 30 for a, b in zip(seen_at[:-2], seen_at[1:-1], strict=True)), seen_at
    _assert_well_formed(lines)


def test_a_stall_repeats_no_line(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    for total in (100, None):
        with Progress("aligning data/train", total=total, clock=clock) as progress:
            for done in (20, 20, 20, 40, 40, 100):
                clock.now += 60
                progress.update_to(done)
                progress.update_to(done)  # a poll that saw nothing new
    lines = _lines(caplog)
    assert lines[:3] == [
        "aligning data/train: 20/100 utt (20%), 1 min 00 s, about 4 min 00 s left",
        "aligning data/train: 40/100 utt (40%), 4 min 00 s, about 6 min 00 s left",
        "aligning data/train: 100 utt in 6 min 00 s, 3.6 s each",
    ]
    assert lines[3:] == [
        "aligning data/train: 20 utt so far, 1 min 00 s",
        "aligning data/train: 40 utt so far, 4 min 00 s",
        "aligning data/train: 100 utt so far, 6 min 00 s",
        "aligning data/train: 100 utt in 6 min 00 s, 3.6 s each",
    ]


def test_unknown_total_lines_thin_out_as_the_work_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """Without a total, a line when a tenth of the time so far has passed (and 30 s): an
    hour of steady work says so in tens of lines, not 120."""
    clock = _Clock()
    with Progress("transcribe", total=None, unit="files", clock=clock) as progress:
        for _ in range(3600):
            clock.now += 1.0
            progress.advance()
    lines = _lines(caplog)
    assert lines[:3] == [
        "transcribe: 30 files so far, 30 s",
        "transcribe: 60 files so far, 1 min 00 s",
        "transcribe: 90 files so far, 1 min 30 s",
    ]
    assert lines[-1] == "transcribe: 3600 files in 1 h 00 min, 1.0 files/s"
    assert 20 <= len(lines) <= 40, lines
    _assert_well_formed(lines)


def test_zero_total_and_no_items(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock(step=1.0)
    with Progress("features data/empty", total=0, clock=clock, quiet_below_s=0):
        pass
    with Progress("decoding test (tri1)", total=5, clock=clock, quiet_below_s=0):
        pass  # a failure elsewhere ended the loop before any item: still no division by zero
    with Progress("features data/empty", total=0, clock=clock):
        pass  # quick: nothing at all
    assert _lines(caplog) == [
        "features data/empty: 0 utt in 1.0 s",
        "decoding test (tri1): 0 utt in 1.0 s",
    ]


def test_a_short_job_says_how_long_it_took_and_a_quick_one_nothing(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    for what, step in (("decoding test (tri1)", 0.5), ("decoding test (greedy)", 0.01)):
        with Progress(what, total=50, clock=clock) as progress:
            for _ in range(50):
                clock.now += step
                progress.advance()
    assert _lines(caplog) == ["decoding test (tri1): 50 utt in 25.0 s, 2.0 utt/s"]


def test_a_nested_progress_is_silent_and_the_outer_one_counts(caplog: pytest.LogCaptureFixture) -> None:
    """``asrkit transcribe`` counts files; each file's own decoding says nothing."""
    clock = _Clock()
    with Progress("transcribe", total=4, unit="files", clock=clock, quiet_below_s=0) as outer:
        for _ in outer.each(range(4)):
            with Progress("decoding (beam_lm)", total=1, clock=clock, quiet_below_s=0) as inner:
                clock.now += 60
                tick()  # counted by the innermost
            assert inner.quiet and inner.done == 1
    assert outer.done == 4 and not outer.quiet
    assert _lines(caplog) == [
        "transcribe: 1/4 files (25%), 1 min 00 s, about 3 min 00 s left",
        "transcribe: 2/4 files (50%), 2 min 00 s, about 2 min 00 s left",
        "transcribe: 3/4 files (75%), 3 min 00 s, about 1 min 00 s left",
        "transcribe: 4 files in 4 min 00 s, 60.0 s each",
    ]


def test_a_failure_leaves_no_closing_line(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(RuntimeError), Progress("z", total=3, quiet_below_s=0):
        tick()
        raise RuntimeError("boom")
    assert _lines(caplog) == []
    tick()  # no Progress running: nothing to count, no error


def test_durations_read_as_people_say_them() -> None:
    assert [format_duration(s) for s in (0.4, 59.4, 59.6, 125, 3599, 3600, 7620)] == [
        "0 s",
        "59 s",
        "1 min 00 s",
        "2 min 05 s",
        "59 min 59 s",
        "1 h 00 min",
        "2 h 07 min",
    ]


def _work(items: list[int]) -> int:
    total = 0
    for x in counted(items):
        time.sleep(0.02)  # long enough for the parent to poll between items
        total += x
    return total


def test_forked_workers_are_counted_in_the_parent(caplog: pytest.LogCaptureFixture) -> None:
    progress = Progress("sum", total=30, min_interval_s=0, quiet_below_s=0)
    jobs = [(list(range(j, 30, 3)),) for j in range(3)]
    with progress:
        results = map_forked(_work, jobs, nj=3, progress=progress, poll_s=0.01)
    assert results == [sum(range(j, 30, 3)) for j in range(3)]
    assert progress.done == 30
    lines = _lines(caplog)  # the parent's: the workers' own loggers are not this one
    assert len(lines) >= 2 and re.match(r"sum: \d+/30 utt", lines[0]), lines
    assert lines[-1].startswith("sum: 30 utt in "), lines
    _assert_well_formed(lines)


@pytest.mark.parametrize("nj", [1, 2])
def test_feature_extraction_reports_its_utterances(
    nj: int, tmp_path: Path, caplog: pytest.LogCaptureFixture, clock: _Clock
) -> None:
    data = tmp_path / "data" / "train"
    make_data_dir(data, utts=6)
    compute_features_for_dir(data, tmp_path / "fbank", FeatureConfig(nj=nj, num_mel_bins=23))
    lines = _lines(caplog)
    assert lines[-1].startswith(f"features {data}: 6 utt in "), lines
    if nj == 1:
        # 40 s per clock reading: every utterance but the last is a new tenth, 40 s on.
        assert lines[0] == f"features {data}: 1/6 utt (16%), 40 s, about 3 min 20 s left"
        assert len(lines) == 6, lines
    _assert_well_formed(lines)
    assert all(line.startswith(f"features {data}: ") for line in lines)


class _Hclg(HclgDecoder):
    """An HCLG decoder over given scores (what a GMM or hybrid decoder prepares)."""

    kind = "gmm"

    def __init__(self, scores: dict[str, np.ndarray], *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.scores = scores

    @property
    def label(self) -> str:
        return "tri1"

    @property
    def sample_rate(self) -> int:
        return 16000

    def prepare(self, data_dir: str | Path) -> Prepared:
        return Prepared(self.scores, name=Path(data_dir).name)

    def prepare_audio(self, samples: np.ndarray, rate: int, *, utt: str, where: str) -> Prepared:
        raise NotImplementedError

    def record(self, point: Point, *, tuned_on: str) -> DecodingRecord:
        return DecodingRecord(kind=self.kind, weights=list(point), tuned_on=tuned_on)


@pytest.mark.parametrize("nj", [1, 2])
def test_a_weight_sweep_and_a_set_are_named_in_the_decoding_lines(
    nj: int, tmp_path: Path, caplog: pytest.LogCaptureFixture, clock: _Clock
) -> None:
    from tests.unit.test_wfst import T, _decoder, _setup

    setup = _setup(tmp_path, None)
    rng = np.random.default_rng(3)
    scores = {
        f"u{k}": rng.normal(0.0, 3.0, size=(T + k, setup.trans_model.num_pdfs)).astype(np.float32)
        for k in range(5)
    }
    grid = [(w, p) for w in (2.0, 10.0) for p in (0.0, 1.0)]
    decoder = _Hclg(scores, _decoder(setup), grid, graph=tmp_path, transitions=tmp_path, nj=nj)
    swept = decoder.hypotheses(decoder.prepare(tmp_path / "dev"), grid)
    one = decoder.hypotheses(decoder.prepare(tmp_path / "test"), grid[:1])
    assert sorted(swept) == grid and list(one) == grid[:1]
    lines = _lines(caplog)
    what = "decoding dev (tri1, 4 weight settings)"
    sweep = [ln for ln in lines if ln.startswith(f"{what}: ")]
    assert sweep and sweep[-1].startswith(f"{what}: 5 utt in "), lines
    assert lines[-1].startswith("decoding test (tri1): 5 utt in "), lines
    if nj == 1:  # in the parent's own loop every utterance is seen (forked: as polled)
        assert sweep[0] == f"{what}: 1/5 utt (20%), 40 s, about 2 min 40 s left"
    _assert_well_formed(sweep)
