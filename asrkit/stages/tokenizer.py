"""Stage 3: train the sentencepiece tokenizer on the training transcripts."""

from __future__ import annotations

from asrkit.data.datadir import read_data_dir
from asrkit.stages.registry import StageContext, stage
from asrkit.targets.tokenizer import train_tokenizer


@stage(3, "tokenizer", "train the sentencepiece tokenizer (char/unigram/bpe) on train transcripts")
def tokenizer(ctx: StageContext) -> None:
    data = read_data_dir(ctx.data_root / ctx.cfg.data.train_set)
    assert data.text is not None
    train_tokenizer(data.text, ctx.exp_dir / "tokenizer", ctx.cfg.tokenizer, seed=ctx.cfg.seed)
