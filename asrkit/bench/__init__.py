"""Benchmarks run by ``make bench`` / ``asrkit bench``.

Every figure is a ratio against a baseline measured in the same run, with the
raw numbers and the machine recorded in ``bench/results/<name>.json`` and a plot in
``bench/results/<name>.png``.

Public API: :data:`BENCHMARKS` (name -> function returning a result dict).
"""

import functools
from collections.abc import Callable

from asrkit.bench.compute import bench_compute
from asrkit.bench.contention import bench_contention
from asrkit.bench.convergence import bench_convergence
from asrkit.bench.data import bench_data
from asrkit.bench.decoding import bench_decoding
from asrkit.bench.features import bench_features
from asrkit.bench.hmm import bench_hybrid
from asrkit.bench.scoring import bench_scoring
from asrkit.bench.sim import bench_sim
from asrkit.bench.sim_agreement import SGD_HYBRID, bench_sim_agreement
from asrkit.bench.strategies import bench_strategies
from asrkit.bench.trainer import bench_trainer
from asrkit.study.plan import SGD_CLIP, SGD_DECAY_START, SGD_LR, STUDY_MODEL, sgd_recipe

BENCHMARKS: dict[str, Callable[..., dict]] = {
    "features": bench_features,
    "trainer": bench_trainer,
    "compute": bench_compute,
    "decoding": bench_decoding,
    "scoring": bench_scoring,
    "strategies": bench_strategies,
    "convergence": bench_convergence,
    "data": bench_data,
    "hybrid": bench_hybrid,
    "contention": bench_contention,
    "sim": bench_sim,
    # The simulator's speed at the study's operating points: its model (2 x 128 cells) and
    # global batch 192 over 16 and 64 learners (12 and 3 utterances each); needs 384
    # utterances (recipes/an4/data/train), so `make bench` on the test set skips it.
    "sim_study": functools.partial(
        bench_sim, learners=(16, 64), global_batches=(192,), utterances=384, model=STUDY_MODEL
    ),
    "sim_agreement": bench_sim_agreement,
    # The same on a model that learns: AN4's hybrid experiment (frame CE on its tied
    # states; run in recipes/an4 after its stages 0-4) with the study's model and the
    # papers' SGD recipe, SYNC included (its curves must be bitwise torchrun's).
    "sim_agreement_ce": functools.partial(
        bench_sim_agreement,
        experiment=(*SGD_HYBRID, *sgd_recipe(SGD_LR, SGD_DECAY_START, SGD_CLIP)),
        curves=(("sync", 2), ("sync", 4), ("adpsgd", 2), ("adpsgd", 4), ("delay_by_one", 2), ("hybrid", 4)),
        utterances=512,
        global_batch=16,  # 32 steps an epoch: a warm-up of 32 steps
        epochs=4,
        throughput_learners=(),
    ),
}

#: Smaller settings for ``asrkit bench --quick`` (a few minutes in all on 2 cores).
QUICK: dict[str, dict] = {
    "features": {"repeats": 1},
    "trainer": {"steps": 4, "repeats": 2},
    "compute": {"quick": True},
    "decoding": {},
    "scoring": {"utterances": 2000},
    "strategies": {"utterances": 64, "epochs": 2},
    "convergence": {"quick": True},
    "data": {"hours": (1.0, 10.0), "steps": 20, "loader_seconds": 5.0},
    "hybrid": {"quick": True},
    "contention": {"seconds": 6.0},
    "sim": {"learners": (4,), "utterances": 64, "global_batches": (16,), "epochs": 1},
    "sim_study": {"learners": (16,), "utterances": 64, "global_batches": (32,), "epochs": 1},
    "sim_agreement": {
        "curves": (("adpsgd", 2),),
        "seeds": (1, 2),
        "utterances": 64,
        "epochs": 2,
        "throughput_learners": (2,),
        "throughput_epochs": 2,
    },
    "sim_agreement_ce": {
        "curves": (("sync", 2), ("adpsgd", 2)),
        "seeds": (1, 2),
        "utterances": 64,
        "epochs": 2,
    },
}

__all__ = [
    "BENCHMARKS",
    "QUICK",
    "bench_compute",
    "bench_contention",
    "bench_convergence",
    "bench_data",
    "bench_decoding",
    "bench_features",
    "bench_hybrid",
    "bench_scoring",
    "bench_sim",
    "bench_sim_agreement",
    "bench_strategies",
    "bench_trainer",
]
