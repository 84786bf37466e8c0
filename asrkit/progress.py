"""Progress of long loops as log lines: feature extraction, alignment, decoding, transcribing.

A tqdm bar suits a terminal, not a log file or a Slurm job's output, and these loops run
for minutes without a word otherwise. :class:`Progress` writes a line when the work
crosses another tenth *and* at least ``min_interval_s`` have passed since the last line
(work of unknown size: when the time since the last line is also a tenth of the time so
far), and a closing line when the work took ``quiet_below_s`` or more (a quick job, e.g.
one file of ``asrkit transcribe``, says nothing). Every line holds a larger count than the
one before, so no two are alike. A :class:`Progress` opened while another runs in the
same process is silent: the outer one speaks for the whole (``asrkit transcribe`` counts
files, not each file's decoding).

Work done in forked worker processes (``features.nj``, ``gmm.nj``, ``wfst.nj``) is
counted through one shared counter that :func:`map_forked` polls from the parent, so the
parent alone reports; workers only call :func:`tick`.

Example::

    with Progress(f"features {data_dir}", total=len(utts)) as progress:
        for utt in progress.each(utts):
            ...

logs ``features data/train: 475/948 utt (50%), 4 min 10 s, about 4 min 09 s left`` and
``features data/train: 948 utt in 8 min 19 s, 1.9 utt/s``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import resource
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["Progress", "counted", "cpu_seconds", "format_duration", "map_forked", "tick"]

log = logging.getLogger("asrkit.progress")

T = TypeVar("T")

# Fork-shared state: the counter forked workers add to, the process that owns it, and the
# innermost Progress running in this process (what tick() advances when no worker is
# involved). Module state, not arguments, because the workers' functions (feature jobs,
# alignment and search chunks) are pickled by name and take their data from the fork.
_shared: Any = None
_owner = 0
_current: Progress | None = None


def cpu_seconds() -> float:
    """Processor seconds (user and system) of this process and of its children that have
    ended (``wfst.nj``'s forked decoders, say): what a piece of work cost the machine,
    unlike wall time, which counts pauses and waits for a busy core."""
    mine, theirs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + theirs.ru_utime + theirs.ru_stime


def format_duration(seconds: float) -> str:
    """``42 s``, ``4 min 05 s`` or ``2 h 07 min``: as precise as a progress line needs."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """Counts finished items and logs throttled progress lines (see the module).

    Args:
        what: what is being done, e.g. ``features data/train``; starts every line.
        total: items in all; 0: nothing to do (only the closing line); None: not known
            in advance (lines with the count so far, no share or time left).
        unit: the items' name in the lines, e.g. ``utt`` or ``files``.
        min_interval_s: the least time between two progress lines.
        quiet_below_s: work done faster than this gets no closing line (unless a
            progress line was written).
        clock: seconds, monotonic (injectable for tests).
        logger: where the lines go.
    """

    def __init__(
        self,
        what: str,
        total: int | None,
        *,
        unit: str = "utt",
        min_interval_s: float = 30.0,
        quiet_below_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.what, self.unit = what, unit
        self.total = None if total is None else max(0, total)
        self.min_interval_s, self.quiet_below_s = min_interval_s, quiet_below_s
        self.clock, self.logger = clock, logger
        #: Progress lines written so far (the closing line not counted).
        self.lines = 0
        self.done = 0
        #: True while nested in another Progress of this process, which reports instead.
        self.quiet = False
        self.began = self.last = clock()
        self._next_tenth = 1
        self._logged_done = 0
        self._pid = os.getpid()
        self._outer: Progress | None = None

    def __enter__(self) -> Progress:
        global _current
        self._outer, _current = _current, self
        self.quiet = self._outer is not None and self._outer._pid == self._pid
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        global _current
        _current = self._outer
        # A failure's own message says what happened; a closing line would claim the work
        # was done.
        if error is None:
            self.finish()

    def advance(self, count: int = 1) -> None:
        """``count`` more items are finished."""
        self.update_to(self.done + count)

    def each(self, items: Iterable[T]) -> Iterator[T]:
        """``items``, each counted as finished when the next is asked for (or the loop ends)."""
        for item in items:
            yield item
            self.advance()

    def update_to(self, done: int) -> None:
        """Record that ``done`` items are finished in all; log a line when one is due."""
        self.done = done
        if self.quiet:
            return
        if self.total is None:
            self._unknown_total()
        elif 0 < done < self.total:
            # Integer tenths first: the clock is read only when a line may be due.
            tenths = done * 10 // self.total
            if tenths >= self._next_tenth and self._interval_passed():
                self._next_tenth = tenths + 1
                elapsed = self.last - self.began
                left = elapsed * (self.total - done) / done
                self._log(
                    "%s: %d/%d %s (%d%%), %s, about %s left",
                    self.what,
                    done,
                    self.total,
                    self.unit,
                    100 * done // self.total,
                    format_duration(elapsed),
                    format_duration(left),
                )

    def _unknown_total(self) -> None:
        # Without a total there are no tenths of the work: a line when a tenth of the time
        # so far has passed since the last one keeps a long job's log to tens of lines.
        # No new items since the last line: say nothing rather than repeat the count.
        if self.done <= self._logged_done:
            return
        now = self.clock()
        if now - self.last >= max(self.min_interval_s, (now - self.began) / 10):
            self.last = now
            self._log(
                "%s: %d %s so far, %s",
                self.what,
                self.done,
                self.unit,
                format_duration(now - self.began),
            )

    def _interval_passed(self) -> bool:
        now = self.clock()
        if now - self.last < self.min_interval_s:
            return False
        self.last = now
        return True

    def _log(self, message: str, *args: object) -> None:
        self.logger.info(message, *args)
        self.lines += 1
        self._logged_done = self.done

    def finish(self) -> None:
        """The closing line: how many in how long (none for quick work, none when nested)."""
        if self.quiet:
            return
        elapsed = self.clock() - self.began
        if elapsed < self.quiet_below_s and not self.lines:
            return
        took = f"{elapsed:.1f} s" if elapsed < 60 else format_duration(elapsed)
        rate = ""
        if elapsed > 0 and self.done:
            # Slow items (a long file, an alignment job) read better as seconds each.
            per_s = self.done / elapsed
            rate = f", {per_s:.1f} {self.unit}/s" if per_s >= 1 else f", {1 / per_s:.1f} s each"
        self.logger.info("%s: %d %s in %s%s", self.what, self.done, self.unit, took, rate)


def tick(count: int = 1) -> None:
    """One more item done: in a worker forked by :func:`map_forked`, added to the parent's
    shared counter; in the process running a :class:`Progress`, counted there; anywhere
    else (a worker of some other pool) nothing, since no process would report it."""
    pid = os.getpid()
    if _shared is not None and pid != _owner:
        with _shared.get_lock():
            _shared.value += count
    elif _current is not None and _current._pid == pid:
        _current.advance(count)


def map_forked(
    func: Callable[..., T],
    jobs: Sequence[tuple[Any, ...]],
    *,
    nj: int,
    progress: Progress,
    initializer: Callable[[], None] | None = None,
    poll_s: float = 1.0,
) -> list[T]:
    """``func(*job)`` for every job in ``nj`` forked workers, results in the jobs' order,
    while ``progress`` follows the items the workers :func:`tick` off."""
    global _shared, _owner
    context = multiprocessing.get_context("fork")
    _shared, _owner = context.Value("q", 0), os.getpid()
    try:
        with context.Pool(nj, initializer=initializer) as pool:
            pending = pool.starmap_async(func, jobs)
            while not pending.ready():
                pending.wait(poll_s)  # returns as soon as the last job ends
                progress.update_to(int(_shared.value))
            results = pending.get()
        progress.update_to(int(_shared.value))
        return results
    finally:
        _shared = None


def counted(items: Iterable[T]) -> Iterator[T]:
    """``items``, with a :func:`tick` after each (for loops that run in forked workers)."""
    for item in items:
        yield item
        tick()
