"""Planned batches: :class:`BucketBatches` cuts each epoch's batches with the one planner
(:func:`~asrkit.loader.batch.plan_buckets`), shards the training set among learners as a
:class:`Sharding` says (:func:`shard_batches`), and reads batches ahead of the training
step through :mod:`asrkit.loader.prefetch` (worker processes filling shared memory, or
threads), each worker through its own reader.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from asrkit.errors import DataError
from asrkit.loader.batch import Batch, Utterance, plan_buckets
from asrkit.loader.prefetch import Prefetcher, ReaderPool, can_fork
from asrkit.loader.sources import UtteranceReader, UtteranceSource, as_source

log = logging.getLogger(__name__)


class BucketBatches:
    """Epoch-by-epoch batches: fixed length buckets planned from frame counts alone, their
    order reshuffled per epoch from ``seed``; features are read as the batches are used.

    With ``world > 1`` the buckets are *global* batches (at least ``world`` utterances
    each) and this learner reads utterances ``rank::world`` of each, so ``world`` learners
    together take the same steps as one process would; every learner sees the same
    number of batches in the same order.

    Reading ahead in worker processes (``loader="process"``) starts a
    :class:`~asrkit.loader.prefetch.ReaderPool` on first use (or :meth:`start`) that
    lives until :meth:`close`; use the object as a context manager.

    Args:
        source: the set (a list of utterances is taken as an in-memory set).
        max_frames, max_batch: see :func:`~asrkit.loader.batch.plan_buckets` (global,
            across learners).
        shuffle: reshuffle the batch order every epoch.
        seed: base seed; epoch ``e`` uses ``seed + e``.
        rank, world: this learner's share of each batch.
        indices: the utterances of ``source`` to batch (default all; a learner's shard).
        bucket_share: ``(k, n)``: this learner takes whole buckets ``k::n`` of each epoch's
            order (sharded validation) instead of a share of every bucket.
        prefetch: batches read ahead by background workers (0: read when asked for).
        workers: reading workers.
        loader: ``process`` (forked worker processes, where ``fork`` is available) or
            ``thread`` (see :mod:`asrkit.loader.prefetch`).
    """

    def __init__(
        self,
        source: UtteranceSource | Sequence[Utterance],
        *,
        max_frames: int,
        max_batch: int,
        shuffle: bool = True,
        seed: int = 1,
        rank: int = 0,
        world: int = 1,
        indices: Sequence[int] | None = None,
        bucket_share: tuple[int, int] = (0, 1),
        prefetch: int = 4,
        workers: int = 1,
        loader: str = "process",
    ) -> None:
        self.source = as_source(source)
        chosen = np.arange(len(self.source)) if indices is None else np.asarray(indices, np.int64)
        self.buckets = [
            chosen[b]
            for b in plan_buckets(
                self.source.lengths[chosen], max_frames=max_frames, max_batch=max_batch, min_batch=world
            )
        ]
        self.shuffle, self.seed, self.rank, self.world = shuffle, seed, rank, world
        self.bucket_share = bucket_share
        self.prefetch, self.workers = prefetch, workers
        self.pool = (
            ReaderPool(self, depth=prefetch, workers=workers)
            if prefetch > 0 and loader == "process" and can_fork()
            else None
        )
        #: Put batches in page-locked memory as they are read (for CUDA).
        self.pin_memory = False
        self._largest: int | None = None

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(range(self.bucket_share[0], len(self.buckets), self.bucket_share[1]))

    def __enter__(self) -> BucketBatches:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the reading workers now (processes: forking before the training step has
        filled the learner's memory makes the fork cheaper)."""
        if self.pool is not None:
            self.pool.start()

    def close(self) -> None:
        """Stop the reading workers."""
        if self.pool is not None:
            self.pool.close()

    def plan(self, epoch: int, *, start: int = 0) -> Iterator[np.ndarray]:
        """Epoch ``epoch``'s buckets in order, from its ``start``-th on (nothing is read)."""
        order = list(range(len(self.buckets)))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        k, n = self.bucket_share
        for b in order[k::n][start:]:
            yield self.buckets[b]

    def epoch(self, epoch: int, *, start: int = 0) -> Generator[Batch, None, None]:
        """Epoch ``epoch``'s batches from its ``start``-th on (a resumed run reads none of
        the ones before)."""
        if self.pool is not None:
            yield from self.pool.run(epoch, start=start)
            return
        with self.loader(self.plan(epoch, start=start)) as batches:
            yield from batches

    def loader(self, plan: Iterator[np.ndarray]) -> Prefetcher[Batch]:
        """The batches of ``plan``'s buckets read by threads (or, with ``prefetch == 0``,
        when asked for)."""
        return Prefetcher(plan, self._read, self.source, depth=self.prefetch, threads=self.workers)

    def share(self, bucket: np.ndarray) -> np.ndarray:
        """The utterances of ``bucket`` that this learner reads."""
        return bucket[self.rank :: self.world]

    def finish(self, batch: Batch, bucket: np.ndarray) -> Batch:
        """``batch`` (this learner's share of ``bucket``) with its loss normaliser."""
        batch.norm = len(bucket) / self.world
        batch.global_utts = len(bucket)
        return batch.pin_memory() if self.pin_memory else batch

    def _read(self, reader: UtteranceReader, bucket: np.ndarray) -> Batch:
        return self.finish(reader.read_batch(self.share(bucket)), bucket)

    def schedule_position(self, step: int) -> float:
        """Where the learning-rate schedule stands after ``step`` steps of this learner,
        in steps (learners in lock-step: ``step`` itself)."""
        return float(step)

    def largest_batch(self) -> int:
        """Floats in the largest padded feature block of any bucket's share (the size of
        a read-ahead slot)."""
        if self._largest is None:
            self._largest = 0
            for bucket in self.buckets:
                share = self.share(bucket)
                if len(share):
                    b, t, d = self.source.batch_shape(share)
                    self._largest = max(self._largest, b * t * d)
        return self._largest


class Progress(Protocol):
    """The samples all learners together have processed, as a learner that does not step
    in lock-step with the others knows it (ADPSGD's and HYBRID's averaging threads)."""

    def samples(self) -> float:
        """At least this many samples were processed by all learners together."""
        ...


@dataclass(frozen=True)
class Sharding:
    """How learners share the training set; :func:`shard_batches` applies it.

    ``shards == 1`` (lock-step: a single process, SYNC, delay-by-one): every learner plans
    the same global batches and reads its share ``rank::world`` of each, so all take the
    same steps. ``shards > 1`` (ADPSGD: a shard per learner; HYBRID: a shard per group):
    the set is cut into ``shards`` disjoint shards (every ``shards``-th utterance); shard
    ``shard`` is batched with the batch caps divided by ``shards`` (so ``optim.lr`` keeps
    its meaning for the global batch), its members split each batch ``rank::world``, and
    it is cycled until ``progress`` says that all learners together have processed the
    set once more (a global epoch; a fast learner takes more steps).
    """

    rank: int = 0
    world: int = 1
    shards: int = 1
    shard: int = 0
    progress: Progress | None = None

    @property
    def lockstep(self) -> bool:
        """Every learner takes the same steps: one shard, and no global progress to cycle
        it by (HYBRID with one group has one shard, but its leader still averages by
        progress, so it stops and resumes at epoch ends as ADPSGD does)."""
        return self.shards == 1 and self.progress is None


class ProgressBatches(BucketBatches):
    """A shard's own batches, cycled; global epoch ``e`` ends once all learners together
    have processed ``(e + 1) x`` the training set (``total`` utterances)."""

    def __init__(self, source: UtteranceSource, *, total: int, progress: Progress, **kwargs) -> None:
        super().__init__(source, **kwargs)
        self.total, self.progress = total, progress

    def plan(self, epoch: int, *, start: int = 0) -> Iterator[np.ndarray]:
        # Endless: the consumer stops once the global progress says the epoch is over.
        # ``start``: batches of this epoch already taken (a learner resumed after a stop).
        rng = random.Random(self.seed * 100_003 + epoch)

        def endless() -> Iterator[np.ndarray]:
            while True:
                order = list(range(len(self.buckets)))
                if self.shuffle:
                    rng.shuffle(order)
                for b in order:
                    yield self.buckets[b]

        return itertools.islice(endless(), start, None)

    def epoch(self, epoch: int, *, start: int = 0) -> Generator[Batch, None, None]:
        goal = (epoch + 1) * self.total
        if self.progress.samples() >= goal:
            return
        with contextlib.closing(super().epoch(epoch, start=start)) as batches:  # stops its read-ahead
            for batch in batches:
                if self.progress.samples() >= goal:
                    return
                yield batch

    def schedule_position(self, step: int) -> float:
        # Global progress, in this shard's steps per epoch.
        return self.progress.samples() / max(1, self.total) * len(self)


def check_enough(source: UtteranceSource, parts: int) -> None:
    """Every learner (or group) needs at least one utterance of its own."""
    if len(source) < parts:
        raise DataError(
            f"{len(source)} training utterances cannot be shared among {parts} learners "
            "or groups; use fewer learners or more data"
        )


def shard_batches(
    source: UtteranceSource,
    sharding: Sharding,
    *,
    seed: int,
    max_frames: int,
    max_batch: int,
    prefetch: int = 4,
    workers: int = 1,
    loader: str = "process",
) -> BucketBatches:
    """This learner's training batches under ``sharding``; ``max_frames``/``max_batch``
    cap the *global* batch (see :class:`Sharding`)."""
    if sharding.shards == 1:  # the same global batches planned by every learner
        if sharding.world > 1:
            check_enough(source, sharding.world)
        return BucketBatches(
            source,
            seed=seed,
            rank=sharding.rank,
            world=sharding.world,
            max_frames=max_frames,
            max_batch=max_batch,
            prefetch=prefetch,
            workers=workers,
            loader=loader,
        )
    if sharding.progress is None:
        raise ValueError("sharded batches end their epochs by a global progress: give Sharding.progress")
    check_enough(source, sharding.shards)
    parts = sharding.shards
    return ProgressBatches(
        source,
        total=len(source),
        progress=sharding.progress,
        indices=range(sharding.shard, len(source), parts),
        seed=seed + sharding.shard,
        rank=sharding.rank,
        world=sharding.world,
        max_frames=max(1, max_frames // parts),
        max_batch=max(1, max_batch // parts),
        prefetch=prefetch,
        workers=workers,
        loader=loader,
    )
