"""Stage 3: the recipe's "lang": tokenizer, lexicon and word n-gram LM.

Like Kaldi's ``prepare_lang.sh`` + ``format_lm.sh``: from the training transcripts it
trains the sentencepiece tokenizer (``exp/<name>/tokenizer/``), spells every training
word in its units (``exp/<name>/lang/lexicon.txt``) and estimates a Kneser-Ney word
n-gram LM (``exp/<name>/lang/lm.arpa``), reporting its perplexity on the dev set. The
LM sees only ``lm.sets`` (default: the training set) and ``lm.extra_text``. With
``lm.general_words`` the vocabulary is open (:mod:`asrkit.lm.vocab`): general English
words join the lexicon (``lang/lexicon_open.txt`` holds their pronunciations) and the LM
as a unigram mixed in at the weight with the lowest dev perplexity
(``lang/open_vocabulary.json``). No test split is read.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace
from pathlib import Path

from asrkit.data.datadir import read_data_dir
from asrkit.data.io import atomic_write
from asrkit.data.perturb import original_only, perturbed_factors
from asrkit.decoding.beam import lexicon_words, spell, write_lexicon
from asrkit.errors import ConfigError, DataError
from asrkit.lm.ngram import NGramLM, estimate_kneser_ney, write_arpa
from asrkit.lm.vocab import cmu_pronunciations, general_words, log_perplexity, pick_weight
from asrkit.stages.common import OPEN_LEXICON, resolve_sets
from asrkit.stages.registry import StageContext, stage
from asrkit.targets.phones import read_pronunciations
from asrkit.targets.tokenizer import Tokenizer, train_tokenizer

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
    cfg = ctx.cfg.lm
    lang_dir = ctx.exp_dir / "lang"
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
    words = {w for s in sentences for w in s}
    tokenizer_cfg = ctx.cfg.tokenizer
    general: dict[str, float] = {}
    if cfg.general_words:
        general, open_lexicon = _open_vocabulary(ctx, words)
        if open_lexicon is not None and tokenizer_cfg.kind == "phone":
            tokenizer_cfg = replace(tokenizer_cfg, lexicon=str(open_lexicon))
    else:
        (lang_dir / OPEN_LEXICON).unlink(missing_ok=True)
    # Speed-perturbed copies repeat their sentences: the tokenizer and the LM see each once.
    factors = perturbed_factors(ctx.data_root / ctx.cfg.data.train_set)
    tokenizer = train_tokenizer(
        original_only(data.text, factors), ctx.exp_dir / "tokenizer", tokenizer_cfg, seed=ctx.cfg.seed
    )
    if general and tokenizer.kind != "phone":
        general = {w: f for w, f in general.items() if _spellable(tokenizer, w)}
    extra = lexicon_words(cfg.extra_words) - words if cfg.extra_words else set()
    count = write_lexicon(lang_dir / "lexicon.txt", words | extra | set(general), tokenizer)
    if extra:
        log.info(
            "lexicon: %d more words from lm.extra_words=%s (not in the LM text: scored as <unk>)",
            len(extra),
            cfg.extra_words,
        )
    lm = estimate_kneser_ney(sentences, order=cfg.order, discounts=cfg.discounts or None)
    dev = [t.split() for t in (read_data_dir(ctx.data_root / ctx.cfg.data.dev_set).text or {}).values()]
    vocabulary = words | set(general)
    if general:
        ppl_closed, oov_closed = perplexity(lm, dev, words)
        weight, lm, table = pick_weight(lm, general, cfg.general_weights, dev, vocabulary)
        log.info(
            "LM mixed with a unigram over %d general words at weight %g (dev perplexity by weight: %s)",
            len(general),
            weight,
            ", ".join(f"{w:g}: {p:.2f}" for w, p in table.items()),
        )
        record = {
            "general_words": cfg.general_words,
            "kept": len(general),
            "new": len(set(general) - words),
            "weight": weight,
            "dev_perplexity_by_weight": {f"{w:g}": round(p, 3) for w, p in table.items()},
            "dev_closed": {"perplexity": round(ppl_closed, 3), "oov_percent": round(oov_closed, 3)},
            "dev_open_oov_percent": round(perplexity(lm, dev, vocabulary)[1], 3),
        }
        atomic_write(lang_dir / "open_vocabulary.json", json.dumps(record, indent=2) + "\n")
    write_arpa(lm, lang_dir / "lm.arpa")
    log.info(
        "lexicon: %d words; %d-gram LM: %s; dev perplexity %.2f, OOV rate %.2f%%",
        count,
        cfg.order,
        lang_dir / "lm.arpa",
        *perplexity(lm, dev, vocabulary),
    )


def _open_vocabulary(ctx: StageContext, words: set[str]) -> tuple[dict[str, float], Path | None]:
    """The general word list (word -> frequency) and, with a corpus pronunciation lexicon,
    ``lang/lexicon_open.txt``: that lexicon plus CMUdict pronunciations of the general words
    in its phones (a word that cannot be pronounced in them is left out of the list)."""
    general = general_words(ctx.cfg.lm.general_words)
    source = ctx.cfg.tokenizer.lexicon or ctx.cfg.data.lexicon
    if not source:
        log.info("open vocabulary: %d general words (no pronunciation lexicon)", len(general))
        return general, None
    keep_stress = ctx.cfg.tokenizer.keep_stress
    corpus = read_pronunciations(source, keep_stress=keep_stress)
    phones = {p for prons in corpus.values() for pron in prons for p in pron}
    added = cmu_pronunciations([w for w in general if w not in corpus], phones, keep_stress=keep_stress)
    kept = {w: f for w, f in general.items() if w in corpus or w in added}
    entries = {**corpus, **added}
    path = ctx.exp_dir / "lang" / OPEN_LEXICON
    atomic_write(path, "".join(f"{w} {' '.join(p)}\n" for w in sorted(entries) for p in entries[w]))
    log.info(
        "open vocabulary: %d of the %d most frequent English words kept (%d new, with CMUdict "
        "pronunciations in the %d phones of %s; %d left out for want of one) -> %s",
        len(kept),
        ctx.cfg.lm.general_words,
        len(set(kept) - words),
        len(phones),
        source,
        len(general) - len(kept),
        path,
    )
    return kept, path


def _spellable(tokenizer: Tokenizer, word: str) -> bool:
    try:
        spell(tokenizer, word)
    except ConfigError:
        return False
    return True


def perplexity(lm: NGramLM, sentences: list[list[str]], vocabulary: set[str]) -> tuple[float, float]:
    """Perplexity of ``sentences`` (``</s>`` counted, OOV words skipped, as SRILM's
    ``ngram -ppl``) and the OOV rate in percent."""
    words = sum(len(s) for s in sentences)
    oov = sum(w not in vocabulary for s in sentences for w in s)
    return math.exp(log_perplexity(lm, sentences, vocabulary)), 100.0 * oov / max(words, 1)
