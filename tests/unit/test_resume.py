"""Resume states: rotation, interrupted writes, learner agreement, bitwise-equal resumed runs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from asrkit.distributed.config import StrategyConfig
from asrkit.distributed.launch import context_from_env
from asrkit.errors import ConfigError
from asrkit.targets import TokenizerConfig, train_tokenizer
from asrkit.training.resume import FaultInjection, ResumeStore, common_tag
from tests.distributed_learner import make_trainer


def _state(epoch: int, batch: int, value: float) -> dict:
    return {"position": {"epoch": epoch, "batch": batch}, "model": {"w": torch.full((3,), value)}}


def test_saves_rotate_and_keep_the_previous_state(tmp_path: Path) -> None:
    store = ResumeStore(tmp_path, rank=1)
    store.save(_state(0, 2, 1.0))
    store.save(_state(0, 4, 2.0))
    store.save(_state(1, 0, 3.0))
    states = store.states()
    assert sorted(states) == [(0, 4), (1, 0)]
    assert float(states[(1, 0)]["model"]["w"][0]) == 3.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank1.prev.pt", "rank1.pt"]


def test_a_corrupt_current_state_falls_back_to_the_previous(tmp_path: Path, caplog) -> None:
    store = ResumeStore(tmp_path, rank=0)
    store.save(_state(0, 2, 1.0))
    store.save(_state(0, 4, 2.0))
    store.current.write_bytes(store.current.read_bytes()[:100])  # e.g. a disk that filled up
    with caplog.at_level(logging.WARNING):
        assert list(store.states()) == [(0, 2)]
    assert "rank0.pt: not a usable resume state" in caplog.text


def test_learners_agree_on_the_newest_state_they_all_hold() -> None:
    # Learner 1 was killed during its save at (1, 0): it still has (0, 4) like the others.
    assert common_tag([[(0, 4), (1, 0)], [(0, 2), (0, 4)], [(0, 4), (1, 0)]]) == (0, 4)
    assert common_tag([[(0, 4)], [(1, 0)]]) is None
    assert common_tag([[], [(1, 0)]]) is None


def test_fault_injection_kills_only_the_named_learner_on_its_first_attempt() -> None:
    ctx = context_from_env(torch.device("cpu"), environ={"ASRKIT_FAULT_KILL": "1:5"})
    assert ctx.fault_kill == "1:5" and ctx.restart == 0
    assert FaultInjection.parse(ctx.fault_kill, rank=1).step == 5
    assert FaultInjection.parse("1:5", rank=0) is None
    restarted = context_from_env(
        torch.device("cpu"),
        environ={
            "ASRKIT_FAULT_KILL": "1:5",
            "TORCHELASTIC_RESTART_COUNT": "1",
            "RANK": "1",
            "WORLD_SIZE": "2",
        },
    )
    assert restarted.restart == 1
    assert FaultInjection.parse(restarted.fault_kill, rank=1, restart=restarted.restart) is None
    assert FaultInjection.parse("", rank=1) is None
    assert FaultInjection.parse("1:epoch2", rank=1).epoch == 2


class _Interrupted(Exception):
    pass


def _tokenizer(out: Path) -> None:
    if not (out / "tok" / "sp.model").exists():
        train_tokenizer({"a-1": "A B C D E"}, out / "tok", TokenizerConfig(kind="char"))


def _weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def _run(out: Path, *, resume: str = "auto", stop_at: int | None = None, epochs: int = 2):
    """Train the tiny model with dropout and SpecAugment, saving every 2 steps; with
    ``stop_at`` the run dies after that step (as a killed process would: nothing after it)."""
    _tokenizer(out)
    torch.set_num_threads(1)
    trainer = make_trainer(
        out, StrategyConfig(), lr=0.05, epochs=epochs, resume=resume, save_every=2, randomness=True
    )
    if stop_at is not None:

        class Die(FaultInjection):
            def after_step(self, step: int) -> None:
                if step == stop_at:
                    raise _Interrupted

        trainer.fault = Die()
        with pytest.raises(_Interrupted):
            trainer.fit()
        return trainer
    trainer.fit()
    return trainer


def test_determinism_two_runs_are_bitwise_identical(tmp_path: Path) -> None:
    first = _weights(_run(tmp_path / "a", resume="false"))
    second = _weights(_run(tmp_path / "b", resume="false"))
    assert all(torch.equal(first[k], second[k]) for k in first)


# 3 batches an epoch, saves at batch 2 and epoch ends: step 3 dies before its epoch-end
# save (resumes at epoch 1, batch 2), step 5 before the save at epoch 2, batch 2.
@pytest.mark.parametrize("stop_at", [3, 5])
def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path: Path, stop_at: int, caplog) -> None:
    reference = _run(tmp_path / "whole", resume="false")
    assert len(reference.batches) == 3
    _run(tmp_path / "cut", stop_at=stop_at)
    with caplog.at_level(logging.INFO, logger="asrkit"):
        resumed = _run(tmp_path / "cut")
    assert "resuming from" in caplog.text
    expected, got = _weights(reference), _weights(resumed)
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    assert resumed.state.step == reference.state.step
    assert [h["loss"] for h in resumed.state.history] == [h["loss"] for h in reference.state.history]


def test_resume_true_without_a_state_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="resume=true but .* holds no state"):
        _run(tmp_path, resume="true")


def test_states_of_other_settings_are_not_resumed_from(tmp_path: Path, caplog) -> None:
    _run(tmp_path, stop_at=3)
    _tokenizer(tmp_path)
    other = make_trainer(
        tmp_path, StrategyConfig(), lr=0.05, epochs=1, resume="auto", save_every=2, randomness=True
    )
    other.resume_key = "different settings"
    with caplog.at_level(logging.WARNING):
        assert other.restore() == (0, 0)
    assert "saved with other settings" in caplog.text
    other.resume = "true"
    with pytest.raises(ConfigError, match="other settings"):
        other.restore()


def test_a_finished_run_resumes_to_its_end(tmp_path: Path) -> None:
    done = _weights(_run(tmp_path, resume="false", epochs=1))
    again = _run(tmp_path, epochs=1)
    assert again.state.epoch == 1 and all(torch.equal(done[k], _weights(again)[k]) for k in done)
