"""Progress of long loops as log lines: feature extraction, lattice search.

A tqdm bar suits a terminal, not a log file or a Slurm job's output, and the stages run
for minutes without a word otherwise. :class:`Progress` writes a line when the work
crosses another tenth *and* at least ``min_interval_s`` have passed since the last line,
and a closing line when the work took ``quiet_below_s`` or more (a quick job, e.g. one
file of ``asrkit transcribe``, says nothing); every line holds its count, so no two are
alike. Work done in forked worker processes (``features.nj``, ``wfst.nj``) is counted
through one shared counter that :func:`map_forked` polls from the parent, so the parent
alone reports.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

log = logging.getLogger("asrkit.progress")

T = TypeVar("T")

# Fork-shared state: the counter forked workers add to, the process that owns it, and the
# in-process Progress that tick() advances when no worker is involved.
_shared: Any = None
_owner = 0
_current: Progress | None = None


class Progress:
    """Counts done items of a known total and logs throttled progress lines.

    Args:
        what: what is being done, e.g. ``features data/train``.
        total: items in all (0: only the final line).
        unit: the items' name in the lines, e.g. ``utt``.
        min_interval_s: the least time between two progress lines.
        quiet_below_s: work done faster than this gets no closing line (unless a progress
            line was written).
        clock: seconds, monotonic (injectable for tests).
        logger: where the lines go.
    """

    def __init__(
        self,
        what: str,
        total: int,
        *,
        unit: str = "utt",
        min_interval_s: float = 30.0,
        quiet_below_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.what, self.total, self.unit = what, max(0, total), unit
        self.min_interval_s, self.quiet_below_s = min_interval_s, quiet_below_s
        self.clock, self.logger = clock, logger
        self.lines = 0
        self.done = 0
        self.began = self.last = clock()
        self._next_tenth = 1
        self._previous: Progress | None = None

    def __enter__(self) -> Progress:
        global _current
        self._previous, _current = _current, self
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        global _current
        _current = self._previous
        if error is None:
            self.finish()

    def advance(self, count: int = 1) -> None:
        self.update_to(self.done + count)

    def update_to(self, done: int) -> None:
        """Record that ``done`` items are finished; log a line when one is due."""
        self.done = done
        if not self.total or self.done >= self.total:
            return
        tenths = self.done * 10 // self.total
        now = self.clock()
        if tenths >= self._next_tenth and now - self.last >= self.min_interval_s:
            elapsed = now - self.began
            left = elapsed * (self.total - self.done) / max(self.done, 1)
            self.logger.info(
                "%s: %d/%d %s (%d%%), %.0f s, about %.0f s left",
                self.what,
                self.done,
                self.total,
                self.unit,
                100 * self.done // self.total,
                elapsed,
                left,
            )
            self.last = now
            self.lines += 1
            self._next_tenth = tenths + 1

    def finish(self) -> None:
        """The closing line: how many in how long (none for quick work)."""
        elapsed = self.clock() - self.began
        if elapsed < self.quiet_below_s and not self.lines:
            return
        rate = f", {self.done / elapsed:.1f} {self.unit}/s" if elapsed > 0 and self.done else ""
        self.logger.info("%s: %d %s in %.1f s%s", self.what, self.done, self.unit, elapsed, rate)


def tick(count: int = 1) -> None:
    """One more item done: in a forked worker, added to the parent's shared counter; in the
    process running a :class:`Progress`, counted there; else nothing."""
    if _shared is not None and os.getpid() != _owner:
        with _shared.get_lock():
            _shared.value += count
    elif _current is not None:
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
    """``func(*job)`` for every job in ``nj`` forked workers, in order, while ``progress``
    follows the items the workers :func:`tick` off."""
    global _shared, _owner
    context = multiprocessing.get_context("fork")
    _shared, _owner = context.Value("q", 0), os.getpid()
    try:
        with context.Pool(nj, initializer=initializer) as pool:
            pending = pool.starmap_async(func, jobs)
            while not pending.ready():
                pending.wait(poll_s)
                progress.update_to(int(_shared.value))
            results = pending.get()
        progress.update_to(int(_shared.value))
        return results
    finally:
        _shared = None


def counted(items: Iterable[T]) -> Iterable[T]:
    """``items``, with a :func:`tick` after each."""
    for item in items:
        yield item
        tick()
