"""Resume state: each learner's full training state, kept twice, agreed on by all learners.

Every learner writes ``checkpoints/resume/rank<R>.pt`` at the same points of the run
(every ``train.save_every`` steps of the lock-step strategies, and at each epoch end).
A save goes to a temporary file first; the current file then becomes ``rank<R>.prev.pt``
and the temporary file takes its place, so a kill at any moment leaves at least one
complete state, and a crash during the write leaves the previous one untouched.

A state is tagged with its position ``(epoch, batch)``: the next batch to train. On
resume the learners exchange the tags they hold and all load the newest tag they all
have (a learner killed during a save may be one save behind the others: its previous
file is the others' previous too). A state records the hash of the settings that
shape training; a state from different settings is not resumed from.

Files are plain tensors, numbers and strings, loaded with ``weights_only=True``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from asrkit.errors import DataError
from asrkit.models.checkpoint import load_checkpoint, save_checkpoint

log = logging.getLogger(__name__)

Tag = tuple[int, int]


class ResumeStore:
    """One learner's two most recent resume states under ``directory``."""

    def __init__(self, directory: str | Path, rank: int) -> None:
        self.directory, self.rank = Path(directory), rank
        self.current = self.directory / f"rank{rank}.pt"
        self.previous = self.directory / f"rank{rank}.prev.pt"

    def save(self, state: dict[str, Any]) -> None:
        """Write ``state`` as the current file, keeping the one it replaces as previous."""
        tmp = self.directory / f".rank{self.rank}.pt.new"
        save_checkpoint(tmp, state)  # itself atomic: a crash leaves no partial .new either
        if self.current.exists():
            os.replace(self.current, self.previous)
        os.replace(tmp, self.current)

    def states(self) -> dict[Tag, dict[str, Any]]:
        """The loadable states by tag; unreadable files are reported and skipped."""
        found: dict[Tag, dict[str, Any]] = {}
        for path in (self.previous, self.current):
            if not path.exists():
                continue
            try:
                state = load_checkpoint(path)
                # "tag" (what the learners agree on) when it differs from "position" (where
                # this learner goes on): learners that do not step together stop at
                # different batches of one epoch.
                mark = state.get("tag", state["position"])
                tag = (int(mark["epoch"]), int(mark["batch"]))
            except (DataError, KeyError, TypeError) as err:
                log.warning("%s: not a usable resume state (%s); ignoring it", path, str(err).split(";")[0])
                continue
            found[tag] = state
        return found


def common_tag(tags_per_learner: Iterable[Iterable[Tag]]) -> Tag | None:
    """The newest tag every learner holds, or None."""
    sets = [set(tags) for tags in tags_per_learner]
    shared = set.intersection(*sets) if sets else set()
    return max(shared) if shared else None


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    """The random states a training step draws from: torch's CPU (and CUDA) generators and
    the SpecAugment generator."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "specaug": generator.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    generator.set_state(state["specaug"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class FaultInjection:
    """A test-only hook of the fault-tolerance tests: learner ``rank`` kills itself with
    SIGKILL right after optimizer step ``step``, or as epoch ``epoch`` (1-based) starts,
    before its first step: ADPSGD shares an epoch's batches by global progress, so a slow
    learner may take no step at all in an epoch, but every learner starts every epoch. The
    trainer runs it only when given one (:meth:`parse` of ``ASRKIT_FAULT_KILL``)."""

    def __init__(self, *, step: int | None = None, epoch: int | None = None) -> None:
        self.step, self.epoch = step, epoch

    @classmethod
    def parse(cls, spec: str, *, rank: int, restart: int = 0) -> FaultInjection | None:
        """``<rank>:<step>`` or ``<rank>:epoch<e>`` (``ASRKIT_FAULT_KILL``, read by
        :func:`asrkit.distributed.launch.context_from_env`): the fault for learner ``rank``,
        on the first attempt only (torchrun's restarts, and runs without the spec, go on)."""
        if not spec or restart:
            return None
        who, _, when = spec.partition(":")
        if int(who) != rank:
            return None
        if when.startswith("epoch"):
            return cls(epoch=int(when[len("epoch") :]))
        return cls(step=int(when))

    def epoch_start(self, epoch: int) -> None:
        """As epoch ``epoch`` (counted from 0) starts."""
        if self.epoch is not None and epoch + 1 == self.epoch:
            self._die(f"as epoch {epoch + 1} starts")

    def after_step(self, step: int) -> None:
        """After optimizer step ``step`` (counted from 1)."""
        if step == self.step:
            self._die(f"after step {step}")

    @staticmethod
    def _die(when: str) -> None:
        log.warning("fault injection: killing this learner %s", when)
        with contextlib.suppress(Exception):
            logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
