"""A learner for the multi-process tests (run under torchrun; see test_distributed.py).

Trains the tiny model on a seeded synthetic set with the given strategy and saves
this learner's final weights as ``OUT/rank<R>.pt`` (plus ``OUT/initial.pt`` from rank 0).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from asrkit.distributed.base import write_learner_metrics
from asrkit.distributed.config import STRATEGIES, StrategyConfig, strategy_config
from asrkit.distributed.launch import context_from_env, init_process_group, shutdown_process_group
from asrkit.distributed.strategies import join_torchrun
from asrkit.loader.batch import Utterance
from asrkit.loader.planning import BucketBatches
from asrkit.models import ModelConfig, build_model
from asrkit.targets import Tokenizer
from asrkit.training import OptimConfig, ScheduleConfig, SpecAugConfig, TrainConfig, Trainer

DIM = 8


def synthetic_utterances(tokenizer: Tokenizer, count: int = 24, seed: int = 0) -> list[Utterance]:
    """Seeded utterances of random token strings whose frames encode their tokens."""
    rng = np.random.default_rng(seed)
    utts = []
    for k in range(count):
        tokens = rng.integers(1, tokenizer.num_tokens + 1, size=int(rng.integers(2, 6)))
        frames = [
            np.sin(np.arange(DIM) * (int(t) + 1) * 0.37) + 0.1 * rng.standard_normal(DIM)
            for t in tokens
            for _ in range(int(rng.integers(3, 7)))
        ]
        utts.append(
            Utterance(
                f"s{k % 3}-u{k:03d}", np.asarray(frames, dtype=np.float32), tokens.astype(np.int64), "A B"
            )
        )
    return utts


def make_trainer(
    out: Path,
    strategy: StrategyConfig,
    *,
    lr: float,
    epochs: int,
    ctx=None,
    resume: str = "false",
    save_every: int = 0,
    randomness: bool = False,
    dev: int = 4,
) -> Trainer:
    """The tiny model on the synthetic set; ``randomness`` adds dropout and SpecAugment (so
    a resumed run must restore the random generators to match)."""
    torch.manual_seed(0)
    tokenizer = Tokenizer(out / "tok")
    utts = synthetic_utterances(tokenizer)
    model_cfg = ModelConfig(size="tiny", dropout=0.3 if randomness else -1.0)
    model = build_model(model_cfg, input_dim=DIM, num_tokens=tokenizer.num_tokens)
    chosen, comm = join_torchrun(strategy, ctx, seed=0) if ctx is not None else (None, None)
    specaug = SpecAugConfig(enabled=randomness, freq_width=2, time_width=3)
    return Trainer(
        model,
        utts,
        utts[:dev],
        tokenizer=tokenizer,
        exp_dir=out / "exp",
        cfg=TrainConfig(
            epochs=epochs,
            max_frames=300,
            max_batch=8,
            progress=False,
            device="cpu",
            clip_grad_norm=1.0,
            save_every=save_every,
        ),
        optim=OptimConfig(name="sgd", lr=lr, momentum=0.9),
        schedule=ScheduleConfig(warmup_steps=0, anneal="none"),
        specaug=specaug,
        meta={"model": model.args},
        comm=comm,
        strategy=chosen,
        seed=0,
        resume=resume,
        resume_key="test",
    )


def main(argv: list[str]) -> int:
    out, name = Path(argv[0]), argv[1]
    settings = dict(arg.split("=", 1) for arg in argv[2:])
    lr, epochs = float(settings.pop("lr", "0.05")), int(settings.pop("epochs", "2"))
    torch.set_num_threads(1)
    ctx = context_from_env(torch.device("cpu"))
    perturb = float(settings.pop("perturb", "0"))
    metrics = settings.pop("metrics", "0") == "1"
    check_validation = settings.pop("validation", "0") == "1"
    schema = STRATEGIES[name].config
    typed = {
        k: (v == "true") if isinstance(getattr(schema, k), bool) else type(getattr(schema, k))(v)
        for k, v in settings.items()
    }
    strategy = strategy_config(name, learners=ctx.world_size, timeout_s=60, **typed)
    init_process_group(ctx, timeout_s=strategy.timeout_s)
    trainer = make_trainer(out, strategy, lr=lr, epochs=epochs, ctx=ctx, dev=24 if check_validation else 4)
    if ctx.rank == 0:
        torch.save(trainer.model.state_dict(), out / "initial.pt")
    if perturb:
        # Different starting points per learner, applied after the strategy syncs them.
        wrap = trainer.strategy.wrap

        def wrap_and_perturb(model, *, resumed):
            wrapped = wrap(model, resumed=resumed)
            gen = torch.Generator().manual_seed(1000 + ctx.rank)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(perturb * torch.randn(p.shape, generator=gen))
            torch.save(model.state_dict(), out / f"start{ctx.rank}.pt")
            return wrapped

        trainer.strategy.wrap = wrap_and_perturb  # type: ignore[method-assign]
    trainer.fit()
    if check_validation:
        # The sharded dev figures every learner logged, against this learner scoring the
        # whole dev set alone with the final weights (no collective).
        batches = BucketBatches(trainer.dev, max_frames=300, max_batch=8, shuffle=False, prefetch=0)
        alone = trainer.objective.validate(
            trainer.model.eval(),
            batches.loader(iter(batches.buckets)),
            tokenizer=trainer.tokenizer,
            texts=trainer.dev_texts,
        )
        sharded = {k: v for k, v in trainer.last_dev.items() if k in alone}
        (out / f"validation{ctx.rank}.json").write_text(
            json.dumps({"sharded": sharded, "alone": alone, "dev_batches": len(batches)})
        )
    if metrics:
        if ctx.is_main:
            write_learner_metrics(out / "exp", trainer.learners_summary)
    torch.save(trainer.model.state_dict(), out / f"rank{ctx.rank}.pt")
    shutdown_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
