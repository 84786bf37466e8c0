"""Streaming training data: planning from metadata, batches read on demand and ahead,
equality with the in-memory path, resume without reading earlier batches, listed corpora."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from asrkit.data.datadir import DataDir, read_data_dir, read_kaldi_map, read_utt2num_frames, write_data_dir
from asrkit.data.listed import list_corpus
from asrkit.errors import DataError
from asrkit.features.cmvn import cmvn_stats
from asrkit.loader.archive import StreamingSource
from asrkit.loader.batch import Batch, CmvnNormalizer, Utterance
from asrkit.loader.opening import load_utterances, open_data_dir
from asrkit.loader.planning import BucketBatches
from asrkit.loader.prefetch import Prefetcher, can_fork
from asrkit.loader.sources import InMemorySource, UtteranceReader
from asrkit.models import ModelConfig, build_model
from asrkit.targets import Tokenizer, TokenizerConfig, read_frame_counts, train_tokenizer
from asrkit.training import OptimConfig, ScheduleConfig, SpecAugConfig, TrainConfig, Trainer
from tests import kaldi_fixtures as fx

DIM = 6
WORDS = ["YES", "NO", "GO", "A B C", "TWO", "STOP", "NINE", "ERASE F"]


def _feature_dir(root: Path, *, utts: int = 14) -> Path:
    """A data dir whose features lie in two arks, one plain (FM), one compressed (CM),
    with utt2num_frames, global and per-speaker CMVN stats (no audio is needed)."""
    data = root / "data" / "train"
    ids = [f"{spk}-u{i:02d}" for i in range(utts) for spk in (("s1", "s2")[i % 2],)]
    ids.sort()
    frames = {utt: 9 + (7 * k) % 23 for k, utt in enumerate(ids)}
    mats = fx.random_features(3, frames, dim=DIM)
    half = len(ids) // 2
    scp = {}
    for name, chunk, kind in (("a.ark", ids[:half], None), ("b.ark", ids[half:], "CM")):
        offsets = fx.write_mat_ark(root / name, {u: mats[u] for u in chunk}, compress_as=kind)
        scp.update({u: f"{root / name}:{o}" for u, o in offsets.items()})
    write_data_dir(
        data,
        DataDir(
            wav_scp={u: f"/nonexistent/{u}.wav" for u in ids},
            utt2spk={u: u.split("-")[0] for u in ids},
            text={u: WORDS[k % len(WORDS)] for k, u in enumerate(ids)},
        ),
    )
    (data / "feats.scp").write_text("".join(f"{u} {scp[u]}\n" for u in ids))
    (data / "utt2num_frames").write_text("".join(f"{u} {frames[u]}\n" for u in ids))
    stats = fx.write_mat_ark(
        root / "cmvn.ark",
        {
            spk: cmvn_stats(np.concatenate([mats[u] for u in ids if u.startswith(spk)])).astype(np.float64)
            for spk in ("s1", "s2")
        },
    )
    (data / "cmvn.scp").write_text("".join(f"{s} {root / 'cmvn.ark'}:{o}\n" for s, o in stats.items()))
    np.save(root / "global.npy", cmvn_stats(np.concatenate(list(mats.values()))))
    return data


@pytest.fixture
def feature_dir(tmp_path: Path) -> Path:
    return _feature_dir(tmp_path)


@pytest.fixture
def tokenizer(feature_dir: Path) -> Tokenizer:
    return train_tokenizer(
        read_kaldi_map(feature_dir / "text"), feature_dir.parent / "tok", TokenizerConfig(kind="char")
    )


def _normalizer(feature_dir: Path, mode: str) -> CmvnNormalizer:
    stats = np.load(feature_dir.parents[1] / "global.npy") if mode == "global" else None
    return CmvnNormalizer(mode, global_stats=stats)


def _same(a: Batch, b: Batch) -> None:
    assert a.utts == b.utts
    assert torch.equal(a.feats, b.feats) and a.feats.dtype == torch.float32
    for name in ("lengths", "targets", "target_lengths"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert (a.norm, a.global_utts) == (b.norm, b.global_utts)


@pytest.mark.parametrize("mode", ["global", "speaker", "none"])
@pytest.mark.parametrize(
    ("prefetch", "workers", "loader"),
    [(0, 1, "thread"), (2, 1, "thread"), (3, 2, "thread"), (2, 1, "process"), (3, 2, "process")],
)
def test_streamed_batches_equal_in_memory_batches(
    feature_dir: Path, tokenizer: Tokenizer, mode: str, prefetch: int, workers: int, loader: str
) -> None:
    normalize = _normalizer(feature_dir, mode)
    stream = open_data_dir(feature_dir, normalize, tokenizer=tokenizer, input_dim=DIM)
    memory = InMemorySource(load_utterances(feature_dir, normalize, tokenizer=tokenizer))
    assert stream.ids == memory.ids and stream.lengths.tolist() == memory.lengths.tolist()
    for rank, world in ((0, 1), (1, 2)):
        settings = {"max_frames": 60, "max_batch": 4, "seed": 5, "rank": rank, "world": world}
        held = BucketBatches(memory, prefetch=0, **settings)
        with BucketBatches(stream, prefetch=prefetch, workers=workers, loader=loader, **settings) as streamed:
            assert [b.tolist() for b in streamed.buckets] == [b.tolist() for b in held.buckets]
            for epoch in (0, 1):
                got, expected = list(streamed.epoch(epoch)), list(held.epoch(epoch))
                assert len(got) == len(expected) == len(streamed)
                for a, b in zip(got, expected, strict=True):
                    _same(a, b)
        assert multiprocessing.active_children() == []


@pytest.mark.parametrize("mode", ["global", "speaker", "none"])
def test_a_batch_of_float_matrices_is_read_in_one_pass_and_equals_the_general_path(
    feature_dir: Path, tokenizer: Tokenizer, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    normalize = _normalizer(feature_dir, mode)
    stream = open_data_dir(feature_dir, normalize, tokenizer=tokenizer, input_dim=DIM)
    plain = [i for i in range(len(stream)) if stream.ark_of[i] == 0]  # a.ark holds FM matrices
    compressed = [i for i in range(len(stream)) if stream.ark_of[i] == 1]
    memory = InMemorySource(load_utterances(feature_dir, normalize, tokenizer=tokenizer))
    expected = memory.reader().read_batch(plain)

    def no_general_path(self, i, *, out=None):  # noqa: ANN001, ANN202
        raise AssertionError(f"utterance {i} took the per-utterance path")

    monkeypatch.setattr("asrkit.loader.archive.ArchiveReader._checked", no_general_path)
    reader = stream.reader()
    _same(reader.read_batch(plain), expected)
    # A compressed matrix in the batch sends it through the per-utterance path.
    with pytest.raises(AssertionError, match="per-utterance path"):
        reader.read_batch(plain[:2] + compressed[:1])
    reader.close()


def test_opening_a_set_reads_one_matrix_and_checks_each_archive_once(
    feature_dir: Path, tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real_open = open

    def counting_open(path, *args, **kwargs):  # noqa: ANN001, ANN202
        if str(path).endswith(".ark"):
            opened.append(Path(path).name)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    source = open_data_dir(feature_dir, _normalizer(feature_dir, "speaker"), tokenizer=tokenizer)
    # The per-speaker stats are read (cmvn.ark); of the features, only the first matrix.
    assert opened.count("a.ark") == 1 and opened.count("b.ark") == 0
    assert isinstance(source, StreamingSource) and source.dim == DIM
    assert source.arks == [str(feature_dir.parents[1] / "a.ark"), str(feature_dir.parents[1] / "b.ark")]


class _Recording(InMemorySource):
    """An in-memory source that records which utterances its readers read, in a file (a
    reader may run in a forked worker process)."""

    def __init__(self, source: StreamingSource, log: Path) -> None:
        super().__init__(source.read_all())
        self.log = log
        log.write_text("")

    @property
    def read_ids(self) -> list[str]:
        return self.log.read_text().split()

    def reader(self) -> UtteranceReader:
        outer, inner = self, super().reader()

        class Reader(UtteranceReader):
            source = outer

            def read(self, indices):  # noqa: ANN001, ANN202
                with open(outer.log, "a") as log:  # one append per batch: atomic
                    log.write("".join(f"{outer.ids[i]}\n" for i in indices))
                return inner.read(indices)

        return Reader()


@pytest.mark.parametrize(("prefetch", "loader"), [(0, "thread"), (3, "thread"), (3, "process")])
def test_a_resumed_epoch_reads_no_batch_before_its_position(
    feature_dir: Path, tokenizer: Tokenizer, tmp_path: Path, prefetch: int, loader: str
) -> None:
    source = _Recording(
        open_data_dir(feature_dir, CmvnNormalizer("none"), tokenizer=tokenizer), tmp_path / "read.log"
    )
    with BucketBatches(
        source, max_frames=50, max_batch=3, seed=2, prefetch=prefetch, loader=loader
    ) as batches:
        plan = [b.tolist() for b in batches.plan(4)]
        start = 3
        got = [b.utts for b in batches.epoch(4, start=start)]
    later = [[source.ids[i] for i in bucket] for bucket in plan[start:]]
    assert got == later
    assert sorted(source.read_ids) == sorted(u for bucket in later for u in bucket)


@pytest.mark.parametrize("loader", ["thread", "process"])
def test_leaving_an_epoch_early_stops_the_read_ahead(
    feature_dir: Path, tokenizer: Tokenizer, tmp_path: Path, loader: str
) -> None:
    source = _Recording(
        open_data_dir(feature_dir, CmvnNormalizer("none"), tokenizer=tokenizer), tmp_path / "read.log"
    )
    batches = BucketBatches(source, max_frames=20, max_batch=1, seed=2, prefetch=2, loader=loader)
    before = threading.active_count()
    epoch = batches.epoch(0)
    next(epoch)
    epoch.close()
    assert threading.active_count() == before
    # The first batch, and at most ``prefetch`` (+1 being read) ahead of it.
    assert len(source.read_ids) <= 1 + 2 + 1
    # Worker processes outlive an epoch (they are forked once); the next epoch, started
    # after one was left, is read whole; closing stops them.
    assert len(list(batches.epoch(1))) == len(batches)
    batches.close()
    assert multiprocessing.active_children() == []


def test_a_read_error_reaches_the_consumer_at_its_batch() -> None:
    class Failing(UtteranceReader):
        def read(self, indices):  # noqa: ANN001, ANN202
            raise AssertionError("unused")

    def make(reader: UtteranceReader, item: object) -> int:
        if item == 3:
            raise DataError("feats.scp: utterance 'u3': cannot read features")
        return int(item)  # type: ignore[call-overload]

    source = InMemorySource([])
    source.reader = Failing  # type: ignore[method-assign]
    got = []
    with (
        pytest.raises(DataError, match="'u3'"),
        Prefetcher(iter(range(10)), make, source, depth=2, threads=2) as batches,
    ):
        got.extend(batches)
    assert got == [0, 1, 2]


def _tiny_source(utts: int = 10, *, on_read: Callable[[str], None] | None = None) -> InMemorySource:
    """Utterances u0..u9 in memory (u9 longest); ``on_read(utt)`` runs in the reader before
    each utterance is read (in a worker process when one reads)."""
    rng = np.random.default_rng(0)
    source = InMemorySource(
        [
            Utterance(
                f"u{k}",
                rng.standard_normal((5 + k, DIM)).astype(np.float32),
                np.array([1, 2], dtype=np.int64),
            )
            for k in range(utts)
        ]
    )
    if on_read is not None:
        inner_reader = source.reader

        class Watched(UtteranceReader):
            def __init__(self) -> None:
                self.source, self.inner = source, inner_reader()

            def read(self, indices):  # noqa: ANN001, ANN202
                for i in indices:
                    on_read(source.ids[i])
                return self.inner.read(indices)

        source.reader = Watched  # type: ignore[method-assign]
    return source


@pytest.mark.parametrize("loader", ["thread", "process"])
def test_a_worker_read_error_reaches_the_consumer_at_its_batch(loader: str) -> None:
    def fail(utt: str) -> None:
        if utt == "u3":
            raise DataError("feats.scp: utterance 'u3' at a.ark:1234: cannot read features")

    source = _tiny_source(on_read=fail)
    got: list[str] = []
    with BucketBatches(
        source, max_frames=1000, max_batch=1, shuffle=False, prefetch=3, workers=2, loader=loader
    ) as batches:
        with pytest.raises(DataError, match="'u3' at a.ark:1234") as caught:
            got.extend(b.utts[0] for b in batches.epoch(0))
        assert not getattr(caught.value, "__notes__", [])  # a user error stays one line
        # Longest first: u9 .. u4 came before u3, in order; nothing after it was delivered.
        assert got == [f"u{k}" for k in range(9, 3, -1)]
        # The next epoch starts afresh (and fails at the same batch).
        with pytest.raises(DataError, match="'u3'"):
            list(batches.epoch(1))
    assert multiprocessing.active_children() == []


@pytest.mark.skipif(not can_fork(), reason="worker processes need fork")
def test_a_dead_reading_worker_stops_the_consumer_instead_of_hanging() -> None:
    def die(utt: str) -> None:
        if utt == "u5":
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would

    source = _tiny_source(on_read=die)
    got: list[str] = []
    with (
        BucketBatches(
            source, max_frames=1000, max_batch=1, shuffle=False, prefetch=2, loader="process"
        ) as batches,
        pytest.raises(RuntimeError, match=r"worker process \d+ ended \(signal 9\) before batch 4"),
    ):
        got.extend(b.utts[0] for b in batches.epoch(0))
    assert got == ["u9", "u8", "u7", "u6"]
    assert multiprocessing.active_children() == []


@pytest.mark.skipif(not can_fork(), reason="worker processes need fork")
def test_a_live_worker_that_delivers_nothing_is_reported_with_its_stack(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A worker that is alive but stuck (a CI run hung so, with only the consumer's stack in
    the log): after STALL_REPORT_S the consumer warns and the worker prints its stack."""
    import time

    from asrkit.loader import prefetch

    def stall(utt: str) -> None:
        if utt == "u7":
            time.sleep(1.5)  # stands for a worker stuck in a read

    monkeypatch.setattr(prefetch, "STALL_REPORT_S", 0.3)
    source = _tiny_source(on_read=stall)
    with BucketBatches(
        source, max_frames=1000, max_batch=1, shuffle=False, prefetch=2, loader="process"
    ) as batches:
        got = [b.utts[0] for b in batches.epoch(0)]
    assert got == [f"u{k}" for k in range(9, -1, -1)]  # the slow batch still came, in order
    warned = [r.getMessage() for r in caplog.records if "has not come from" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("batch 2 of this epoch"), warned
    err = capfd.readouterr().err
    assert "in stall" in err and "Current thread" in err, err[-2000:]


#: Seconds a forked child sleeps before it runs anything else (set by a test; see below).
_PAUSE_AFTER_FORK = [0.0]


def _pause_after_fork() -> None:
    if _PAUSE_AFTER_FORK[0]:
        import time

        time.sleep(_PAUSE_AFTER_FORK[0])


if can_fork():
    os.register_at_fork(after_in_child=_pause_after_fork)


@pytest.mark.skipif(not can_fork(), reason="worker processes need fork")
def test_a_worker_that_starts_late_survives_the_stall_report(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """CI: a learner waited 30 s for its first batch from a worker forked just before
    (the machine busy or paused), asked it for its stack (SIGUSR1), and so killed it: the
    worker had not installed its handler yet, and SIGUSR1 ends a process by default ("the
    batch-reading worker process ... ended (signal 10) before batch 0 was read"). A worker
    takes the signal only once it can answer it."""
    from asrkit.loader import prefetch

    monkeypatch.setattr(prefetch, "STALL_REPORT_S", 0.3)
    _PAUSE_AFTER_FORK[0] = 1.5  # the new worker runs nothing for 1.5 s
    try:
        source = _tiny_source()
        with BucketBatches(
            source, max_frames=1000, max_batch=1, shuffle=False, prefetch=2, workers=1, loader="process"
        ) as batches:
            batches.start()
            _PAUSE_AFTER_FORK[0] = 0.0
            got = [b.utts[0] for b in batches.epoch(0)]
    finally:
        _PAUSE_AFTER_FORK[0] = 0.0
    assert got == [f"u{k}" for k in range(9, -1, -1)]
    warned = [r.getMessage() for r in caplog.records if "has not come from" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("batch 0 of this epoch"), warned
    assert "Current thread" in capfd.readouterr().err  # it answered once it could
    assert multiprocessing.active_children() == []


@pytest.mark.skipif(not can_fork(), reason="worker processes need fork")
def test_a_reader_pool_reads_one_epoch_at_a_time_and_checks_its_plan() -> None:
    source = _tiny_source()
    # More read-ahead slots than a page of slot headers holds.
    with BucketBatches(
        source, max_frames=1000, max_batch=1, seed=3, prefetch=600, loader="process"
    ) as batches:
        first = batches.epoch(0)
        next(first)
        assert [b.utts for b in batches.epoch(1)] == [
            [source.ids[i] for i in bucket] for bucket in batches.plan(1)
        ]
        with pytest.raises(RuntimeError, match="one epoch at a time"):
            next(first)
        # A planner changed after its workers forked would pair features with other
        # batches' targets: the consumer notices.
        batches.seed = 4
        with pytest.raises(RuntimeError, match="planner changed after the workers started"):
            list(batches.epoch(2))
    assert multiprocessing.active_children() == []


def test_one_utt2num_frames_reader_gives_every_reader_the_same_error(
    feature_dir: Path, tokenizer: Tokenizer, tmp_path: Path
) -> None:
    path = feature_dir / "utt2num_frames"
    lines = path.read_text().splitlines()
    utt = lines[2].split()[0]
    lines[2] = f"{utt} 12.5"
    path.write_text("\n".join(lines) + "\n")
    expect = f"{path}:3: utterance '{utt}' has frame count '12.5', expected an integer >= 0"
    readers: list[Callable[[], object]] = [
        lambda: open_data_dir(feature_dir, CmvnNormalizer("none"), tokenizer=tokenizer),
        lambda: read_frame_counts(str(feature_dir)),
        lambda: list_corpus(feature_dir, tmp_path / "listed", hours=0.001),
    ]
    for read in readers:
        with pytest.raises(DataError) as err:
            read()
        assert expect in str(err.value)
    assert not (tmp_path / "listed").exists()
    path.write_text("")
    with pytest.raises(DataError, match="utt2num_frames: empty"):
        read_utt2num_frames(path)


def test_a_listed_corpus_is_a_valid_data_dir_of_the_same_matrices(
    feature_dir: Path, tokenizer: Tokenizer, tmp_path: Path
) -> None:
    info = list_corpus(feature_dir, tmp_path / "listed", hours=0.004)  # 14 s: several copies
    source = open_data_dir(tmp_path / "listed", CmvnNormalizer("none"), tokenizer=tokenizer)
    original = open_data_dir(feature_dir, CmvnNormalizer("none"), tokenizer=tokenizer)
    assert info["copies"] > 1 and len(source) == info["utterances"] == info["copies"] * len(original)
    data = read_data_dir(tmp_path / "listed")  # sorted, speaker-prefixed, spk2utt consistent
    assert data.utt2spk["x0001-s1-u00"] == "x0001-s1"
    assert source.lengths.sum() == info["frames"]
    first, copy = original.read_all(), source.reader().read(range(len(original), 2 * len(original)))
    for a, b in zip(first, copy, strict=True):
        assert b.utt == "x0001-" + a.utt and np.array_equal(a.feats, b.feats)
        assert np.array_equal(a.tokens, b.tokens)


def test_streamed_and_in_memory_training_give_bitwise_equal_weights(
    feature_dir: Path, tokenizer: Tokenizer, tmp_path: Path
) -> None:
    normalize = _normalizer(feature_dir, "global")
    weights = []
    for name, data in (
        ("stream", open_data_dir(feature_dir, normalize, tokenizer=tokenizer, keep_text=True)),
        ("memory", load_utterances(feature_dir, normalize, tokenizer=tokenizer)),
    ):
        torch.manual_seed(0)
        model = build_model(
            ModelConfig(size="tiny", dropout=0.2), input_dim=DIM, num_tokens=tokenizer.num_tokens
        )
        trainer = Trainer(
            model,
            data,
            data,
            tokenizer=tokenizer,
            exp_dir=tmp_path / name,
            cfg=TrainConfig(epochs=2, max_frames=60, max_batch=4, progress=False, device="cpu", prefetch=2),
            optim=OptimConfig(lr=1e-2),
            schedule=ScheduleConfig(warmup_steps=2),
            specaug=SpecAugConfig(freq_width=2, time_width=3),
            meta={"model": model.args},
            seed=3,
        )
        state = trainer.fit()
        assert state.data_wait_s >= 0 and state.train_s > 0 and state.first_step_time
        assert state.history[-1]["data_wait_s"] >= 0
        weights.append((model.state_dict(), state.history))
    (a, ha), (b, hb) = weights
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [h["loss"] for h in ha] == [h["loss"] for h in hb]


def test_max_steps_stops_training_early(feature_dir: Path, tokenizer: Tokenizer, tmp_path: Path) -> None:
    data = open_data_dir(feature_dir, CmvnNormalizer("none"), tokenizer=tokenizer, keep_text=True)
    model = build_model(ModelConfig(size="tiny"), input_dim=DIM, num_tokens=tokenizer.num_tokens)
    trainer = Trainer(
        model,
        data,
        data,
        tokenizer=tokenizer,
        exp_dir=tmp_path / "exp",
        cfg=TrainConfig(epochs=5, max_frames=40, max_batch=2, progress=False, device="cpu", max_steps=3),
        optim=OptimConfig(),
        schedule=ScheduleConfig(warmup_steps=0),
        specaug=SpecAugConfig(enabled=False),
        meta={"model": model.args},
    )
    state = trainer.fit()
    assert state.step == 3 and state.epoch == 1 and len(state.history) == 1


@pytest.mark.skipif(
    not Path("/lib/x86_64-linux-gnu/libc.so.6").exists()
    and not Path("/usr/lib/x86_64-linux-gnu/libc.so.6").exists(),
    reason="glibc's mallopt only",
)
def test_training_processes_keep_freed_memory_for_reuse() -> None:
    """A step's blocks of up to 32 MB come from the heap and, freed and allocated again,
    reuse pages already mapped once ``retain_freed_memory`` is set; the simulator's
    ``map_large_blocks`` maps them outside the heap again. (glibc's defaults sit on the
    edge here: their dynamic thresholds trim or keep the same blocks depending on the
    heap's top, so they are not asserted.) In fresh processes: the setting is
    process-wide."""
    import subprocess
    import sys

    probe = """
import resource, sys
import torch
from asrkit.training import allocator
for setting in sys.argv[1:]:
    assert getattr(allocator, setting)() is True
def in_heap(address):
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            low, high = (int(x, 16) for x in line.split()[0].split("-"))
            if low <= address < high:
                return True
    return False
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):  # a step's blocks (torch: 4 KB pages), allocated, touched, freed
    before = faults()
    blocks = [torch.ones(n << 20, dtype=torch.uint8) for n in (8, 16, 24)]
    heap = [in_heap(b.data_ptr()) for b in blocks]
    del blocks
print(sum(heap), faults() - before)  # the last step's
"""
    pages = (48 << 20) // 4096

    def probe_with(*settings: str) -> tuple[int, int]:
        done = subprocess.run(
            [sys.executable, "-c", probe, *settings], capture_output=True, text=True, check=True
        )
        in_heap, faults = done.stdout.split()[-2:]
        return int(in_heap), int(faults)

    in_heap, faults = probe_with("retain_freed_memory")
    assert in_heap == 3 and faults < pages // 20  # the heap's pages reused
    in_heap, faults = probe_with("retain_freed_memory", "map_large_blocks")
    assert in_heap == 0 and faults > pages // 2  # mapped afresh every step


@pytest.mark.skipif(
    not Path("/lib/x86_64-linux-gnu/libc.so.6").exists()
    and not Path("/usr/lib/x86_64-linux-gnu/libc.so.6").exists(),
    reason="glibc's mallopt only",
)
def test_where_the_blocks_come_from_does_not_change_the_numbers(tmp_path: Path) -> None:
    """A few BLSTM steps with frame CE on random data (blocks above glibc's mmap threshold)
    give bitwise the same weights with the training allocator's settings as without."""
    import subprocess
    import sys

    probe = """
import sys
import torch
import torch.nn.functional as F
from asrkit.models.lstm import ModelConfig, build_model
from asrkit.training import allocator
if sys.argv[2] == "retain":
    assert allocator.retain_freed_memory()
torch.manual_seed(0)
torch.set_num_threads(1)
shape = ModelConfig(size="demo", hidden=64, layers=2, stack=1, subsample=1, num_classes=300)
model = build_model(shape, input_dim=40, num_tokens=10)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
x, lengths = torch.randn(16, 300, 40), torch.full((16,), 300)
y = torch.randint(0, 300, (16 * 300,))
for _ in range(3):
    loss = F.cross_entropy(model(x, lengths)["frame"].flatten(0, 1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.save(model.state_dict(), sys.argv[1])
"""
    for how in ("default", "retain"):
        subprocess.run([sys.executable, "-c", probe, str(tmp_path / how), how], check=True)
    default, retain = (torch.load(tmp_path / how) for how in ("default", "retain"))
    assert default.keys() == retain.keys()
    assert all(torch.equal(default[k], retain[k]) for k in default)


def test_in_memory_alignments_leave_the_callers_utterances_alone() -> None:
    feats = np.zeros((6, 3), dtype=np.float32)
    utts = [Utterance(f"u{i}", feats, np.array([1], dtype=np.int64)) for i in range(3)]
    source = InMemorySource(utts)
    aligned = source.with_alignments({"u0": np.arange(6), "u2": np.arange(6) + 10}, step=2)
    assert [u.utt for u in aligned.read_all()] == ["u0", "u2"]
    assert aligned.read_all()[1].ali.tolist() == [10, 12, 14]
    assert all(u.ali is None for u in utts) and all(u.ali is None for u in source.read_all())


def test_a_damaged_feature_value_is_named_without_numpys_overflow_warning() -> None:
    """Seen in CI logs: values near float32's largest overflowed the sum-of-squares check
    (a RuntimeWarning) before the utterance was named."""
    import warnings
    from types import SimpleNamespace

    from asrkit.loader.archive import check_values

    source = SimpleNamespace(
        scp=Path("data/train/feats.scp"), ids=["a", "b"], where=lambda i: f"raw.1.ark:{i}"
    )
    feats = np.zeros((2, 3, 4), dtype=np.float32)
    check_values(feats, source, [0, 1], [3, 3])  # normal features: nothing to say
    feats[1, 2, 3] = 3.0e38
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(
            DataError, match=r"utterance 'b' at raw.1.ark:1: feature value 3e\+38 at frame 2, dim 3"
        ):
            check_values(feats, source, [0, 1], [3, 3])
