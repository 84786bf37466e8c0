"""The simulator's speed: samples per real second of N simulated learners training one
global batch per step, against one learner training the same global batches, same run.

Both sides are :func:`asrkit.sim.run.simulate` on the same data, model and global batch
caps (``train.max_batch``/``max_frames`` count the global batch): one learner, and N
learners of each strategy, each with its share of every global batch. The ratio is the
N learners' samples/s over the one learner's, counted from the first learner's start of
training to the last one's end (``ratio``: 1.0 would mean simulating N learners costs
nothing beyond the arithmetic of the global batch); ``ratio_with_setup`` counts building
the learners and writing the model too, a fixed cost per run.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from asrkit.config import AsrkitConfig, compose, to_object
from asrkit.data import read_data_dir
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


def bench_parts(
    cfg: AsrkitConfig, train: list[Utterance], dev: list[Utterance], tokenizer: Tokenizer
) -> LearnerParts:
    """What a benchmark's learners share (:class:`~asrkit.learner.LearnerParts`): the
    utterances in memory, ``cfg.model``, the CTC objective."""
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
    learners: tuple[int, ...] = (4, 16),
    strategies: tuple[str, ...] = ("sync", "adpsgd"),
    utterances: int = 256,
    global_batch: int = 32,
    epochs: int = 1,
    size: str = "demo",
) -> dict:
    """Real seconds of one epoch over ``utterances`` of ``data_dir`` (features computed,
    ``cmvn_global.ark``) with global batches of ``global_batch`` utterances."""
    data_dir = Path(data_dir)
    data = read_data_dir(data_dir)
    detail: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="asrkit-bench-sim-") as tmp:
        exp = Path(tmp)
        tokenizer = train_tokenizer(data.text or {}, exp / "tokenizer", TokenizerConfig(kind="char"))
        utts = read_bench_data(data_dir, tokenizer)[:utterances]
        if len(utts) < 2 * global_batch:
            raise ValueError(f"{data_dir}: {len(utts)} utterances; the benchmark needs {2 * global_batch}")
        dim = int(utts[0].feats.shape[1])
        overrides = [
            f"model.size={size}",
            f"train.epochs={epochs}",
            f"train.max_batch={global_batch}",
            "train.max_frames=1000000",
            "train.progress=false",
            "train.log_every=1000000",
            "specaug.enabled=false",
            "optim.fused=true",  # both sides: the study's optimizer (see OptimConfig.fused)
            f"features.num_mel_bins={dim}",
        ]

        def run(strategy: str, n: int) -> dict:
            extra = [] if n == 1 else [f"strategy={strategy}", f"strategy.learners={n}"]
            cfg = to_object(compose([*overrides, *extra, f"exp_dir={exp / f'{strategy}{n}'}"]))
            parts = bench_parts(cfg, utts, utts[:8], tokenizer)
            (exp / f"{strategy}{n}").mkdir()
            torch.manual_seed(0)
            result = simulate(
                cfg,
                data_root=data_dir.parent,
                exp_dir=exp / f"{strategy}{n}",
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
                "samples": samples,
                "real_s": round(result.real_s, 2),
                "fit_real_s": round(result.fit_real_s, 2),
                "samples_per_real_s": round(samples / result.fit_real_s, 2),
                "samples_per_real_s_with_setup": round(samples / result.real_s, 2),
            }

        baseline = run("single", 1)
        detail.append(baseline)
        ratios = {}
        for strategy in strategies:
            for n in learners:
                row = run(strategy, n)
                row["ratio"] = round(row["samples_per_real_s"] / baseline["samples_per_real_s"], 3)
                row["ratio_with_setup"] = round(
                    row["samples_per_real_s_with_setup"] / baseline["samples_per_real_s_with_setup"], 3
                )
                detail.append(row)
                ratios[f"{strategy}_n{n}"] = row["ratio"]
    return {
        "model": size,
        "utterances": len(utts),
        "global_batch": global_batch,
        "epochs": epochs,
        "threads": torch.get_num_threads(),
        **ratios,
        "detail": detail,
    }
