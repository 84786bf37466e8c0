"""Ensemble members (``ensemble.members``): each member's overrides, the checks that it
shares what it must with the experiment, and its stages run as runs of their own in
``<exp_dir>/member<i>/``, ``ensemble.jobs`` at a time. Stage 8 of either pipeline uses
them (:mod:`asrkit.stages.combine` for CTC systems, :mod:`asrkit.stages.hmm` for a hybrid
experiment's networks).
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from asrkit.config import AsrkitConfig, compose, flatten, settings_hash, to_object
from asrkit.errors import ConfigError, UserError
from asrkit.learner import alignment_source
from asrkit.stages.registry import StageContext, stage_settings

log = logging.getLogger("asrkit.stages.combine")


def member_dir(ctx: StageContext, index: int) -> Path:
    return ctx.exp_dir / f"member{index}"


def member_overrides(ctx: StageContext, index: int, threads: int) -> list[str]:
    """The Hydra overrides of member ``index`` (1-based): this experiment's own, less the
    keys the member sets, then the member's, then what the stage sets for every member (a
    hybrid member: this experiment's alignments and joined input too)."""
    member = ctx.cfg.ensemble.members[index - 1].split()
    own = {_key(item) for item in member}
    seed = [] if "seed" in own else [f"seed={ctx.cfg.seed + 1000 * index}"]
    own.add("seed")
    inherited = [item for item in ctx.overrides if _key(item) not in own and not _stage_owned(_key(item))]
    return [
        *inherited,
        *member,
        *seed,
        f"name={ctx.cfg.name}_member{index}",
        f"exp_dir={member_dir(ctx, index)}",
        "ensemble.members=[]",
        f"train.num_threads={threads}",
        *(_shared_inputs(ctx) if ctx.cfg.pipeline == "hybrid" else []),
    ]


def _shared_inputs(ctx: StageContext) -> list[str]:
    """What a hybrid member trains on: this experiment's alignments and joined input."""
    exp = ctx.exp_dir.resolve()
    cfg = ctx.cfg
    shared = [
        f"align.train={alignment_source(cfg, exp, 'train')}",
        f"align.dev={alignment_source(cfg, exp, 'dev')}",
    ]
    if not cfg.align.train:
        # The GMM stage's own alignments: the utterances it could not align (up to
        # gmm.max_fail) are left out of the member's training as out of the experiment's.
        shared.append(f"align.max_missing={max(cfg.align.max_missing, cfg.gmm.max_fail)}")
    if ctx.cfg.align.fmllr:
        shared.append(f"align.inputs_from={cfg.align.inputs_from or exp}")
    return shared


def _key(item: str) -> str:
    return item.split("=", 1)[0].lstrip("+~")


def _stage_owned(key: str) -> bool:
    return (
        key in ("name", "exp_dir", "train.num_threads")
        or key in ("align.train", "align.dev", "align.inputs_from", "align.max_missing")
        or key.split(".")[0] == "ensemble"
    )


def check_member(ctx: StageContext, index: int, overrides: list[str]) -> AsrkitConfig:
    """Compose member ``index``'s config (a bad override fails here, before any training)
    and check it shares this experiment's data and features."""
    member = ctx.cfg.ensemble.members[index - 1]
    try:
        typed = to_object(compose(overrides, config_dir=ctx.config_dir, config_name=ctx.config_name))
    except ConfigError as err:
        raise ConfigError(f"ensemble.members[{index - 1}]={member!r}: {err}") from None
    hybrid = ctx.cfg.pipeline == "hybrid"
    # A hybrid member shares stages 1-5 (data to GMMs and graphs) and the network's input;
    # its seed is its network's own.
    shared = stage_settings(2)
    if hybrid:
        shared = [key for key in stage_settings(5, pipeline="hybrid") if key != "seed"]
    mine, theirs = flatten(settings_hash(ctx.cfg, shared)[1]), flatten(settings_hash(typed, shared)[1])
    if hybrid:
        for key in ("fmllr", "fbank", "ivector_dim", "ivector_gauss", "ivector_max_utts"):
            mine[f"align.{key}"] = getattr(ctx.cfg.align, key)
            theirs[f"align.{key}"] = getattr(typed.align, key)
        mine["pipeline"], theirs["pipeline"] = ctx.cfg.pipeline, typed.pipeline
    changed = sorted(key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key))
    if changed:
        raise ConfigError(
            f"ensemble.members[{index - 1}]={member!r} changes {', '.join(changed)}: members "
            + (
                "share this experiment's GMMs, tied states, graphs and network input (stages "
                "1-5, align.*); vary the network, its training or its seed instead"
                if hybrid
                else "share this experiment's data and features (stages 1-2); vary the model, "
                "tokenizer, training or seed instead"
            )
        )
    if not hybrid and typed.decode.method != "beam_lm":
        raise ConfigError(
            f"ensemble.members[{index - 1}]={member!r}: decode={typed.decode.method}; the "
            "combination rescores each member's beam search with the LM (decode=beam_lm)"
        )
    return typed


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def train_members(ctx: StageContext, *, stages: tuple[int, int] = (3, 5)) -> list[Path]:
    """Run ``stages`` (first, last) of every member, ``ensemble.jobs`` at a time; return
    their dirs. The cores are shared by the members running at once.

    Raises:
        UserError: a member's run failed (its log's last lines and path in the message).
    """
    cfg = ctx.cfg.ensemble
    threads = max(1, available_cores() // min(cfg.jobs, len(cfg.members)))
    runs = []
    for index in range(1, len(cfg.members) + 1):
        overrides = member_overrides(ctx, index, threads)
        check_member(ctx, index, overrides)
        command = [
            sys.executable,
            "-m",
            "asrkit",
            "run",
            "--stage",
            str(stages[0]),
            "--stop-stage",
            str(stages[1]),
            "--config-dir",
            ctx.config_dir,
            "--config-name",
            ctx.config_name,
            *overrides,
        ]
        runs.append((index, command))
    running: list[tuple[int, subprocess.Popen, Path, float]] = []
    try:
        while runs or running:
            while runs and len(running) < cfg.jobs:
                index, command = runs.pop(0)
                out = member_dir(ctx, index)
                out.mkdir(parents=True, exist_ok=True)
                log_path = out / "log" / "stage8.out"
                log_path.parent.mkdir(exist_ok=True)
                log.info(
                    "member %d (%s): stages %d-%d with %d thread(s); log %s",
                    index,
                    cfg.members[index - 1] or "this experiment's settings, its own seed",
                    *stages,
                    threads,
                    log_path,
                )
                log.info("member %d command: %s", index, shlex.join(command))
                with open(log_path, "w", encoding="utf-8") as sink:
                    proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
                running.append((index, proc, log_path, time.monotonic()))
            time.sleep(1.0)
            for entry in list(running):
                index, proc, log_path, began = entry
                if proc.poll() is None:
                    continue
                running.remove(entry)
                if proc.returncode != 0:
                    tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-5:]
                    raise UserError(
                        f"ensemble member {index} ({cfg.members[index - 1]!r}) failed with exit "
                        f"code {proc.returncode}; its log: {log_path}\n" + "\n".join(tail)
                    )
                log.info("member %d: done in %.0f s", index, time.monotonic() - began)
    finally:
        for _, proc, _, _ in running:  # one failed or we were interrupted: stop the rest
            proc.terminate()
        for _, proc, _, _ in running:
            proc.wait()
    return [member_dir(ctx, index) for index in range(1, len(cfg.members) + 1)]
