"""The trainer-strategy seam: the trainer meets a strategy at six points, talks
to the other learners through the communicator it is handed, and takes its batches from
the planner under the strategy's sharding. Whole trainers run here as simulated learners
of the in-process fake communicator (the torchrun path: tests/integration)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from asrkit.comm import SoloCommunicator
from asrkit.distributed.config import strategy_config
from asrkit.distributed.fake import FakeCommunicator, FakeWorld
from asrkit.distributed.flat import flatten
from asrkit.distributed.groups import make_groups
from asrkit.distributed.strategies import join
from asrkit.loader.batch import Utterance
from asrkit.loader.planning import ProgressBatches, Sharding, shard_batches
from asrkit.loader.sources import InMemorySource
from asrkit.models import ModelConfig, build_model
from asrkit.targets import Tokenizer, TokenizerConfig, train_tokenizer
from asrkit.training import OptimConfig, ScheduleConfig, SpecAugConfig, Strategy, TrainConfig, Trainer

pytestmark = pytest.mark.timeout(120)

TEXTS = {f"spk{k % 3}-u{k:02d}": text for k, text in enumerate(["A B", "B A C", "C C A", "A", "B C"] * 3)}
DIM = 8


def _tokenizer(where: Path) -> Tokenizer:
    return train_tokenizer(TEXTS, where, TokenizerConfig(kind="char"))


def _utts(tokenizer: Tokenizer) -> list[Utterance]:
    rng = np.random.default_rng(0)
    utts = []
    for utt, text in TEXTS.items():
        tokens = np.asarray(tokenizer.encode(text), dtype=np.int64)
        frames = [
            np.sin(np.arange(DIM) * (int(t) + 1) * 0.37) + 0.05 * rng.standard_normal(DIM)
            for t in tokens
            for _ in range(3)
        ]
        utts.append(Utterance(utt, np.asarray(frames, dtype=np.float32), tokens, text))
    return utts


def _trainer(where: Path, *, comm=None, strategy=None, epochs: int = 2) -> Trainer:
    torch.manual_seed(0)
    tokenizer = _tokenizer(where / "tok")
    utts = _utts(tokenizer)
    model = build_model(
        ModelConfig(size="tiny", dropout=-1.0), input_dim=DIM, num_tokens=tokenizer.num_tokens
    )
    return Trainer(
        model,
        utts,
        utts[:4],
        tokenizer=tokenizer,
        exp_dir=where / "exp",
        cfg=TrainConfig(epochs=epochs, max_frames=120, max_batch=4, progress=False, device="cpu", prefetch=0),
        optim=OptimConfig(name="sgd", lr=0.05, momentum=0.0),
        schedule=ScheduleConfig(warmup_steps=0, anneal="none"),
        specaug=SpecAugConfig(enabled=False),
        meta={"model": model.args},
        comm=comm,
        strategy=strategy,
        seed=0,
    )


class Spy(Strategy):
    """The single process's strategy, recording every attribute the trainer reads."""

    def __init__(self) -> None:
        super().__init__()
        self.read: list[str] = []

    def __getattribute__(self, name: str):
        if not name.startswith("_") and name != "read":
            object.__getattribute__(self, "read").append(name)
        return object.__getattribute__(self, name)


#: What a strategy is: its six points (the state's two methods count as one) and its
#: lock-step flag.
POINTS = {"wrap", "before_step", "after_backward", "after_step", "finish", "state_dict", "load_state_dict"}


def test_a_strategy_is_its_six_points() -> None:
    # Besides the points, two declarations the trainer reads: lock-step, the gradient's share.
    assert {name for name in vars(Strategy) if not name.startswith("_")} == POINTS | {
        "lockstep",
        "gradient_share",
    }


def test_the_trainer_meets_a_strategy_at_its_six_points_only(tmp_path: Path) -> None:
    spy = Spy()
    trainer = _trainer(tmp_path, strategy=spy)
    spy.read.clear()  # the planner read the sharding when the trainer was built
    trainer.fit()
    points = POINTS
    # lockstep is read from the sharding (the one place it is decided).
    assert set(spy.read) - {"lockstep", "gradient_share", "sharding"} <= points
    steps = trainer.state.step
    calls = [name for name in spy.read if name in points]
    assert calls[0] == "wrap" and calls.count("wrap") == 1
    for point in ("before_step", "after_backward", "after_step"):
        assert calls.count(point) == steps
    assert calls.count("finish") == 1
    assert calls.count("state_dict") == 2  # a resume state per epoch


def test_a_learner_alone_sums_agrees_and_waits_as_the_identity() -> None:
    solo = SoloCommunicator()
    tensor = torch.tensor([1.5, 2.0])
    solo.all_reduce(tensor)
    solo.broadcast(tensor, src=0)
    assert tensor.tolist() == [1.5, 2.0]
    assert solo.all_gather_object({"a": 1}) == [{"a": 1}]
    assert solo.barrier().wait() is None
    assert solo.data_parallel(torch.nn.Linear(2, 2)).__class__ is torch.nn.Linear
    groups = make_groups(strategy_config("adpsgd", learners=2), solo)
    assert groups.world is solo and groups.pairs is None  # a learner alone makes no groups
    with pytest.raises(RuntimeError, match="no partner"):
        solo.exchange(tensor, 1)


def test_groups_are_made_in_one_order_for_every_strategy() -> None:
    """Every learner makes every group in the same order (torch.distributed requires it):
    a gloo world first, then the strategy's own."""

    def made(name: str, **settings) -> list:
        def learner(comm: FakeCommunicator):
            groups = make_groups(strategy_config(name, learners=4, **settings), comm)
            return [None if g is None else g.members for g in (groups.pairs, groups.group, groups.leaders)]

        return FakeWorld(4).run(learner)

    assert made("sync") == [[None, None, None]] * 4
    assert made("adpsgd")[1] == [[0, 1, 2, 3], None, None]
    assert made("delay_by_one")[2] == [[0, 1, 2, 3], None, None]
    hybrid = made("hybrid", group_size=2)
    assert hybrid[0] == [None, [0, 1], [0, 2]]
    assert hybrid[3] == [None, [2, 3], None]  # not a leader


def test_two_sync_learners_through_the_trainer_take_one_process_steps(tmp_path: Path) -> None:
    """SYNC's learners, each a whole Trainer on the fake communicator, end where one
    process training on the global batches ends (the sums' order differs: allclose)."""
    cfg = strategy_config("sync", learners=2)
    alone = _trainer(tmp_path / "alone")
    start = {k: v.clone() for k, v in alone.model.state_dict().items()}

    def learner(comm: FakeCommunicator):
        strategy, trainer_comm = join(cfg, comm, seed=0)
        trainer = _trainer(tmp_path / f"rank{comm.rank}", comm=trainer_comm, strategy=strategy)
        trainer.model.load_state_dict(start)  # the learners' threads share torch's seed
        state = trainer.fit()
        return (
            flatten(list(trainer.model.parameters())),
            trainer.last_dev,
            trainer.learners_summary,
            state.step,
        )

    results = FakeWorld(2, timeout_s=60).run(learner)
    alone.fit()
    assert torch.equal(results[0][0], results[1][0])  # replicas stay identical
    assert torch.allclose(results[0][0], flatten(list(alone.model.parameters())), atol=1e-5)
    assert results[0][3] == alone.state.step
    # Each learner validated half of the dev batches; the sums make the whole set's figures.
    assert results[0][1]["loss"] == pytest.approx(alone.last_dev["loss"], rel=1e-4)
    assert results[0][2]["learners"] == 2 and results[1][2]["learners"] == 2


def test_every_learner_validates_a_share_of_the_dev_set(tmp_path: Path) -> None:
    """Dev batches are capped at a learner's share of the global caps, as training
    batches are: the 4 dev utterances (one batch alone, at max_batch 4) make a batch for
    each of 2 learners, not one batch that one learner scores while the other waits."""
    alone = _trainer(tmp_path / "alone")
    assert [len(b) for b in alone.dev_batches.plan(0)] == [4]

    def learner(comm: FakeCommunicator):
        strategy, trainer_comm = join(strategy_config("sync", learners=2), comm, seed=0)
        trainer = _trainer(tmp_path / f"rank{comm.rank}", comm=trainer_comm, strategy=strategy)
        return [len(b) for b in trainer.dev_batches.plan(0)]

    assert FakeWorld(2, timeout_s=60).run(learner) == [[2], [2]]


def test_adpsgd_learners_through_the_trainer_end_on_one_model(tmp_path: Path) -> None:
    cfg = strategy_config("adpsgd", learners=2, timeout_s=60)

    def learner(comm: FakeCommunicator):
        strategy, trainer_comm = join(cfg, comm, seed=0)
        trainer = _trainer(tmp_path / f"rank{comm.rank}", comm=trainer_comm, strategy=strategy, epochs=2)
        trainer.fit()
        assert isinstance(trainer.batches, ProgressBatches)  # its own shard, cycled
        return flatten(list(trainer.model.parameters())), trainer.learners_summary

    results = FakeWorld(2, timeout_s=60).run(learner)
    assert torch.equal(results[0][0], results[1][0])  # the final consensus
    detail = results[0][1]["learners_detail"]
    assert sum(m["samples"] for m in detail) >= 2 * len(TEXTS)  # two global epochs


class FixedProgress:
    def __init__(self) -> None:
        self.value = 0.0

    def samples(self) -> float:
        return self.value


def test_the_planner_shards_in_lock_step_or_by_progress(tmp_path: Path) -> None:
    source = InMemorySource(_utts(_tokenizer(tmp_path / "tok")))
    caps = {"max_frames": 200, "max_batch": 4, "prefetch": 0}
    shares = [shard_batches(source, Sharding(rank=r, world=2), seed=3, **caps) for r in range(2)]
    for a, b in zip(shares[0].epoch(0), shares[1].epoch(0), strict=True):  # the same global batches
        assert a.global_utts == b.global_utts and len(a.utts) + len(b.utts) == a.global_utts
    assert shares[0].schedule_position(7) == 7.0

    progress = FixedProgress()
    own = shard_batches(source, Sharding(shards=3, shard=1, progress=progress), seed=3, **caps)
    assert isinstance(own, ProgressBatches)
    assert {source.ids[int(i)] for b in own.buckets for i in b} == set(list(TEXTS)[1::3])
    taken = 0
    for batch in own.epoch(0):  # cycles its shard until the global progress ends the epoch
        taken += 1
        progress.value += 3 * len(batch.utts)
        assert taken < 100
    assert progress.value >= len(source)
    assert own.schedule_position(0) == pytest.approx(progress.value / len(source) * len(own))
    with pytest.raises(Exception, match="cannot be shared among 16"):
        shard_batches(source, Sharding(shards=16, progress=progress), seed=3, **caps)
