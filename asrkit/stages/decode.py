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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from asrkit.data.io import atomic_write
from asrkit.decoding.beam import BeamSearch, lexicon_words
from asrkit.decoding.recognizer import DecodeSettings, Recognizer, check_exp_dir, write_and_score
from asrkit.device import pick_device
from asrkit.errors import ConfigError, DataError
from asrkit.scoring import score_texts
from asrkit.scoring.wer import read_text
from asrkit.stages.data import load_prep_module
from asrkit.stages.registry import StageContext, stage

log = logging.getLogger(__name__)


def resolve_sets(ctx: StageContext, entries: list[str]) -> list[tuple[str, Path]]:
    """``(name, data dir)`` pairs for entries that are set names or data dir paths."""
    out = []
    for entry in entries:
        path = Path(entry)
        if "/" in entry or path.is_absolute():
            out.append((path.resolve().name, path))
        else:
            out.append((entry, ctx.data_root / entry))
    return out


def prepared_set(ctx: StageContext, name: str, path: Path) -> Path:
    """The data dir to decode for a ``decode.sets`` entry: a dir given by path goes through
    the recipe's ``prepare_set(source, target)`` when its prep script has one (a corpus
    whose dirs need fixing, e.g. speechocean762's TAB-separated files and relative audio
    paths), into ``data_root/<name>``; otherwise it is decoded as it is."""
    if path == ctx.data_root / name or not ctx.cfg.data.prep_script:
        return path
    prep = load_prep_module(ctx.cfg.data.prep_script)
    if not hasattr(prep, "prepare_set"):
        return path
    if not path.is_dir():
        raise DataError(
            f"decode.sets: {path} is not a directory; give a data dir laid out like "
            f"the {ctx.cfg.data.corpus} release's"
        )
    target = ctx.data_root / name
    prep.prepare_set(path, target)
    log.info("%s: prepared from %s by %s", target, path, ctx.cfg.data.prep_script)
    return target


def stage_recognizer(ctx: StageContext, model: str) -> Recognizer:
    """The experiment's ``model`` bundle as a :class:`Recognizer` on the configured device."""
    check_exp_dir(ctx.exp_dir, model)
    return Recognizer(
        ctx.exp_dir,
        model=model,
        device=pick_device(ctx.cfg.train.device),
        max_frames=ctx.cfg.decode.max_frames,
    )


def decode_targets(ctx: StageContext) -> list[tuple[str, Path]]:
    """The sets to decode: ``decode.sets``, or the recipe's dev and test sets."""
    return resolve_sets(ctx, ctx.cfg.decode.sets or [ctx.cfg.data.dev_set, *ctx.cfg.data.test_sets])


def tune_target(ctx: StageContext) -> tuple[str, Path]:
    """``(name, data dir)`` of the set decoding weights are chosen on (``decode.tune_set``,
    default the dev set); it must have transcripts."""
    ((name, data_dir),) = resolve_sets(ctx, [ctx.cfg.decode.tune_set or ctx.cfg.data.dev_set])
    if not (data_dir / "text").is_file():
        raise DataError(f"{data_dir}/text: not found; decode.tune_set needs transcripts")
    return name, data_dir


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
        posteriors[name] = recognizer.posteriors(recognizer.data_dir_utterances(data_dir))
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
        posteriors[name] = recognizer.posteriors(recognizer.data_dir_utterances(data_dir))
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


def sweep(
    ref: dict[str, list[str]],
    grid: Sequence[tuple[float, float]],
    hyps: Callable[[float, float], Mapping[str, str]],
    *,
    out_dir: Path,
    name: str,
) -> tuple[float, float]:
    """Score ``hyps(lm_weight, word_score)`` against ``ref`` at every grid point, writing
    one ``wer_<lm weight>_<word score>`` file each and Kaldi's ``best_wer`` in
    ``out_dir``; return the pair with the fewest errors (ties: the lower weights)."""
    results = []
    for lm_weight, word_score in grid:
        hyp = {utt: text.split() for utt, text in hyps(lm_weight, word_score).items()}
        words = score_texts(ref, hyp).words
        atomic_write(out_dir / f"wer_{lm_weight:g}_{word_score:g}", words.kaldi_line() + "\n")
        results.append((words.errors, lm_weight, word_score, words.kaldi_line()))
    best = min(results)
    atomic_write(out_dir / "best_wer", f"{best[3]} {out_dir / f'wer_{best[1]:g}_{best[2]:g}'}\n")
    log.info(
        "%s: best of %d settings: %g / %g (lm weight / word score or penalty), %s",
        name,
        len(grid),
        best[1],
        best[2],
        best[3],
    )
    return best[1], best[2]


def report(name: str, method: str, line: str | None, out_dir: Path) -> None:
    if line is None:
        log.info("%s (%s): hypotheses in %s (no text to score against)", name, method, out_dir / "hyp")
    else:
        log.info("%s (%s): %s (%s)", name, method, line, out_dir / "scoring" / "wer")
        print(f"{name}: {line}" if method == "greedy" else f"{name} ({method}): {line}", flush=True)
