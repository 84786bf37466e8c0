"""Stage 3: the recipe's "lang": tokenizer, lexicon and word n-gram LM.

Like Kaldi's ``prepare_lang.sh`` + ``format_lm.sh``: from the training transcripts it
trains the sentencepiece tokenizer (``exp/<name>/tokenizer/``), spells every training
word in its units (``exp/<name>/lang/lexicon.txt``) and estimates a Kneser-Ney word
n-gram LM (``exp/<name>/lang/lm.arpa``), reporting its perplexity on the dev set. The
LM sees only ``lm.sets`` (default: the training set) and ``lm.extra_text``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from asrkit.data.datadir import read_data_dir
from asrkit.data.perturb import original_only, perturbed_factors
from asrkit.decoding.beam import lexicon_words, write_lexicon
from asrkit.errors import DataError
from asrkit.lm.ngram import EOS, NGramLM, estimate_kneser_ney, write_arpa
from asrkit.stages.common import resolve_sets
from asrkit.stages.registry import StageContext, stage
from asrkit.targets.tokenizer import train_tokenizer

log = logging.getLogger(__name__)


@stage(
    3,
    "lang",
    "tokenizer (char/unigram/bpe/phone), lexicon and Kneser-Ney word n-gram LM from the training transcripts",
    uses=("tokenizer", "lm"),
    needs=(1,),
    pipelines=("ctc", "hybrid"),
    outputs=lambda ctx: [ctx.exp_dir / "tokenizer" / "units.txt", ctx.exp_dir / "lang" / "lm.arpa"],
)
def lang(ctx: StageContext) -> None:
    data = read_data_dir(ctx.data_root / ctx.cfg.data.train_set)
    assert data.text is not None
    # Speed-perturbed copies repeat their sentences: the tokenizer and the LM see each once.
    factors = perturbed_factors(ctx.data_root / ctx.cfg.data.train_set)
    tokenizer = train_tokenizer(
        original_only(data.text, factors), ctx.exp_dir / "tokenizer", ctx.cfg.tokenizer, seed=ctx.cfg.seed
    )
    cfg = ctx.cfg.lm
    sentences: list[list[str]] = []
    for name, data_dir in resolve_sets(ctx, cfg.sets or [ctx.cfg.data.train_set]):
        text = read_data_dir(data_dir).text
        if text is None:
            raise DataError(f"{data_dir}/text: not found; lm.sets entries need transcripts")
        text = original_only(text, perturbed_factors(data_dir))
        sentences += [line.split() for line in text.values() if line.split()]
        log.info("LM text: %d sentences from %s", len(text), name)
    if cfg.extra_text:
        try:
            lines = Path(cfg.extra_text).read_text(encoding="utf-8").splitlines()
        except OSError as err:
            raise DataError(f"{cfg.extra_text}: cannot read lm.extra_text ({err.strerror})") from None
        sentences += [line.split() for line in lines if line.split()]
    lang_dir = ctx.exp_dir / "lang"
    words = {w for s in sentences for w in s}
    extra = lexicon_words(cfg.extra_words) - words if cfg.extra_words else set()
    count = write_lexicon(lang_dir / "lexicon.txt", words | extra, tokenizer)
    if extra:
        log.info(
            "lexicon: %d more words from lm.extra_words=%s (not in the LM text: scored as <unk>)",
            len(extra),
            cfg.extra_words,
        )
    lm = estimate_kneser_ney(sentences, order=cfg.order, discounts=cfg.discounts or None)
    write_arpa(lm, lang_dir / "lm.arpa")
    dev = read_data_dir(ctx.data_root / ctx.cfg.data.dev_set).text or {}
    log.info(
        "lexicon: %d words; %d-gram LM: %s; dev perplexity %.2f, OOV rate %.2f%%",
        count,
        cfg.order,
        lang_dir / "lm.arpa",
        *perplexity(lm, [t.split() for t in dev.values()], words),
    )


def perplexity(lm: NGramLM, sentences: list[list[str]], vocabulary: set[str]) -> tuple[float, float]:
    """Perplexity of ``sentences`` (``</s>`` counted, OOV words skipped, as SRILM's
    ``ngram -ppl``) and the OOV rate in percent."""
    log_sum, tokens, oov, words = 0.0, 0, 0, 0
    for sentence in sentences:
        context: list[str] = ["<s>"]
        for word in [*sentence, EOS]:
            if word != EOS:
                words += 1
                if word not in vocabulary:
                    oov += 1
                    context = context + [word]  # its n-grams back off past it
                    continue
            log_sum += math.log(lm.prob(word, context))
            tokens += 1
            context = context + [word]
    ppl = math.exp(-log_sum / tokens) if tokens else float("nan")
    return ppl, 100.0 * oov / max(words, 1)
