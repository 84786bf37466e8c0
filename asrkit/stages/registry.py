"""The stage registry and runner (see :mod:`asrkit.stages`).

Each stage declares the settings it ``uses`` and the stages whose outputs it ``needs``;
its settings hash covers both, transitively. A finished stage records that hash in
``<where its outputs go>/.stages/<number>-<name>.json`` (written last, atomically): a
rerun with the same settings skips it and says so, a change or ``--force`` runs it
again. A stage that fails or is killed leaves no record, so it runs again next time.
A run holds its experiment dir (:mod:`asrkit.stages.lock`): a second run of the same
experiment is refused while the first lives.

Stages belong to a *pipeline* (the ``pipeline`` setting), each numbered on its own as the
stages of a Kaldi recipe are: ``ctc`` (the default: CTC acoustic models) and ``hybrid``
(GMM-HMM systems, then a BLSTM trained with frame cross-entropy on their tied states and
decoded through HCLG). The corpus stages 0-3 are the same in both.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from asrkit.choices import resume_mode
from asrkit.config import DEFAULT_CONFIG_DIR, AsrkitConfig, differences, flatten, settings_hash, to_object
from asrkit.data.io import atomic_write
from asrkit.distributed.launch import launched_rank
from asrkit.errors import ConfigError
from asrkit.stages.lock import DATA_LOCK_NAME, LOCK_NAME, experiment_lock

log = logging.getLogger("asrkit.stages")


@dataclass(frozen=True)
class StageContext:
    """What a stage gets: the typed config, the directories it works in, and how the
    config was composed (for a stage that starts runs of its own: ensemble members)."""

    cfg: AsrkitConfig
    data_root: Path
    feats_root: Path
    exp_dir: Path
    overrides: tuple[str, ...] = ()
    config_dir: str = str(DEFAULT_CONFIG_DIR)
    config_name: str = "config"


@dataclass(frozen=True)
class Stage:
    """A recipe stage. ``uses``: the top-level settings that shape its outputs; ``needs``:
    the stages whose outputs it reads; ``shared``: its outputs go to the shared data dirs
    (``data_root``, features) rather than the experiment dir; ``record``: keep a completion
    record (off for a stage that checks its own outputs every time, as the download does);
    ``on_skip``: called instead of ``run`` when the stage is skipped (e.g. to show results);
    ``outputs``: the files a finished run leaves (one missing: the stage runs again);
    ``inputs``: files the stage reads whose content its settings do not decide (imported
    data dirs; stage 3's open lexicon for the GMM stage; the model a decoding stage reads,
    which a user may replace by hand, e.g. with an average of checkpoints): their content
    is part of its record, so a changed one runs it again (None: none, and the record is
    as without ``inputs``)."""

    number: int
    name: str
    description: str
    run: Callable[[StageContext], None]
    uses: tuple[str, ...] = ()
    needs: tuple[int, ...] = ()
    shared: bool = False
    record: bool = True
    on_skip: Callable[[StageContext], None] | None = None
    outputs: Callable[[StageContext], list[Path]] | None = None
    inputs: Callable[[StageContext], list[Path] | None] | None = None


#: pipeline name -> stage number -> stage.
PIPELINES: dict[str, dict[int, Stage]] = {"ctc": {}, "hybrid": {}}
#: The default (``ctc``) pipeline's stages.
STAGES: dict[int, Stage] = PIPELINES["ctc"]


def stage(
    number: int,
    name: str,
    description: str,
    *,
    uses: Sequence[str] = (),
    needs: Sequence[int] = (),
    shared: bool = False,
    record: bool = True,
    on_skip: Callable[[StageContext], None] | None = None,
    outputs: Callable[[StageContext], list[Path]] | None = None,
    inputs: Callable[[StageContext], list[Path] | None] | None = None,
    pipelines: Sequence[str] = ("ctc",),
) -> Callable:
    """Register ``func(ctx)`` as recipe stage ``number`` of each of ``pipelines`` (see
    :class:`Stage`); a function may also be registered again under another number."""

    def add(func: Callable[[StageContext], None]) -> Callable[[StageContext], None]:
        for pipeline in pipelines:
            table = PIPELINES[pipeline]
            if number in table:
                raise RuntimeError(
                    f"{pipeline} stage {number} registered twice ({table[number].name}, {name})"
                )
            table[number] = Stage(
                number,
                name,
                description,
                func,
                tuple(uses),
                tuple(needs),
                shared,
                record,
                on_skip,
                outputs,
                inputs,
            )
        return func

    return add


def stage_settings(number: int, *, pipeline: str = "ctc") -> list[str]:
    """The top-level settings stage ``number``'s outputs depend on, through its needs."""
    keys: set[str] = set()
    todo, seen = [number], set()
    table = PIPELINES[pipeline]
    while todo:
        current = table[todo.pop()]
        if current.number in seen:
            continue
        seen.add(current.number)
        keys.update(current.uses)
        todo.extend(current.needs)
    return sorted(keys)


def _record_path(ctx: StageContext, current: Stage) -> Path:
    root = ctx.data_root if current.shared else ctx.exp_dir
    return root / ".stages" / f"{current.number}-{current.name}.json"


def _with_inputs(digest: str, paths: list[Path]) -> str:
    """``digest`` combined with the content of ``paths`` (a missing one counts as such)."""
    sha = hashlib.sha256(digest.encode())
    for path in sorted(paths):
        sha.update(str(path).encode() + b"\0")
        try:
            with path.open("rb") as handle:  # text files, or a model of hundreds of MB
                for block in iter(lambda: handle.read(1 << 20), b""):
                    sha.update(block)
        except OSError:
            sha.update(b"\0missing")
    return sha.hexdigest()[:16]


def _finished(record: Path, digest: str) -> bool:
    try:
        return json.loads(record.read_text())["settings_hash"] == digest
    except (OSError, ValueError, KeyError, TypeError):
        return False


def stage_number(name: str, *, pipeline: str = "ctc") -> int:
    """The number of the stage called ``name`` in ``pipeline``."""
    for number, current in PIPELINES[pipeline].items():
        if current.name == name:
            return number
    raise KeyError(f"no stage '{name}' in the {pipeline} pipeline")


def describe_stages(pipeline: str = "ctc") -> str:
    return "\n".join(
        f"  {s.number:>2}  {s.name:<10} {s.description}"
        for s in sorted(PIPELINES[pipeline].values(), key=lambda s: s.number)
    )


def check_stage_range(pipeline: str, start: int, stop: int | None) -> None:
    """Raise :class:`ConfigError` (one line, with the fix) for a stage range that selects
    nothing or names a stage the pipeline does not have."""
    table = PIPELINES[pipeline]
    first, last = min(table), max(table)
    listing = f"the {pipeline} pipeline's stages are {first}-{last} (`asrkit run --help` lists them)"
    for flag, number in (("--stage", start), ("--stop-stage", stop)):
        if number is not None and not first <= number <= last:
            raise ConfigError(f"{flag} {number}: there is no stage {number}; {listing}")
    if stop is not None and start > stop:
        raise ConfigError(
            f"--stage {start} is after --stop-stage {stop}; swap them (--stage {stop} --stop-stage {start})"
        )


def run_stages(
    cfg: DictConfig,
    *,
    start: int,
    stop: int | None,
    command: Sequence[str],
    force: bool = False,
    overrides: Sequence[str] = (),
    config_dir: str | Path = DEFAULT_CONFIG_DIR,
    config_name: str = "config",
) -> None:
    """Run every registered stage numbered ``start..stop`` (inclusive) that has not
    finished with the same settings (all of them with ``force``).

    Args:
        cfg: the composed config (:func:`asrkit.config.compose`).
        start, stop: stage range; ``stop=None`` runs to the last stage.
        command: the command line that started the run, saved verbatim.
        force: run finished stages again (training then starts over unless resume=true).
        overrides, config_dir, config_name: what ``cfg`` was composed from.
    """
    pipeline = str(cfg.get("pipeline", "ctc"))
    if pipeline not in PIPELINES:
        raise ConfigError(f"pipeline={pipeline}: unknown; choose one of {', '.join(PIPELINES)}")
    table = PIPELINES[pipeline]
    check_stage_range(pipeline, start, stop)
    stop = max(table) if stop is None else stop
    selected = [table[n] for n in sorted(table) if start <= n <= stop]
    if force and cfg.resume == "auto":
        cfg.resume = "false"  # --force retrains from scratch (learners read config.yaml)
    typed = to_object(cfg)
    ctx = StageContext(
        cfg=typed,
        data_root=Path(typed.data_root),
        feats_root=Path(typed.feats_root),
        exp_dir=Path(typed.exp_dir),
        overrides=tuple(overrides),
        config_dir=str(config_dir),
        config_name=config_name,
    )
    ctx.exp_dir.mkdir(parents=True, exist_ok=True)
    if launched_rank() != "0":
        # Under a user's own torchrun every rank runs the stages; rank 0 holds the lock.
        _run_locked(ctx, cfg, typed, selected, pipeline=pipeline, command=command, force=force)
        return
    node = typed.strategy.node_rank
    with experiment_lock(ctx.exp_dir, name=LOCK_NAME if node == 0 else f"{LOCK_NAME}.node{node}"):
        _run_locked(ctx, cfg, typed, selected, pipeline=pipeline, command=command, force=force)


#: The scores this run's stages reported, ``(set, decoder, Kaldi's %WER line)`` in order
#: (:func:`asrkit.stages.common.report`); printed as one table when the run ends.
RESULTS: list[tuple[str, str, str]] = []


def _print_results(exp_dir: Path) -> None:
    """Every set's WER of this run as one short table on stdout (Kaldi's RESULTS in spirit);
    nothing when the run scored fewer than two sets."""
    if len(RESULTS) < 2:
        return
    width = max(len(f"{name} ({how})") for name, how, _ in RESULTS)
    rows = []
    for name, how, line in RESULTS:
        wer, _, counts = line.removeprefix("%WER ").partition(" ")
        rows.append(f"  {f'{name} ({how})':<{width}}  {wer + '%':>7}  {counts}")
    print(f"results of {exp_dir}:", *rows, sep="\n", flush=True)


def _run_locked(
    ctx: StageContext,
    cfg: DictConfig,
    typed: AsrkitConfig,
    selected: list[Stage],
    *,
    pipeline: str,
    command: Sequence[str],
    force: bool,
) -> None:
    # Settings are accepted (or refused) before anything in the dir is rewritten.
    previous = _guard_finished_training(ctx, typed, selected, pipeline=pipeline, force=force)
    atomic_write(ctx.exp_dir / "config.yaml", OmegaConf.to_yaml(cfg))
    atomic_write(ctx.exp_dir / "command", shlex.join(command) + "\n")
    handler = logging.FileHandler(_log_file(ctx.exp_dir), encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    RESULTS.clear()
    try:
        log.info("command: %s", shlex.join(command))
        log.info("experiment dir: %s (config saved as config.yaml)", ctx.exp_dir)
        for current in selected:
            # Shared data dirs are built by one run at a time; a run that waited finds the
            # stage done by the other (or with other settings: then it runs it).
            shared = current.shared and launched_rank() == "0" and typed.strategy.node_rank == 0
            existed = ctx.data_root.exists()
            try:
                with (
                    experiment_lock(ctx.data_root, name=DATA_LOCK_NAME, wait=True)
                    if shared
                    else nullcontext()
                ):
                    _run_stage(ctx, typed, current, pipeline=pipeline, force=force)
            finally:
                if shared and not existed:  # made for the lock by a stage that wrote nothing
                    with contextlib.suppress(OSError):
                        ctx.data_root.rmdir()
        _print_results(ctx.exp_dir)
        if previous is not None:  # the new run finished: the model it replaced goes
            shutil.rmtree(previous, ignore_errors=True)
            log.info("removed %s (the model this run replaced)", previous)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()


def _run_stage(ctx: StageContext, typed: AsrkitConfig, current: Stage, *, pipeline: str, force: bool) -> None:
    """Run ``current`` unless it finished with these settings (and its outputs are there)."""
    digest, settings = settings_hash(typed, stage_settings(current.number, pipeline=pipeline))
    paths = current.inputs(ctx) if current.inputs is not None else None
    if paths is not None:
        digest = _with_inputs(digest, paths)
    record = _record_path(ctx, current)
    gone = [p for p in (current.outputs(ctx) if current.outputs else []) if not p.exists()]
    if gone and _finished(record, digest):
        log.info(
            "stage %d (%s): finished before, but %s is gone; running it again",
            current.number,
            current.name,
            gone[0],
        )
    elif current.record and not force and _finished(record, digest):
        log.info(
            "stage %d (%s): already done with these settings (%s); skipping it (--force runs it again)",
            current.number,
            current.name,
            record,
        )
        if current.on_skip is not None:
            current.on_skip(ctx)
        return
    if current.shared and record.is_file() and not force and not gone:
        # Another experiment on this data root built it with other settings: the features
        # every experiment here reads are about to change under them.
        log.warning(
            "stage %d (%s): %s was built with other settings (%s); rebuilding it for this run — "
            "experiments that share data_root share what it holds (give this one its own data_root "
            "and feats_root to keep both)",
            current.number,
            current.name,
            ctx.data_root,
            _record_differences(record, settings)[3],
        )
    record.unlink(missing_ok=True)
    log.info("stage %d (%s): start — %s", current.number, current.name, current.description)
    began = time.monotonic()
    current.run(ctx)
    seconds = time.monotonic() - began
    if current.record and typed.strategy.node_rank == 0 and launched_rank() == "0":
        atomic_write(
            record,
            json.dumps(
                {
                    "stage": current.number,
                    "name": current.name,
                    "settings_hash": digest,
                    "seconds": round(seconds, 1),
                    "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "settings": settings,
                },
                indent=2,
            )
            + "\n",
        )
    log.info("stage %d (%s): done in %.1f s", current.number, current.name, seconds)


#: Where ``--force`` keeps a finished experiment's model and scores while it trains anew.
PREVIOUS_DIR = "previous"


def _record_differences(record: Path, settings: dict) -> tuple[dict, dict, list[str], str]:
    """A stage record's settings and ``settings``, flat; the keys that differ; and the
    first three as ``key: theirs there, ours here``."""
    try:
        theirs = flatten(json.loads(record.read_text()).get("settings", {}))
    except (OSError, ValueError, AttributeError):
        theirs = {}
    ours = flatten(settings)
    keys, shown = differences(theirs, ours)
    return theirs, ours, keys, shown or "not recorded"


def _guard_finished_training(
    ctx: StageContext, typed: AsrkitConfig, selected: list[Stage], *, pipeline: str, force: bool
) -> Path | None:
    """A finished experiment (its training stage recorded, ``model.pt`` there) is never
    overwritten by a run with other training settings: without ``force`` that is refused
    in one line naming the differences; with it, the model, checkpoints and scores are
    moved to ``previous/`` until the new run finishes (returned, to be removed then)."""
    try:
        number = stage_number("train", pipeline=pipeline)
    except KeyError:
        return None
    if number not in {s.number for s in selected}:
        return None
    if resume_mode(typed.resume) == "true" and not force:
        _check_resumable(ctx, typed)
    train = PIPELINES[pipeline][number]
    record, model = _record_path(ctx, train), ctx.exp_dir / "model.pt"
    if not (record.is_file() and model.is_file()):
        # A replacement that has not finished yet (a --force run stopped or failed): its
        # previous model goes once this run finishes.
        earlier = ctx.exp_dir / PREVIOUS_DIR
        return earlier if earlier.is_dir() else None
    digest, settings = settings_hash(typed, stage_settings(number, pipeline=pipeline))
    if _finished(record, digest) and not force:
        return None
    if not force:
        theirs, ours, keys, shown = _record_differences(record, settings)
        if resume_mode(typed.resume) == "true" and _extendable(keys, theirs, ours, typed):
            return None  # the trainer goes on from the finished run's last state
        raise ConfigError(
            f"{ctx.exp_dir} holds a finished model trained with other settings ({shown}); "
            f"to keep both, give this run its own dir (name=NEW_NAME); to replace it, add --force (the "
            f"finished model and scores are kept in {ctx.exp_dir / PREVIOUS_DIR} until the new run "
            f"finishes){_extension_note(keys, theirs, ours, typed)}"
        )
    return _keep_previous(ctx, number)


def training_resume_key(cfg: AsrkitConfig) -> str:
    """The hash of the settings that shape training (the train stage's, through its
    needs): resume states saved under another key are not resumed from."""
    number = stage_number("train", pipeline=cfg.pipeline)
    # A schedule that does not depend on the total (constant, or annealed per epoch) lets a
    # finished run go on to more epochs: its states stay resumable when train.epochs grows.
    spans_all = cfg.schedule.anneal == "cosine"
    exclude = () if spans_all else ("train.epochs",)
    return settings_hash(cfg, stage_settings(number, pipeline=cfg.pipeline), exclude=exclude)[0]


def _check_resumable(ctx: StageContext, typed: AsrkitConfig) -> None:
    """``resume=true`` is refused here, before anything is rewritten, when the main
    learner holds no resume state made with these settings (the trainer checks the rest)."""
    from asrkit.training.resume import ResumeStore

    store = ResumeStore(ctx.exp_dir / "checkpoints" / "resume", 0)
    key = training_resume_key(typed)
    found = store.states()
    if not any(state.get("settings") == key for state in found.values()):
        why = "its states were saved with other settings" if found else "it holds no resume state"
        raise ConfigError(
            f"resume=true but {store.directory} cannot be resumed from ({why}); "
            "use resume=auto or resume=false to start over"
        )


def _more_epochs(keys: list[str], theirs: dict[str, Any], ours: dict[str, Any]) -> bool:
    return keys == ["train.epochs"] and int(ours["train.epochs"]) > int(theirs.get("train.epochs") or 0)


def _extendable(keys: list[str], theirs: dict[str, Any], ours: dict[str, Any], typed: AsrkitConfig) -> bool:
    """Only ``train.epochs`` grew, under a schedule that does not depend on the total
    (:func:`asrkit.stages.registry.training_resume_key` leaves it out then)."""
    return _more_epochs(keys, theirs, ours) and typed.schedule.anneal != "cosine"


def _extension_note(
    keys: list[str], theirs: dict[str, Any], ours: dict[str, Any], typed: AsrkitConfig
) -> str:
    if not _more_epochs(keys, theirs, ours):
        return ""
    if typed.schedule.anneal == "cosine":
        return (
            ". It cannot be extended to more epochs: its cosine schedule spans all of them, so "
            "going on from the finished run would not give the model a longer run gives"
        )
    return (
        ". To extend it to more epochs instead, add resume=true (its schedule does not depend on the total)"
    )


def _keep_previous(ctx: StageContext, train_number: int) -> Path:
    """Move what training and the stages after it made into ``previous/``."""
    keep = ctx.exp_dir / PREVIOUS_DIR
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    made = [
        ctx.exp_dir / n
        for n in (
            "model.pt",
            "train_summary.json",
            "curves.png",
            "learners.json",
            "checkpoints",
            "tensorboard",
        )
    ]
    made += sorted(ctx.exp_dir.glob("decode_*"))
    stages = ctx.exp_dir / ".stages"
    made += [p for p in sorted(stages.glob("*.json")) if int(p.name.split("-", 1)[0]) >= train_number]
    for path in made:
        if path.exists():
            target = keep / (f".stages-{path.name}" if path.parent == stages else path.name)
            os.replace(path, target)
    log.info("--force: the finished model and its scores are kept in %s until this run finishes", keep)
    return keep


def _log_file(exp_dir: Path) -> Path:
    (exp_dir / "log").mkdir(parents=True, exist_ok=True)
    return exp_dir / "log" / "run.log"
