"""Trainer overhead: asrkit's training loop vs a minimal hand-written PyTorch loop.

Both sides train the demo-size model from the same initial weights on the same
length-bucketed batches in the same order, with Adam, CTC loss and gradient
clipping; SpecAugment is off on both so they do the same arithmetic. asrkit's
side is :meth:`Trainer.train_epoch` — learning-rate schedule, strategy points,
step bookkeeping and the progress bar included. The sides alternate, and each
keeps its fastest of ``repeats`` passes, which damps a noisy machine.
"""

from __future__ import annotations

import copy
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from asrkit.data import read_data_dir
from asrkit.features.cmvn import read_cmvn
from asrkit.loader.batch import CmvnNormalizer, plan_buckets
from asrkit.loader.opening import load_utterances
from asrkit.models import ModelConfig, build_model
from asrkit.targets import TokenizerConfig, train_tokenizer
from asrkit.training import OptimConfig, ScheduleConfig, SpecAugConfig, TrainConfig, Trainer


def bench_trainer(data_dir: str | Path, *, size: str = "demo", steps: int = 12, repeats: int = 3) -> dict:
    """Seconds per training step, asrkit vs minimal loop, on ``steps`` batches of ``data_dir``.

    Returns:
        raw times, frames per second of each side and ``ratio`` = asrkit / minimal.
    """
    torch.manual_seed(0)
    data_dir = Path(data_dir)
    data = read_data_dir(data_dir)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = train_tokenizer(data.text or {}, Path(tmp) / "tok", TokenizerConfig(kind="char"))
        normalize = CmvnNormalizer("global", global_stats=read_cmvn(data_dir / "cmvn_global.ark"))
        utts = load_utterances(data_dir, normalize, tokenizer=tokenizer)
        cfg = TrainConfig(epochs=1, max_frames=6000, max_batch=16, device="cpu", progress=True)
        buckets = plan_buckets(
            [u.feats.shape[0] for u in utts], max_frames=cfg.max_frames, max_batch=cfg.max_batch
        )[:steps]
        chosen = [utts[i] for b in buckets for i in b]
        model = build_model(
            ModelConfig(size=size), input_dim=utts[0].feats.shape[1], num_tokens=tokenizer.num_tokens
        )
        initial = copy.deepcopy(model.state_dict())
        optim = OptimConfig(name="adam", lr=1e-3)

        # One Trainer for every pass, as in a real run: its one-time setup (optimizer,
        # TensorBoard writer) is paid in the warm-up pass, not in the timed ones.
        trainer = Trainer(
            model,
            chosen,
            chosen[:1],
            tokenizer=tokenizer,
            exp_dir=tmp,
            cfg=cfg,
            optim=optim,
            schedule=ScheduleConfig(warmup_steps=0, anneal="none"),
            specaug=SpecAugConfig(enabled=False),
            meta={},
            seed=0,
        )
        trainer.batches.shuffle = False

        def asrkit_pass() -> tuple[float, int]:
            model.load_state_dict(initial)
            trainer.optimizer.state.clear()
            seconds, _ = trainer.train_epoch(model, trainer.batches.epoch(0), epoch=0)
            return seconds, len(trainer.batches)

        def minimal_pass() -> tuple[float, int]:
            model.load_state_dict(initial)
            opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
            model.train()
            began = time.monotonic()
            order = plan_buckets(
                [u.feats.shape[0] for u in chosen], max_frames=cfg.max_frames, max_batch=cfg.max_batch
            )
            for idx in order:
                batch = [chosen[i] for i in idx]
                feats = nn.utils.rnn.pad_sequence(
                    [torch.from_numpy(u.feats) for u in batch], batch_first=True
                )
                lengths = torch.tensor([len(u.feats) for u in batch])
                targets = torch.cat([torch.from_numpy(u.tokens) for u in batch])
                target_lengths = torch.tensor([len(u.tokens) for u in batch])
                out = model(feats, lengths)
                loss = nn.functional.ctc_loss(
                    out["ctc"].transpose(0, 1),
                    targets,
                    out["lengths"],
                    target_lengths,
                    reduction="sum",
                    zero_infinity=True,
                ) / len(batch)
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad_norm)
                opt.step()
                loss.item()
            return time.monotonic() - began, len(order)

        with trainer.batches, trainer.dev_batches:  # as fit() does: readers start first
            trainer.batches.start()
            asrkit_pass()  # warm-up: first-touch allocations, thread pool, TensorBoard writer
            minimal_pass()
            ours, theirs = [], []
            for _ in range(repeats):
                ours.append(asrkit_pass())
                theirs.append(minimal_pass())
    frames = sum(u.feats.shape[0] for u in chosen)
    asrkit_s, n = min(ours)
    minimal_s, m = min(theirs)
    assert n == m
    return {
        "model": size,
        "steps": n,
        "frames": frames,
        "threads": torch.get_num_threads(),
        "asrkit_s_per_step": round(asrkit_s / n, 4),
        "minimal_s_per_step": round(minimal_s / n, 4),
        "asrkit_frames_per_s": round(frames / asrkit_s, 1),
        "minimal_frames_per_s": round(frames / minimal_s, 1),
        "ratio": round(asrkit_s / minimal_s, 3),
    }
