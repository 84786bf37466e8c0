"""Run a study's plan: every run not finished yet, each into ``<out>/runs/<name>/``
(resumable: a run counts as finished once its records are whole and its ``run.json``, written
last, agrees with the plan — :mod:`asrkit.study.records` — so a stopped study goes on where
it stopped when started again, and a damaged run is done again).

Every run computes on one thread: the simulator computes one learner at a time, at a
learner's small share of the batch, where a second thread adds little (``asrkit bench
sim``), so ``jobs`` runs go side by side instead, each in a process of its own. Step costs
are measured first, one after another, so what a run computes does not depend on how many
ran beside it or in which order.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import multiprocessing
import os
import platform
import resource
import shutil
import signal
import time
from collections.abc import Iterator, Set
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path

import torch

from asrkit.config import DEFAULT_CONFIG_DIR, AsrkitConfig, compose, to_object
from asrkit.data.io import atomic_write
from asrkit.errors import ConfigError, DataError, TrainingDiverged, UserError
from asrkit.learner import prepare_learner
from asrkit.sim.calibrate import learner_batch_caps, load_or_measure
from asrkit.sim.experiment import simulate_experiment
from asrkit.sim.network import Network
from asrkit.stages.lock import experiment_lock
from asrkit.study.decode import decode_grid, decode_run
from asrkit.study.plan import StudyPlan, StudyRun
from asrkit.study.records import (
    DIVERGED_FILE,
    TRAINED_FILE,
    expected_record,
    inputs_fingerprint,
    read_record,
    run_state,
)

__all__ = ["run_study"]

log = logging.getLogger(__name__)


def run_study(
    plan: StudyPlan,
    out: Path,
    *,
    network: Network,
    max_runs: int | None = None,
    jobs: int = 1,
    config_dir: str | Path = DEFAULT_CONFIG_DIR,
) -> dict[str, int]:
    """Simulate every unfinished run of ``plan`` (at most ``max_runs`` now), ``jobs`` at a
    time; returns how many were finished before, run now and left."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: give at least 1")
    # One study run per dir at a time: a second one would simulate the same runs into the
    # same dirs (seen: a second `study run` started the first one's run in flight again).
    with experiment_lock(out, name=STUDY_LOCK):
        return _run_study(plan, out, network=network, max_runs=max_runs, jobs=jobs, config_dir=config_dir)


#: The lock file a running study holds in its dir.
STUDY_LOCK = ".lock.study"


def _run_study(
    plan: StudyPlan,
    out: Path,
    *,
    network: Network,
    max_runs: int | None,
    jobs: int,
    config_dir: str | Path,
) -> dict[str, int]:
    runs = plan.runs()
    settings = json.loads(
        json.dumps({"plan": dataclasses.asdict(plan), "network": dataclasses.asdict(network)})
    )
    before = read_record(out / "plan.json") if (out / "plan.json").exists() else None
    if before is not None:
        _check_same_settings(out, before, settings)
    _freeze_inputs(plan, out, config_dir)
    # Every run's own record is compared with what this plan asks of it (plan.json may be
    # gone, or older): nothing is written before they all agree.
    pending: list[StudyRun] = []
    redecode: set[str] = set()  # trained as the plan asks, decoded at another grid
    for run in runs:
        state, why = run_state(out / "runs" / run.name, _expected(plan, run, config_dir, out))
        if state == "redecode":
            log.warning("study: %s; its model is decoded again (not trained)", why)
            redecode.add(run.name)
            pending.append(run)
            continue
        if state == "other":
            raise ConfigError(
                f"{out / 'runs' / run.name / 'run.json'}: a finished run made with other settings "
                f"({why}); continue the study with the plan it was made with, or give another --out"
            )
        if state == "unfinished":
            if why:
                log.warning("study: %s; %s is done again", why, run.name)
            pending.append(run)
    out.mkdir(parents=True, exist_ok=True)
    listing = [{"name": r.name, **dataclasses.asdict(r), "overrides": plan.overrides(r)} for r in runs]
    if before is not None:  # a plan that chooses other runs adds them; the study's stay listed, in order
        known = {r.get("name") for r in before.get("runs", [])}
        listing = [*before.get("runs", []), *(r for r in listing if r["name"] not in known)]
        # The decoding grid is the plan's now: runs decoded at another are decoded again.
        grid = {k: settings["plan"][k] for k in ("lm_weights", "word_penalties", "beam", "lattice_beam")}
        settings = {**settings, "plan": {**before.get("plan", settings["plan"]), **grid}}
    record = json.dumps({**settings, "runs": listing}, indent=2)
    if before is None or json.loads(record) != before:
        atomic_write(out / "plan.json", record)
    counts = {"finished_before": len(runs) - len(pending), "run_now": 0, "left": len(pending)}
    log.info(
        "study %s: %d runs, %d finished before, %d to run (%d of them to decode again only)",
        out,
        len(runs),
        counts["finished_before"],
        len(pending),
        len(redecode),
    )
    todo = pending[:max_runs]
    with _one_thread(), _sitting(out, jobs, counts):
        began = time.monotonic()
        for name in _simulate_all(
            plan, todo, out, network=network, jobs=jobs, config_dir=config_dir, redecode=redecode
        ):
            counts["run_now"] += 1
            counts["left"] -= 1
            each = (time.monotonic() - began) / counts["run_now"]
            log.info(
                "study: %s done (%d of %d now; about %.0f min left at %.0f s per run, %d at a time)",
                name,
                counts["run_now"],
                len(todo),
                (len(todo) - counts["run_now"]) * each / 60,
                each * jobs,
                jobs,
            )
    return counts


def _processor_seconds() -> float:
    """This process's user and system time and its children's, every level down that was
    waited for (the simulations' workers, their decoding jobs)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextmanager
def _sitting(out: Path, jobs: int, counts: dict[str, int]) -> Iterator[None]:
    """Record this sitting of the study (its wall time, the processor time it and its
    workers used, jobs and runs finished) in ``<out>/sittings.json``, however it ends (a
    stop included), so the report can say what the whole study cost across restarts: the
    processor time counts the work of runs that were stopped or later dropped too, and not
    the time the sitting spent paused (SIGSTOP) or waiting for the machine."""
    began, started, cpu = time.monotonic(), time.strftime("%Y-%m-%d %H:%M:%S"), _processor_seconds()
    try:
        yield
    finally:
        if counts["run_now"]:  # a sitting that finished nothing (failed, refused) leaves no trace
            _add_sitting(
                out,
                {
                    "started": started,
                    "seconds": round(time.monotonic() - began, 1),
                    "cpu_s": round(_processor_seconds() - cpu, 1),
                    "cores": os.cpu_count() or 1,
                    "jobs": jobs,
                    "runs_finished": counts["run_now"],
                },
            )


def _add_sitting(out: Path, sitting: dict) -> None:
    path = out / "sittings.json"
    sittings = read_record(path) if path.is_file() else []
    sittings.append(sitting)
    atomic_write(path, json.dumps(sittings, indent=2) + "\n")


#: The plan's settings that change what a run computes; the others (the axes, the seeds,
#: the grid) only choose which runs there are, so a study dir may go on under a plan that
#: chooses more or fewer of them.
_OUTCOME = (
    "models",
    "base_batch",
    "epochs",
    "hybrid_group",
    "common",
    "warmup_samples",
    "optimizers",
    "comms",
    "lr_rule",
)

#: Settings that name their values (optimizer recipes, communication ratios): a label the
#: study dir and the plan both have must mean the same, but a plan may add labels (and
#: so runs), as a sweep over one more learning rate does.
_BY_LABEL = ("optimizers", "comms")


def _check_same_settings(out: Path, before: dict, settings: dict) -> None:
    """A study dir continues only with the settings its finished runs were made with (a
    setting its plan.json lacks, from an older asrkit, counts as the default)."""
    if not isinstance(before, dict):
        raise DataError(f"{out / 'plan.json'}: damaged (not a JSON object)")
    known = {f.name: f.default for f in dataclasses.fields(StudyPlan) if f.default is not dataclasses.MISSING}
    defaults = json.loads(json.dumps(known))
    plan_before = {**defaults, **before.get("plan", {})}
    plan_now = {**defaults, **settings["plan"]}
    changed = [k for k in _OUTCOME if k not in _BY_LABEL and plan_before.get(k) != plan_now.get(k)]
    for key in _BY_LABEL:  # a label both have must mean the same; new labels add runs
        before_, now_ = plan_before.get(key) or {}, plan_now.get(key) or {}
        if any(before_[label] != now_[label] for label in set(before_) & set(now_)):
            changed.append(key)
    if before.get("network") != settings["network"]:
        changed.append("network")
    if changed:
        raise ConfigError(
            f"{out} holds a study started with other settings ({', '.join(changed)} differ); "
            "continue it with the same plan, models, epochs and network, or give another --out"
        )


@contextmanager
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _simulate_all(
    plan: StudyPlan,
    runs: list[StudyRun],
    out: Path,
    *,
    network: Network,
    jobs: int,
    config_dir: str | Path,
    redecode: Set[str] = frozenset(),
) -> Iterator[str]:
    """Simulate ``runs``, ``jobs`` at a time in job processes (``jobs`` = 1: here), the
    missing step costs first, one at a time; yields each name as it finishes. The runs
    named in ``redecode`` only have their model decoded again."""
    missing: dict[Path, StudyRun] = {}
    for run in runs:
        if run.name in redecode:
            continue
        path = _cost_file(run, out, _run_config(plan, run, config_dir, out)[0])
        if not path.is_file():
            missing.setdefault(path, run)
    if jobs == 1 or len(runs) < 2:
        for run in missing.values():
            _step_cost(plan, run, out, config_dir=config_dir)
        for run in runs:
            _run_one(plan, run, out, network=network, config_dir=config_dir, decode_only=run.name in redecode)
            yield run.name
        return
    context = multiprocessing.get_context("spawn")  # no forked torch thread pools
    level = logging.getLogger("asrkit").getEffectiveLevel()
    # A process per task, so each run starts with nothing of the last one's (its memory
    # above all). Exactly 1: CPython 3.11-3.14's executor can hang with a larger
    # max_tasks_per_child (gh-115634).
    pool = ProcessPoolExecutor(
        min(jobs, len(runs)),
        mp_context=context,
        initializer=_start_job,
        initargs=(level,),
        max_tasks_per_child=1,
    )
    try:
        for run in missing.values():
            pool.submit(_step_cost, plan, run, out, config_dir=str(config_dir)).result()
        names = {
            pool.submit(_job, (plan, run, out, network, str(config_dir), run.name in redecode)): run.name
            for run in runs
        }
        for done in as_completed(names):
            yield done.result()
    except BrokenProcessPool:
        raise UserError(
            "a study job died (killed, most likely for memory: see dmesg); the runs finished so "
            "far are kept: run the same command again, with fewer --jobs if it was memory"
        ) from None
    except (KeyboardInterrupt, SystemExit, GeneratorExit):  # stopped: so are the runs going on
        processes = getattr(pool, "_processes", None) or {}
        for process in list(processes.values()):
            process.terminate()
        raise
    finally:  # a run that failed: the others going on finish first (nothing else starts)
        pool.shutdown(wait=True, cancel_futures=True)


def _start_job(level: int) -> None:
    """A job process: one thread, the parent's log level; Ctrl-C is the parent's to handle
    (it stops the jobs). The kernel spreads the single-threaded jobs over the cores."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%d %H:%M:%S"
    )
    logging.getLogger("asrkit").setLevel(level)


def _job(task: tuple[StudyPlan, StudyRun, Path, Network, str, bool]) -> str:
    plan, run, out, network, config_dir, decode_only = task
    # Ctrl-C is the parent's (it stops the jobs): the simulation takes no signals here.
    _run_one(plan, run, out, network=network, config_dir=config_dir, signals=False, decode_only=decode_only)
    return run.name


@functools.lru_cache(maxsize=256)
def _composed(overrides: tuple[str, ...], config_dir: str) -> AsrkitConfig:
    return to_object(compose(list(overrides), config_dir=config_dir))


def _run_config(
    plan: StudyPlan, run: StudyRun, config_dir: str | Path, out: Path
) -> tuple[AsrkitConfig, list[str], float]:
    overrides = plan.overrides(run)
    # A study checks every run's settings each sitting: each composed once per process.
    cfg = _with_inputs(copy.deepcopy(_composed(tuple(overrides), str(config_dir))), out, run.model)
    if plan.lr_rule == "optim":  # the optimizer's own settings scale it (the trainer does)
        return cfg, overrides, cfg.optim.peak_lr(cfg.train.max_batch)
    lr = cfg.optim.lr * plan.lr_scale(run)
    return dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=lr)), overrides, lr


def _cost_file(run: StudyRun, out: Path, cfg: AsrkitConfig) -> Path:
    caps = learner_batch_caps(cfg)
    return out / "step_costs" / f"{run.model}_b{caps[0]}_f{caps[1]}.json"


def _step_cost(plan: StudyPlan, run: StudyRun, out: Path, *, config_dir: str | Path) -> None:
    """Measure ``run``'s step cost into the study's ``step_costs/`` if it is not there."""
    cfg, _, _ = _run_config(plan, run, config_dir, out)
    path = _cost_file(run, out, cfg)
    if path.is_file():
        return
    in_memory = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, in_memory=True, prefetch=0))
    parts = prepare_learner(in_memory, data_root=Path(cfg.data_root), exp_dir=Path(cfg.exp_dir), log_it=False)
    cost, _ = load_or_measure(path, in_memory, parts)
    log.info("study: step cost of %s measured: %s", path.name, cost)


def _input_files(cfg: AsrkitConfig, decoded: bool) -> list[Path]:
    """The experiment's files a run's result depends on besides the audio and its settings:
    the training and dev alignments (frame targets) or the tokenizer (CTC), and the graph
    a decoded run goes through."""
    from asrkit.learner import alignment_source

    exp_dir = Path(cfg.exp_dir)
    files: list[Path] = []
    if cfg.objective == "ce":
        for which in ("train", "dev"):
            source = Path(alignment_source(cfg, exp_dir, which))
            files += [*sorted(source.glob("ali.*.gz")), source / "final.mdl", source / "tree"]
    else:
        files += sorted((exp_dir / "tokenizer").glob("*"))
    if decoded:
        graph = _graph_dir(cfg)
        files += [graph / "HCLG.fst", graph / "words.txt"]
    return files


def _graph_dir(cfg: AsrkitConfig) -> Path:
    """The graph a run is decoded through: ``wfst.graph``, or the experiment's last GMM
    system's."""
    from asrkit.gmm.pipeline import system_names

    if cfg.wfst.graph:
        return Path(cfg.wfst.graph)
    return Path(cfg.exp_dir) / "gmm" / system_names(cfg.gmm)[-1] / "graph"


#: The study's own copy of the experiment files its runs depend on, one folder per model
#: under the study dir (:func:`_freeze_inputs`); ``inputs.json`` there names its parts.
INPUTS_DIR = "inputs"
_ALIGN_FILES = ("ali.*.gz", "final.mdl", "tree", "num_jobs", "align.json", "phones.txt")
_GRAPH_FILES = ("HCLG.fst", "words.txt", "phones.txt", "disambig_tid.int", "num_pdfs")


def _freeze_inputs(plan: StudyPlan, out: Path, config_dir: str | Path) -> None:
    """For each frame-target (CE) model of ``plan`` without a copy in ``out/inputs/<model>/``
    yet, copy the experiment's training and dev alignments and, if the plan decodes, its
    graph there; every run of the study then trains on and decodes through that copy
    (:func:`_with_inputs`), which git keeps with the study.

    Why: the GMM stage's results depend on the machine it ran on, not only on the code and
    the data: its vector kernels round differently (AN4's tri1 from the same code and audio:
    7.24% test WER with the AVX-512 kernels this VM's CPU picks, 6.34% with AVX2 ones), so
    a study continued on another machine would otherwise train on other targets (2026-12-05:
    a fresh VM's experiment matched none of the 32 runs' inputs)."""
    for model in plan.models:
        dest = out / INPUTS_DIR / model
        runs = [r for r in plan.runs() if r.model == model]
        if dest.is_dir() or not runs:
            continue
        cfg = copy.deepcopy(_composed(tuple(plan.overrides(runs[0])), str(config_dir)))
        if cfg.objective != "ce":
            continue
        from asrkit.learner import alignment_source

        parts = {which: Path(alignment_source(cfg, Path(cfg.exp_dir), which)) for which in ("train", "dev")}
        if plan.decode:
            parts["graph"] = _graph_dir(cfg)
        for which, source in parts.items():
            needed = source / ("HCLG.fst" if which == "graph" else "final.mdl")
            if not needed.is_file():
                raise DataError(
                    f"{needed}: missing; run the experiment's stages through 5 (gmm_decode) before the "
                    "study (local/study.sh does), or restore the study's inputs/ from git"
                )
        names = {which: source.name for which, source in parts.items()}
        if len(set(names.values())) < len(names):
            raise ConfigError(f"the study's inputs {parts}: need folders of distinct names")
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        for which, source in parts.items():
            (partial / source.name).mkdir(parents=True)
            for pattern in _GRAPH_FILES if which == "graph" else _ALIGN_FILES:
                for path in sorted(source.glob(pattern)):
                    shutil.copy2(path, partial / source.name / path.name)
        record = {
            **names,
            "copied_from": {which: str(source) for which, source in parts.items()},
            "machine": _cpu_name(),
            "copied": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        atomic_write(partial / "inputs.json", json.dumps(record, indent=2) + "\n")
        partial.rename(dest)
        log.info("study: the experiment's alignments and graph copied to %s: every run uses them", dest)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _with_inputs(cfg: AsrkitConfig, out: Path, model: str) -> AsrkitConfig:
    """``cfg`` reading the study's copy of its inputs, where it has one."""
    dest = out / INPUTS_DIR / model
    if not (dest / "inputs.json").is_file():
        return cfg
    names = read_record(dest / "inputs.json")
    align = dataclasses.replace(cfg.align, train=str(dest / names["train"]), dev=str(dest / names["dev"]))
    wfst = cfg.wfst
    if "graph" in names:
        wfst = dataclasses.replace(cfg.wfst, graph=str(dest / names["graph"]))
    return dataclasses.replace(cfg, align=align, wfst=wfst)


@functools.lru_cache(maxsize=64)
def _fingerprint(files: tuple[Path, ...]) -> str:
    return inputs_fingerprint(files)


def _decoding(plan: StudyPlan, cfg: AsrkitConfig) -> AsrkitConfig:
    """``cfg`` with the plan's decoding grid (its LM weights and word penalties) and search
    beams, where it sets them."""
    wfst = dataclasses.replace(
        cfg.wfst,
        lm_weights=[float(w) for w in plan.lm_weights] or cfg.wfst.lm_weights,
        word_penalties=[float(p) for p in plan.word_penalties] or cfg.wfst.word_penalties,
        beam=float(plan.beam) or cfg.wfst.beam,
        lattice_beam=float(plan.lattice_beam) or cfg.wfst.lattice_beam,
    )
    wfst.check()
    return dataclasses.replace(cfg, wfst=wfst)


def _expected(plan: StudyPlan, run: StudyRun, config_dir: str | Path, out: Path) -> dict:
    cfg, overrides, lr = _run_config(plan, run, config_dir, out)
    inputs = _fingerprint(tuple(_input_files(cfg, plan.decode)))
    grid = decode_grid(_decoding(plan, cfg).wfst) if plan.decode else None
    return expected_record(run, overrides, lr, decoded=plan.decode, inputs=inputs, grid=grid)


def _run_one(
    plan: StudyPlan,
    run: StudyRun,
    out: Path,
    *,
    network: Network,
    config_dir: str | Path,
    signals: bool = True,
    decode_only: bool = False,
) -> None:
    """Simulate ``run`` and decode its model (``decode_only``: decode the model it trained
    before again, at the plan's grid); its ``run.json`` is written last (``trained.json``,
    the same record, between training and decoding)."""
    cfg, overrides, lr = _run_config(plan, run, config_dir, out)
    expected = _expected(plan, run, config_dir, out)  # the inputs it starts from
    cost = _cost_file(run, out, cfg)
    dest = out / "runs" / run.name
    if decode_only:
        log.info("study: %s: its model decoded again at the plan's grid", run.name)
        # A finished run decoded at another grid, or one stopped during its first decoding.
        before = read_record(dest / "run.json" if (dest / "run.json").is_file() else dest / TRAINED_FILE)
        # decode.json goes first: stopped half-way, the run is decoded again next time.
        decode_run(_decoding(plan, cfg), dest)
        record = {**before, **expected}
        atomic_write(dest / "run.json", json.dumps(record, indent=2) + "\n")
        (dest / TRAINED_FILE).unlink(missing_ok=True)
        return
    log.info("study: %s (%s)", run.name, " ".join(overrides))
    (dest / "run.json").unlink(missing_ok=True)  # the run counts as finished once it is back
    (dest / DIVERGED_FILE).unlink(missing_ok=True)
    (dest / TRAINED_FILE).unlink(missing_ok=True)
    diverged = None
    try:
        simulate_experiment(
            cfg,
            network=network,
            out=dest,
            step_cost=cost,
            force=True,
            signals=signals,
            comm_ratio=plan.comm_ratio(run),
        )
    except TrainingDiverged as err:  # an answer too: this learning rate at this batch fails
        log.warning("study: %s diverged: %s", run.name, err)
        diverged = {"step": err.step, "message": str(err)}
        atomic_write(dest / DIVERGED_FILE, json.dumps(diverged, indent=2) + "\n")
    # With the step cost's path relative to the study (the dir moves).
    record = {
        **expected,
        "step_cost": str(cost.relative_to(out)),
        **({"diverged": True} if diverged else {}),
    }
    if plan.decode and diverged is None:
        # Stopped during the decoding (an hour for a weak model), the next sitting decodes
        # this model instead of training it again (records.run_state).
        atomic_write(dest / TRAINED_FILE, json.dumps(record, indent=2) + "\n")
        decode_run(_decoding(plan, cfg), dest)
    atomic_write(dest / "run.json", json.dumps(record, indent=2) + "\n")  # last: finished
    (dest / TRAINED_FILE).unlink(missing_ok=True)
