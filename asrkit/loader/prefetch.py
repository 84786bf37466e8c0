"""Read-ahead: planned batches are read in background workers while the step runs.

Two kinds of worker, one contract (batches come out in plan order, at most ``depth``
read ahead, a read error is raised in the consumer at the batch that failed, leaving
early stops the workers):

- :class:`ReaderPool` (``train.loader=process``, the default on Linux): worker processes
  forked from the learner fill the padded features of each batch into a ring of
  shared-memory slots; the consumer copies a finished slot out and attaches the targets.
  A worker shares no interpreter lock with the training loop, and nothing is pickled per
  batch: each worker walks its own (forked) copy of the plan, so per batch the only
  messages are a flag in shared memory and a semaphore. Measured on the 2-core VM
  (``asrkit bench data``), handing batches over from a thread cost ~35% of the reading
  rate with the demo's small batches (each hand-off stalls the reading thread on the
  GIL); from a process it costs nothing measurable.
- :class:`Prefetcher` (``train.loader=thread``, and wherever ``fork`` is not available):
  reading threads in the learner's process.

The workers run numpy and file I/O only, never a torch operator: one would start a second
OpenMP team competing with the training step's for the cores (and OpenMP does not survive
``fork``).
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import mmap
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Generator, Iterator
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import torch

from asrkit.errors import UserError
from asrkit.loader.batch import Batch

_T = TypeVar("_T")
log = logging.getLogger(__name__)

#: Seconds a consumer waits for a batch from a live reading worker before it has the worker
#: print where it is (its Python stack, to stderr): a worker that is alive but delivers
#: nothing is a hang, and without the stack the log only shows the consumer waiting.
STALL_REPORT_S = 30.0


def can_fork() -> bool:
    """Whether worker processes can be forked here (Linux; elsewhere threads read)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetcher(Generic[_T]):
    """Turns planned items into batches ahead of their use, in plan order, in threads.

    ``threads`` background threads each take the next planned item, build its batch with
    ``make(reader, item)`` through their own reader, and hand it over; no thread runs more
    than ``depth`` items ahead of the consumer, so at most ``depth`` batches are held. When
    the consumer asks for a batch that no thread has started, it builds that one itself
    instead of waiting (so the read-ahead never makes the consumer slower than reading
    in its own thread would).
    ``depth == 0`` builds each batch in the consumer's thread when it is asked for. An
    error while reading is raised in the consumer, at the batch that failed.

    Use it as a context manager (or call :meth:`close`): leaving early stops the threads.
    """

    def __init__(
        self,
        plan: Iterator[Any],
        make: Callable[[Any, Any], _T],
        source: Any,
        *,
        depth: int = 4,
        threads: int = 1,
    ) -> None:
        self.plan, self.make, self.source = plan, make, source
        self.depth, self.threads = max(0, depth), max(1, threads)
        self._cond = threading.Condition()
        self._ready: dict[int, object] = {}
        self._taken = 0  # items taken from the plan
        self._delivered = 0  # batches handed to the consumer
        self._end: int | None = None  # the plan's length once it ran out
        self._stop = False
        self._workers: list[threading.Thread] = []
        self._reader: Any = None

    def __enter__(self) -> Prefetcher[_T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[_T]:
        if self.depth == 0:
            self._reader = self.source.reader()
            for item in self.plan:
                yield self.make(self._reader, item)
            return
        for k in range(self.threads):
            worker = threading.Thread(target=self._work, name=f"asrkit-prefetch-{k}", daemon=True)
            worker.start()
            self._workers.append(worker)
        while True:
            item = None
            out: object = None
            with self._cond:
                while True:
                    if self._delivered in self._ready:
                        out = self._ready.pop(self._delivered)
                        break
                    if self._end == self._delivered:
                        return
                    if self._taken == self._delivered and self._end is None:
                        # No thread has started the next batch (they are all behind, or the
                        # consumer outran them): read it here rather than wait for one.
                        try:
                            item = next(self.plan)
                        except StopIteration:
                            self._end = self._taken
                            self._cond.notify_all()
                            return
                        self._taken += 1
                        break
                    self._cond.wait()
            if out is None:
                if self._reader is None:
                    self._reader = self.source.reader()
                try:
                    out = self.make(self._reader, item)
                except BaseException:
                    self.close()
                    raise
            with self._cond:
                self._delivered += 1
                self._cond.notify_all()
            if isinstance(out, _Failed):
                self.close()
                raise out.error
            yield out  # type: ignore[misc]

    def _work(self) -> None:
        reader = self.source.reader()
        try:
            while True:
                with self._cond:
                    while (
                        not self._stop and self._end is None and self._taken >= self._delivered + self.depth
                    ):
                        self._cond.wait()
                    if self._stop or self._end is not None:
                        return
                    seq = self._taken
                    try:
                        item = next(self.plan)
                    except StopIteration:
                        self._end = seq
                        self._cond.notify_all()
                        return
                    except BaseException as err:  # noqa: BLE001 (handed to the consumer)
                        self._ready[seq], self._end = _Failed(err), seq + 1
                        self._cond.notify_all()
                        return
                    self._taken += 1
                try:
                    out: object = self.make(reader, item)
                except BaseException as err:  # noqa: BLE001 (handed to the consumer)
                    out = _Failed(err)
                with self._cond:
                    self._ready[seq] = out
                    self._cond.notify_all()
        finally:
            reader.close()

    def close(self) -> None:
        """Stop the threads and drop what they read ahead."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for worker in self._workers:
            if worker is not threading.current_thread():
                worker.join()
        self._workers.clear()
        self._ready.clear()
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class Planner(Protocol):
    """What a :class:`ReaderPool` reads from (:class:`~asrkit.loader.planning.BucketBatches`)."""

    source: Any
    pin_memory: bool

    def plan(self, epoch: int, *, start: int = 0) -> Iterator[Any]:
        """The items of an epoch, deterministic from its arguments."""

    def share(self, item: Any) -> np.ndarray:
        """The utterance indices this learner reads of ``item``."""

    def finish(self, batch: Batch, item: Any) -> Batch:
        """Complete the consumer's batch of ``item``."""

    def largest_batch(self) -> int:
        """Floats in the largest padded feature block of any item."""


# Each slot's header (int64s): [j + 1 once batch j of the current run is in the slot, or
# -(j + 1) if reading it failed; the batch's size B, length T and first utterance index, which
# the consumer checks against its own plan]. After the slots' headers: the current run's
# number (negative: cancelled). No lock guards them: the writer releases a semaphore after
# writing and the reader acquires it before reading, which orders the accesses on any CPU.
_SLOT_HEADER = 4


class ReaderPool:
    """Worker processes, forked once, that read a planner's epochs into shared memory.

    The workers are forked when the pool starts (early, before training has filled the
    learner's heap: every page the learner writes after a fork is copied once, which cost
    ~1 s per fork on the VM when forked per epoch). Each epoch is a *run*: the consumer
    sends ``(run, epoch, start)``, and each worker walks its own copy of
    ``planner.plan(epoch, start=start)`` — which is why a plan must depend on nothing but
    its arguments (a seeded order does not; the consumer checks every batch's shape and
    first utterance against its own plan). Batch ``j`` of a run goes to worker
    ``j % workers`` and slot ``j % slots`` of the ring (``slots = max(depth, workers)``);
    a worker starts it once the consumer has taken batch ``j - slots``, sleeping on a
    semaphore until then (so a worker that is ahead takes no CPU from the step), and
    posts the slot's semaphore when it is filled. The consumer polls that semaphore
    only when the batch is not ready yet (a blocked consumer would make every post a
    cross-core wake-up). A run left early (ADPSGD's endless plans, ``max_steps``, an error)
    is cancelled when the next one starts or the pool closes; one run at a time.

    Args:
        planner: what to read (held weakly: dropping it stops the workers).
        depth: batches read ahead (>= 1).
        workers: reading processes.
    """

    def __init__(self, planner: Planner, *, depth: int = 4, workers: int = 1) -> None:
        self._planner = weakref.ref(planner)
        self.workers, self.slots = max(1, workers), max(depth, workers, 1)
        self.slot_floats = 0
        self._procs: list[Any] = []
        self._commands: list[Any] = []  # the consumer's ends, one pipe per worker
        self._replies: list[Any] = []  # ("error", run, error, trace) and ("done", run)
        self._ring: mmap.mmap | None = None
        self._header: np.ndarray | None = None
        self._data: np.ndarray | None = None
        self._free: list[Any] = []  # per worker: slots it may fill
        self._filled: list[Any] = []  # per slot: posted when its batch is in
        self._run = 0
        self._pending = False  # a run whose workers have not all reported "done"
        self._running = False  # the consumer has not reached the end of the current run

    @property
    def planner(self) -> Planner:
        planner = self._planner()
        assert planner is not None, "the planner of a live reader pool was dropped"
        return planner

    @property
    def started(self) -> bool:
        return bool(self._procs)

    def start(self) -> None:
        """Fork the workers (once)."""
        if self._procs:
            return
        ctx = multiprocessing.get_context("fork")
        self.slot_floats = max(1, self.planner.largest_batch())
        header_bytes = -(-8 * (_SLOT_HEADER * self.slots + 1) // 4096) * 4096
        self._ring = mmap.mmap(-1, header_bytes + self.slots * self.slot_floats * 4)
        self._header = np.frombuffer(self._ring, dtype=np.int64, count=_SLOT_HEADER * self.slots + 1)
        self._data = np.frombuffer(self._ring, dtype=np.float32, offset=header_bytes)
        self._free = [ctx.Semaphore(0) for _ in range(self.workers)]
        self._filled = [ctx.Semaphore(0) for _ in range(self.slots)]
        parent = os.getpid()
        for w in range(self.workers):
            commands, their_commands = ctx.Pipe(duplex=False)
            their_replies, replies = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_serve,
                name=f"asrkit-reader-{w}",
                daemon=True,
                args=(self, w, commands, replies, parent),
            )
            # The worker starts with SIGUSR1 blocked and unblocks it once it answers it
            # (_serve): a stall report that reaches it sooner waits instead of ending it.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
            try:
                proc.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            commands.close()
            replies.close()
            self._procs.append(proc)
            self._commands.append(their_commands)
            self._replies.append(their_replies)
        # A pool dropped without close() still stops its workers.
        weakref.finalize(self, _kill, list(self._procs))

    def run(self, epoch: int, *, start: int = 0) -> Iterator[Batch]:
        """The batches of ``planner.plan(epoch, start=start)``, in order."""
        self.start()
        self._settle()
        assert self._header is not None and self._data is not None
        self._run += 1
        run = self._run
        self._header[:] = 0
        self._header[-1] = run
        self._pending = self._running = True
        for w, free in enumerate(self._free):  # worker w's batches among 0 .. slots - 1
            for _ in range(w, self.slots, self.workers):
                free.release()
        for w, commands in enumerate(self._commands):
            try:
                commands.send((run, epoch, start))
            except OSError:
                self._check_alive(w, "between epochs")
                raise
        planner = self.planner
        for j, item in enumerate(planner.plan(epoch, start=start)):
            slot = j % self.slots
            idx = planner.share(item)
            shape = planner.source.batch_shape(idx)
            self._await(j, slot, shape, int(idx[0]))
            feats = torch.empty(shape, dtype=torch.float32, pin_memory=planner.pin_memory)
            at = slot * self.slot_floats
            feats.numpy()[...] = self._data[at : at + feats.numel()].reshape(shape)
            self._free[(j + self.slots) % self.workers].release()  # for batch j + slots
            yield planner.finish(planner.source.assemble(idx, feats), item)
            if self._run != run:
                raise RuntimeError(
                    "a reader pool reads one epoch at a time: another epoch of "
                    "the same batches was started while this one was unfinished"
                )
        self._running = False

    def _await(self, j: int, slot: int, shape: tuple[int, int, int], first: int) -> None:
        """Wait until batch ``j`` (``shape``, utterance ``first`` first) is in ``slot``;
        raise its worker's error, or if the worker died."""
        assert self._header is not None
        filled = self._filled[slot]
        pause, checked = 2e-5, time.monotonic()
        report_at = checked + STALL_REPORT_S
        while not filled.acquire(False):
            now = time.monotonic()
            if now - checked > 0.05:
                checked = now
                self._check_alive(j % self.workers, f"before batch {j} was read")
                if now > report_at:
                    report_at = float("inf")
                    self._report_stall(j)
            time.sleep(pause)
            pause = min(2 * pause, 1e-3)
        flag, size, length, index = self._header[slot * _SLOT_HEADER : (slot + 1) * _SLOT_HEADER]
        if flag == -(j + 1):
            raise self._error(j % self.workers)
        if flag != j + 1 or (size, length, index) != (shape[0], shape[1], first):
            self.close()
            raise RuntimeError(
                f"the batch-reading worker filled slot {slot} with batch "
                f"{flag - 1} ({size}x{length}, utterance {index} first) where "
                f"the plan has batch {j} ({shape[0]}x{shape[1]}, utterance "
                f"{first} first): the planner changed after the workers started"
            )

    def _report_stall(self, j: int) -> None:
        """Batch ``j`` is long overdue from a live worker: say so, and have the worker print
        its stack (faulthandler, registered for SIGUSR1 in :func:`_serve`)."""
        proc = self._procs[j % self.workers]
        log.warning(
            "batch %d of this epoch has not come from the batch-reading worker process %s "
            "in %g s though it is alive; its stack follows on stderr (please report this with "
            "the log; train.loader=thread reads in threads instead)",
            j,
            proc.pid,
            STALL_REPORT_S,
        )
        try:
            os.kill(proc.pid, signal.SIGUSR1)
        except OSError:
            pass

    def _check_alive(self, w: int, when: str) -> None:
        proc = self._procs[w]
        if proc.exitcode is not None:
            how = f"signal {-proc.exitcode}" if proc.exitcode < 0 else f"exit status {proc.exitcode}"
            self.close()
            raise RuntimeError(
                f"the batch-reading worker process {proc.pid} ended ({how}) {when}; "
                "see the log above (or train.loader=thread to read in threads)"
            )

    def _error(self, w: int) -> BaseException:
        while True:
            try:
                message = self._replies[w].recv()
            except Exception as err:  # noqa: BLE001  an error that does not unpickle here
                return RuntimeError(
                    f"the batch-reading worker failed and its error could not "
                    f"be received ({type(err).__name__}: {err})"
                )
            if message[0] == "error" and message[1] == self._run:
                _, _, error, trace = message
                if not isinstance(error, UserError) and trace:
                    error.add_note(f"in the batch-reading worker process:\n{trace}")
                return error

    def _settle(self) -> None:
        """Wait until every worker has finished the previous run (cancelling it first if
        the consumer left it early), then take back the semaphore tokens it left. If this
        is interrupted, the workers are stopped (the next run forks new ones)."""
        if not self._pending:
            return
        assert self._header is not None
        try:
            if self._running:
                self._header[-1] = -self._run
                for free in self._free:
                    free.release()  # wakes a worker waiting for a slot, to see the cancel
            for w, replies in enumerate(self._replies):
                while True:
                    while not replies.poll(0.05):
                        self._check_alive(w, "while finishing an epoch")
                    message = replies.recv()
                    if message[0] == "done" and message[1] == self._run:
                        break
            for sem in (*self._free, *self._filled):
                while sem.acquire(False):
                    pass
        except BaseException:
            self.close()
            raise
        self._pending = self._running = False

    def close(self) -> None:
        """Stop the workers and release the ring."""
        _kill(self._procs)
        for conn in (*self._commands, *self._replies):
            conn.close()
        self._procs, self._commands, self._replies = [], [], []
        self._free, self._filled = [], []
        self._header = self._data = None
        if self._ring is not None:
            try:
                self._ring.close()
            except BufferError:  # a view still refers to it: the collector frees it later
                pass
            self._ring = None
        self._pending = self._running = False


def _kill(procs: list[Any]) -> None:
    for proc in procs:
        if proc.exitcode is None:
            proc.kill()
        proc.join()


def _serve(pool: ReaderPool, worker: int, commands: Any, replies: Any, parent: int) -> None:
    """A worker process: for each run, fill the slots of batches ``worker::workers``."""
    # Ctrl-C and SIGTERM are the learner's to handle: it finishes its step, saves and
    # closes the pool; a worker whose learner is gone ends on its own (below).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A consumer kept waiting asks where this worker is (ReaderPool._report_stall).
    # It came blocked (ReaderPool.start): by default it would end this process.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
    # The collector would touch every object inherited from the learner (copying its
    # pages) and could run their finalizers here; this loop makes no garbage cycles.
    gc.disable()
    header, data, free = pool._header, pool._data, pool._free[worker]
    assert header is not None and data is not None
    planner, slots, workers = pool.planner, pool.slots, pool.workers
    reader = planner.source.reader()
    while True:
        try:
            while not commands.poll(0.5):
                if os.getppid() != parent:  # the learner is gone
                    return
            run, epoch, start = commands.recv()
        except (EOFError, OSError):  # the learner closed the pool or is gone
            return
        for j, item in enumerate(planner.plan(epoch, start=start)):
            if j % workers != worker:
                continue
            while not free.acquire(timeout=0.5):  # the consumer has not taken batch j - slots
                if os.getppid() != parent:
                    return
            if header[-1] != run:  # cancelled
                break
            slot = j % slots
            error = None
            try:
                idx = planner.share(item)
                b, t, d = planner.source.batch_shape(idx)
                if b * t * d > pool.slot_floats:
                    raise RuntimeError(
                        f"batch {j} needs {b * t * d} floats, the ring's slots hold {pool.slot_floats}"
                    )
                at = slot * pool.slot_floats
                reader.fill(idx, data[at : at + b * t * d].reshape(b, t, d))
                header[slot * _SLOT_HEADER : (slot + 1) * _SLOT_HEADER] = (j + 1, b, t, idx[0])
            except BaseException as err:  # noqa: BLE001 (handed to the consumer)
                error = err
                header[slot * _SLOT_HEADER] = -(j + 1)
            pool._filled[slot].release()
            if error is not None:  # after the post: a large error may fill the pipe
                _send_error(replies, run, error)
                break
        replies.send(("done", run))


def _send_error(replies: Any, run: int, err: BaseException) -> None:
    trace = "" if isinstance(err, UserError) else "".join(traceback.format_exception(err))
    try:
        replies.send(("error", run, err, trace))
    except Exception:  # noqa: BLE001  an exception that does not pickle
        replies.send(("error", run, RuntimeError(f"{type(err).__name__}: {err}"), trace))


def timed(batches: Iterator[_T]) -> Generator[tuple[_T, float], None, None]:
    """``(batch, seconds the consumer waited for it)`` for each batch of ``batches``;
    closing it closes ``batches`` (and so stops its read-ahead)."""
    try:
        while True:
            began = time.monotonic()
            try:
                batch = next(batches)
            except StopIteration:
                return
            yield batch, time.monotonic() - began
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
