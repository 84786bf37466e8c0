"""Stage 8: system combination (``ensemble.members``).

Trains and decodes each member (stages 3-5 as a run of its own, in
``<exp_dir>/member<i>/``, ``ensemble.jobs`` at a time), then combines their n-best lists
with this experiment's (:mod:`asrkit.decoding.combine`): the LM weight and word score are
swept on the dev set (``decode_combined_<dev>/wer_*``, ``best_wer``) and every set is
decoded with the best pair into ``decode_combined_<set>/``. Members share the
experiment's data and features; a finished member is skipped on a rerun (its own stage
records), so an interrupted stage 8 goes on where it stopped.
"""

from __future__ import annotations

import itertools
import logging
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from asrkit.config import AsrkitConfig, compose, flatten, settings_hash, to_object
from asrkit.decoding.combine import CombinedDecoder, system_decoder
from asrkit.decoding.decoder import Prepared
from asrkit.decoding.recognizer import check_exp_dir
from asrkit.device import pick_device
from asrkit.errors import ConfigError, UserError
from asrkit.stages.common import decode_targets, prepared_set, show_decoded, tune_and_decode, tune_target
from asrkit.stages.registry import StageContext, stage, stage_settings

log = logging.getLogger(__name__)


def member_dir(ctx: StageContext, index: int) -> Path:
    return ctx.exp_dir / f"member{index}"


def member_overrides(ctx: StageContext, index: int, threads: int) -> list[str]:
    """The Hydra overrides of member ``index`` (1-based): this experiment's own, less the
    keys the member sets, then the member's, then what the stage sets for every member."""
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
    ]


def _key(item: str) -> str:
    return item.split("=", 1)[0].lstrip("+~")


def _stage_owned(key: str) -> bool:
    return key in ("name", "exp_dir", "train.num_threads") or key.split(".")[0] == "ensemble"


def check_member(ctx: StageContext, index: int, overrides: list[str]) -> AsrkitConfig:
    """Compose member ``index``'s config (a bad override fails here, before any training)
    and check it shares this experiment's data and features."""
    member = ctx.cfg.ensemble.members[index - 1]
    try:
        typed = to_object(compose(overrides, config_dir=ctx.config_dir, config_name=ctx.config_name))
    except ConfigError as err:
        raise ConfigError(f"ensemble.members[{index - 1}]={member!r}: {err}") from None
    shared = stage_settings(2)
    mine, theirs = flatten(settings_hash(ctx.cfg, shared)[1]), flatten(settings_hash(typed, shared)[1])
    changed = sorted(key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key))
    if changed:
        raise ConfigError(
            f"ensemble.members[{index - 1}]={member!r} changes {', '.join(changed)}: members "
            "share this experiment's data and features (stages 1-2); vary the model, "
            "tokenizer, training or seed instead"
        )
    if typed.decode.method != "beam_lm":
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


def train_members(ctx: StageContext) -> list[Path]:
    """Run stages 3-5 of every member, ``ensemble.jobs`` at a time; return their dirs.

    Raises:
        UserError: a member's run failed (its log's last lines and path in the message).
    """
    cfg = ctx.cfg.ensemble
    threads = max(1, available_cores() // cfg.jobs)
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
            "3",
            "--stop-stage",
            "5",
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
                    "member %d (%s): stages 3-5 with %d thread(s); log %s",
                    index,
                    cfg.members[index - 1] or "this experiment's settings, its own seed",
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


def _combined_folders(ctx: StageContext) -> list[tuple[str, Path, str]]:
    return [("combined", ctx.exp_dir / f"decode_combined_{name}", name) for name, _ in decode_targets(ctx)]


@stage(
    8,
    "combine",
    "system combination: train and decode each ensemble.members entry (stages 3-5 in "
    "<exp_dir>/member<i>/) and rescore all n-best lists with every model, tuned on dev; "
    "decode_combined_<set>/ (nothing without members)",
    uses=("ensemble",),
    needs=(5,),
    on_skip=lambda ctx: show_decoded(_combined_folders(ctx)),
)
def combine(ctx: StageContext) -> None:
    cfg = ctx.cfg.ensemble
    if not cfg.members:
        log.info("stage 8: ensemble.members is empty; no systems to combine")
        return
    if ctx.cfg.decode.method != "beam_lm":
        raise ConfigError(
            f"ensemble.members is set but decode={ctx.cfg.decode.method}; the combination "
            "rescores each system's beam search with the LM: use decode=beam_lm"
        )
    check_exp_dir(ctx.exp_dir, ctx.cfg.decode.model)
    dirs = [ctx.exp_dir, *train_members(ctx)]
    for number, system in enumerate(dirs):
        scores = [
            f"{name} {(system / f'decode_beam_lm_{name}' / 'scoring' / 'wer').read_text().split(' [')[0]}"
            for name, _ in decode_targets(ctx)
            if (system / f"decode_beam_lm_{name}" / "scoring" / "wer").is_file()
        ]
        log.info(
            "system %d (%s) on its own, beam + LM: %s", number, system, ", ".join(scores) or "not scored"
        )
    device = pick_device(ctx.cfg.train.device)
    systems = [system_decoder(d, device=str(device), max_frames=ctx.cfg.decode.max_frames) for d in dirs]
    decoder = CombinedDecoder(
        ctx.exp_dir, systems, list(itertools.product(cfg.lm_weights, cfg.word_scores)), nbest=cfg.nbest
    )
    prepared: dict[str, Prepared] = {}
    tune_and_decode(
        decoder,
        tune=lambda: tune_target(ctx),
        targets=[(name, prepared_set(ctx, name, path)) for name, path in decode_targets(ctx)],
        out_dir=lambda name: ctx.exp_dir / f"decode_combined_{name}",
        prepared=prepared,
        record_dir=ctx.exp_dir,  # what asrkit transcribe combines with
    )
    for name, done in prepared.items():
        per_utt = sum(len(c) for c in done.scores.values()) / max(len(done.scores), 1)
        log.info("%s: %d systems proposed %.1f distinct transcripts per utterance", name, len(dirs), per_utt)
