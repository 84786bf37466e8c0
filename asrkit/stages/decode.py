"""Stage 5: decode the dev and test sets, scored into ``scoring/``.

Greedy (best-path) results always go to ``decode_<set>/``. With ``decode=beam`` a
lexicon-free beam search adds ``decode_beam_<set>/``; with ``decode=beam_lm`` (the AN4
recipe's default) beam search with stage 3's lexicon and word LM adds
``decode_beam_lm_<set>/``: the LM weight x word score grid is swept on the tune set
(``decode.tune_set``, default the dev set) — one ``wer_<lm weight>_<word score>`` file
each and Kaldi's ``best_wer`` — and every other set is decoded with the best pair.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

from asrkit.data.io import atomic_write
from asrkit.decoding.beam import BeamSearch, lexicon_words
from asrkit.decoding.recognizer import DecodeSettings, Recognizer, write_and_score
from asrkit.errors import ConfigError
from asrkit.scoring.wer import read_text
from asrkit.stages.common import decode_targets, prepared_set, report, stage_recognizer, sweep, tune_target
from asrkit.stages.registry import StageContext, stage

log = logging.getLogger(__name__)


def show_results(ctx: StageContext) -> None:
    """Print the scores of a finished decode again (when the stage is skipped)."""
    method, names = ctx.cfg.decode.method, [name for name, _ in decode_targets(ctx)]
    folders = [("greedy", ctx.exp_dir / f"decode_{name}", name) for name in names]
    if method != "greedy":
        folders += [(method, ctx.exp_dir / f"decode_{method}_{name}", name) for name in names]
    for label, folder, name in folders:  # in the order the stage reports them
        if (folder / "scoring" / "wer").is_file():
            setting = folder / "setting"
            if setting.is_file():
                label = f"{label}, {setting.read_text().strip()}"
            report(name, label, (folder / "scoring" / "wer").read_text().splitlines()[0], folder)


@stage(
    5,
    "decode",
    "greedy CTC decoding, plus beam search with the lexicon and LM tuned on dev "
    "(decode=beam_lm); hyp and scoring/ in decode_[<method>_]<set>/",
    uses=("decode",),
    needs=(4,),
    on_skip=show_results,
    outputs=lambda ctx: [ctx.exp_dir / f"decode_{name}" / "hyp" for name, _ in decode_targets(ctx)],
)
def decode(ctx: StageContext) -> None:
    cfg = ctx.cfg.decode
    recognizer = stage_recognizer(ctx, cfg.model)
    if recognizer.decode_head is None:
        log.info(
            "stage 5 skipped: %s has Kaldi pdf-id classes; use stage 7's log-likelihoods",
            ctx.exp_dir / cfg.model,
        )
        return
    targets = [(name, prepared_set(ctx, name, path)) for name, path in decode_targets(ctx)]
    posteriors = {}
    for name, data_dir in targets:
        posteriors[name] = recognizer.posteriors(recognizer.open_set(data_dir))
        hyp = {utt: recognizer.greedy(lp) for utt, lp in posteriors[name]}
        report(
            name,
            "greedy",
            write_and_score(hyp, data_dir, ctx.exp_dir / f"decode_{name}"),
            ctx.exp_dir / f"decode_{name}",
        )
    if cfg.method == "greedy":
        return
    lexicon = lm = None
    if cfg.method == "beam_lm":
        lexicon, lm = ctx.exp_dir / "lang" / "lexicon.txt", ctx.exp_dir / "lang" / "lm.arpa"
        for path in (lexicon, lm):
            if not path.is_file():
                raise ConfigError(
                    f"{path}: not found; run stage 3 (lang) for this experiment, or decode with decode=greedy"
                )
    lm_weights, word_scores = (cfg.lm_weights, cfg.word_scores) if lm else ([0.0], [0.0])
    grid = list(itertools.product(lm_weights, word_scores))
    chosen = grid[0]
    if len(grid) > 1:
        chosen = _tune(ctx, recognizer, lexicon, lm, grid, posteriors)
    search = BeamSearch(
        recognizer.tokenizer,
        lexicon=lexicon,
        lm=lm,
        beam_size=cfg.beam_size,
        beam_threshold=cfg.beam_threshold,
        lm_weight=chosen[0],
        word_score=chosen[1],
    )
    # What asrkit transcribe uses by default: the search as tuned here.
    settings = DecodeSettings(
        method=cfg.method,
        beam_size=cfg.beam_size,
        beam_threshold=cfg.beam_threshold,
        lm_weight=chosen[0],
        word_score=chosen[1],
        model=cfg.model,
        tuned_on=cfg.tune_set or ctx.cfg.data.dev_set if len(grid) > 1 else "",
    )
    settings.save(ctx.exp_dir)
    known = lexicon_words(lexicon) if lexicon else None
    for name, data_dir in targets:
        out_dir = ctx.exp_dir / f"decode_{cfg.method}_{name}"
        if known is not None and (data_dir / "text").is_file():
            ref = [w for words in read_text(data_dir / "text").values() for w in words]
            oov = sorted({w for w in ref if w not in known})
            log.info(
                "%s: %d of %d reference words (%.2f%%) are not in the lexicon%s",
                name,
                sum(w not in known for w in ref),
                len(ref),
                100.0 * sum(w not in known for w in ref) / max(len(ref), 1),
                f" ({', '.join(oov[:10])}); the decoder cannot output them" if oov else "",
            )
        hyp = {utt: search(lp) for utt, lp in posteriors[name]}
        setting = f"lm_weight={chosen[0]:g} word_score={chosen[1]:g} beam_size={cfg.beam_size}"
        atomic_write(out_dir / "setting", setting + "\n")
        report(
            name,
            f"{cfg.method}, {setting}" if lm else cfg.method,
            write_and_score(hyp, data_dir, out_dir),
            out_dir,
        )


def _tune(
    ctx: StageContext,
    recognizer: Recognizer,
    lexicon: Path | None,
    lm: Path | None,
    grid: list[tuple[float, float]],
    posteriors: dict,
) -> tuple[float, float]:
    """Decode the tune set with every grid point; write ``wer_<w>_<s>`` files and
    ``best_wer``; return the best ``(lm weight, word score)``."""
    cfg = ctx.cfg.decode
    name, data_dir = tune_target(ctx)
    if name not in posteriors:
        posteriors[name] = recognizer.posteriors(recognizer.open_set(data_dir))
    out_dir = ctx.exp_dir / f"decode_{cfg.method}_{name}"

    def hyps(lm_weight: float, word_score: float) -> dict[str, str]:
        search = BeamSearch(
            recognizer.tokenizer,
            lexicon=lexicon,
            lm=lm,
            beam_size=cfg.beam_size,
            beam_threshold=cfg.beam_threshold,
            lm_weight=lm_weight,
            word_score=word_score,
        )
        return {utt: search(lp) for utt, lp in posteriors[name]}

    return sweep(read_text(data_dir / "text"), grid, hyps, out_dir=out_dir, name=name)
