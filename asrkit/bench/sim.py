"""The simulator's speed: samples per real second of N simulated learners training one
global batch per step, against one learner training the same global batches, same run.

Both sides are :func:`asrkit.sim.run.simulate` on the same data, model, optimizer and
global batch caps (``train.max_batch``/``max_frames`` count the global batch), on the same
number of threads: one learner, and N learners of each strategy, each with its share of
every global batch. The ratio is the N learners' samples/s over the one learner's, counted
over training (from the moment every learner is built to the last one's end; ``ratio``:
1.0 would mean simulating N learners costs nothing beyond the arithmetic of the global
batch); ``ratio_with_setup`` counts building the learners and writing the model too, a
fixed cost per run. Samples are those processed: asynchronous learners end a global epoch
by their progress and may process a few more than the set.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import torch

from asrkit.config import AsrkitConfig, compose, to_object
from asrkit.data import read_data_dir
from asrkit.errors import UserError
from asrkit.features.cmvn import read_cmvn
from asrkit.learner import LearnerParts
from asrkit.loader.batch import CmvnNormalizer, Utterance
from asrkit.loader.opening import load_utterances
from asrkit.loader.sources import InMemorySource
from asrkit.sim.network import NETWORKS
from asrkit.sim.run import StepCost, simulate
from asrkit.targets import Tokenizer, TokenizerConfig, train_tokenizer
from asrkit.training.objectives import build_objective


def read_bench_data(data_dir: Path, tokenizer: Tokenizer) -> list[Utterance]:
    """A data dir's utterances in memory (features computed, ``cmvn_global.ark``), globally
    normalised, with ``tokenizer``'s targets."""
    normalize = CmvnNormalizer("global", global_stats=read_cmvn(data_dir / "cmvn_global.ark"))
    return load_utterances(data_dir, normalize, tokenizer=tokenizer)


def split_utterances(
    utts: list[Utterance], count: int, *, held_out: bool
) -> tuple[list[Utterance], list[Utterance]]:
    """The first ``count`` utterances (0: all) as (train, dev): with ``held_out`` the last
    quarter is the dev set and is not trained on; otherwise all are trained on and the
    first two are a token dev set (validation then costs little)."""
    utts = utts[:count] if count else utts
    if held_out:
        cut = len(utts) * 3 // 4
        return utts[:cut], utts[cut:]
    return utts, utts[:2]


def experiment_data(
    overrides: list[str], count: int
) -> tuple[LearnerParts, list[Utterance], list[Utterance]]:
    """An experiment's own data, as its learners read it (frame targets of its alignments
    for CE): the parts the experiment's settings make, the first ``count`` training
    utterances (0: all) and the dev set, in memory. Run in the recipe's directory (its
    ``data_root``, ``exp_dir``)."""
    import dataclasses

    from asrkit.learner import prepare_learner

    cfg = to_object(compose(overrides))
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, in_memory=True, prefetch=0))
    parts = prepare_learner(cfg, data_root=Path(cfg.data_root), exp_dir=Path(cfg.exp_dir), log_it=False)
    assert isinstance(parts.train_set, InMemorySource) and isinstance(parts.dev_set, InMemorySource)
    train = parts.train_set.utts[:count] if count else parts.train_set.utts
    return parts, train, parts.dev_set.utts


def bench_parts(
    cfg: AsrkitConfig,
    train: list[Utterance],
    dev: list[Utterance],
    tokenizer: Tokenizer,
    *,
    like: LearnerParts | None = None,
) -> LearnerParts:
    """What a benchmark's learners share (:class:`~asrkit.learner.LearnerParts`): the
    utterances in memory, ``cfg.model``, the CTC objective; or, ``like`` an experiment's
    parts (:func:`experiment_data`), that experiment's model settings, objective and
    metadata with ``cfg``'s other settings."""
    if like is not None:
        return LearnerParts(
            cfg,
            InMemorySource(train),
            InMemorySource(dev),
            like.tokenizer,
            like.model_cfg,
            like.objective,
            like.meta,
            like.frame_shift,
            like.input_dim,
        )
    return LearnerParts(
        cfg,
        InMemorySource(train),
        InMemorySource(dev),
        tokenizer,
        cfg.model,
        build_objective("ctc", token_classes=False),
        {"features": {}, "cmvn": "global", "objective": "ctc"},
        (0.01, 0.01),
    )


def bench_sim(
    data_dir: str | Path,
    *,
    learners: tuple[int, ...] = (4, 16, 64),
    strategies: tuple[str, ...] = ("sync", "adpsgd"),
    utterances: int = 256,
    global_batches: tuple[int, ...] = (32, 64),
    epochs: int = 2,
    size: str = "demo",
    threads: int = 1,
    model: tuple[str, ...] = (),
) -> dict:
    """Real seconds of ``epochs`` over ``utterances`` of ``data_dir`` (features computed,
    ``cmvn_global.ark``) with global batches of each of ``global_batches`` utterances, on
    ``threads`` threads (both sides: the simulator computes one learner at a time, so a
    machine's other cores run other simulations, as ``asrkit study run --jobs`` does).
    ``model``: overrides of the model size's settings (the study's: ``model.hidden=128``...)."""
    data_dir = Path(data_dir)
    data = read_data_dir(data_dir)
    detail: list[dict] = []
    ratios: dict[str, float] = {}
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="asrkit-bench-sim-") as tmp:
            exp = Path(tmp)
            tokenizer = train_tokenizer(data.text or {}, exp / "tokenizer", TokenizerConfig(kind="char"))
            utts = read_bench_data(data_dir, tokenizer)[:utterances]
            if len(utts) < 2 * max(global_batches):
                raise UserError(
                    f"{data_dir}: {len(utts)} utterances; global batches of {max(global_batches)} need "
                    f"{2 * max(global_batches)}: give a bigger set with --data-dir (e.g. "
                    "recipes/an4/data/train after recipes/an4/run.sh --stop-stage 3)"
                )
            dim = int(utts[0].feats.shape[1])
            for batch in global_batches:
                overrides = [
                    f"model.size={size}",
                    *model,
                    f"train.epochs={epochs}",
                    f"train.max_batch={batch}",
                    "train.max_frames=1000000",
                    "train.progress=false",
                    "train.log_every=1000000",
                    "specaug.enabled=false",
                    "optim.fused=true",  # both sides: the study's optimizer (see OptimConfig.fused)
                    f"features.num_mel_bins={dim}",
                ]
                run = functools.partial(_bench_run, exp, overrides, utts, tokenizer, data_dir, batch, epochs)
                baseline = run("single", 1)
                detail.append(baseline)
                for strategy in strategies:
                    for n in (n for n in learners if n <= batch):  # at least an utterance each
                        row = run(strategy, n)
                        for key in ("", "_with_setup"):
                            rate = f"samples_per_real_s{key}"
                            row[f"ratio{key}"] = round(row[rate] / baseline[rate], 3)
                        detail.append(row)
                        ratios[f"{strategy}_n{n}_b{batch}"] = row["ratio"]
    finally:
        torch.set_num_threads(previous_threads)
    return {
        "model": " ".join([size, *model]),
        "utterances": len(utts),
        "global_batches": list(global_batches),
        "epochs": epochs,
        "threads": threads,
        **ratios,
        "detail": detail,
    }


def _bench_run(
    exp: Path,
    overrides: list[str],
    utts: list[Utterance],
    tokenizer: Tokenizer,
    data_dir: Path,
    batch: int,
    epochs: int,
    strategy: str,
    n: int,
) -> dict:
    """One simulated run of the benchmark (``n`` = 1: the one-learner baseline)."""
    extra = [] if n == 1 else [f"strategy={strategy}", f"strategy.learners={n}"]
    name = f"{strategy}{n}_b{batch}"
    cfg = to_object(compose([*overrides, *extra, f"exp_dir={exp / name}"]))
    parts = bench_parts(cfg, utts, utts[:8], tokenizer)
    (exp / name).mkdir()
    torch.manual_seed(0)
    result = simulate(
        cfg,
        data_root=data_dir.parent,
        exp_dir=exp / name,
        network=NETWORKS["infiniband"],
        cost=StepCost(step_s=0.0, frame_s=1e-5),
        parts=parts,
    )
    # The samples the learners processed: an asynchronous strategy's learners end a
    # global epoch by their progress and may process a few more than the set.
    detail = (result.learners or {}).get("learners_detail")
    samples = sum(m["samples"] for m in detail) if detail else epochs * len(utts)
    return {
        "strategy": strategy if n > 1 else "one learner",
        "learners": n,
        "global_batch": batch,
        "samples": samples,
        "real_s": round(result.real_s, 2),
        "fit_real_s": round(result.fit_real_s, 2),
        "samples_per_real_s": round(samples / result.fit_real_s, 2),
        "samples_per_real_s_with_setup": round(samples / result.real_s, 2),
    }
