"""What several stages share: the sets they decode and tune on, tuning and decoding with
any decoder and its reports, the experiment's model, the recipe's preparation script, and the key under which
training saves its resume states. Stage modules import from here (and from library
layers below), never from one another.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType

from asrkit.data.io import atomic_write
from asrkit.decoding.decoder import Decoder, Point, Prepared, write_and_score
from asrkit.decoding.recognizer import Recognizer, check_exp_dir
from asrkit.device import pick_device
from asrkit.errors import FILE_ONLY, ConfigError, DataError
from asrkit.scoring import score_texts
from asrkit.scoring.wer import BEST_WER_FILE, read_text
from asrkit.stages.registry import RESULTS, StageContext

log = logging.getLogger(__name__)


def load_prep_module(script: str) -> ModuleType:
    """Import the recipe's corpus preparation script (``data.prep_script``)."""
    path = Path(script)
    if not path.is_file():
        raise ConfigError(
            f"data.prep_script={script}: file not found; point it at the recipe's data preparation script"
        )
    spec = importlib.util.spec_from_file_location(f"asrkit_prep_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("corpus_present", "prepare"):
        if not hasattr(module, name):
            raise ConfigError(
                f"{path}: defines no {name}(); a prep script needs "
                "corpus_present(corpus_dir) and prepare(corpus_dir, data_root, "
                "*, num_dev, train_set, dev_set, test_sets)"
            )
    return module


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


def model_input(ctx: StageContext, model: str | None = None) -> list[Path]:
    """The model bundle a stage reads (``model``, default ``decode.model``, in the
    experiment dir), as the stage's ``inputs``: a model replaced by hand (an average of
    checkpoints, another run's) decodes again instead of showing the old model's scores."""
    return [ctx.exp_dir / (model or ctx.cfg.decode.model)]


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


def method_folders(ctx: StageContext, method: str) -> list[tuple[str, Path, str]]:
    """``(method, decode_<method>_<set>/, set)`` of every set decoded (what
    :func:`show_decoded` reports)."""
    return [(method, ctx.exp_dir / f"decode_{method}_{name}", name) for name, _ in decode_targets(ctx)]


def tune_target(ctx: StageContext) -> tuple[str, Path]:
    """``(name, data dir)`` of the set decoding weights are chosen on (``decode.tune_set``,
    default the dev set); it must have transcripts."""
    ((name, data_dir),) = resolve_sets(ctx, [ctx.cfg.decode.tune_set or ctx.cfg.data.dev_set])
    if not (data_dir / "text").is_file():
        raise DataError(f"{data_dir}/text: not found; decode.tune_set needs transcripts")
    return name, data_dir


def tune_and_decode(
    decoder: Decoder,
    *,
    tune: Callable[[], tuple[str, Path]],
    targets: Sequence[tuple[str, Path]],
    out_dir: Callable[[str], Path],
    prepared: dict[str, Prepared] | None = None,
    record_dir: Path | None = None,
) -> Point:
    """Kaldi's "tune on dev, decode every set at the best setting", for any decoder.

    When ``decoder.grid`` has more than one point, the set ``tune()`` names is decoded at every
    point (one ``wer_<w>_<s>`` file each and Kaldi's ``best_wer`` in ``out_dir(name)``) and
    the point with the fewest errors is picked (ties: the lower weights); then each of
    ``targets`` is decoded at it into ``out_dir(name)`` (``hyp``, ``scoring/``, and the
    ``setting`` line) and its score reported. ``prepared`` caches each set's acoustic
    scores by name (several decoders of one network share them); with ``record_dir`` the
    tuned decoder's record is saved there (what :func:`~asrkit.decoding.load_decoder`
    rebuilds). Returns the point picked.
    """
    cache = prepared if prepared is not None else {}

    def scores(name: str, data_dir: Path) -> Prepared:
        if name not in cache:
            cache[name] = decoder.prepare(data_dir)
        return cache[name]

    best, tuned_on = decoder.grid[0], ""
    table: Mapping[Point, Mapping[str, str]] = {}
    tune_dir = Path()
    if len(decoder.grid) > 1:
        tuned_on, tune_dir = tune()
        table = decoder.hypotheses(scores(tuned_on, tune_dir), decoder.grid)
        best = _pick(
            read_text(tune_dir / "text"),
            table,
            out_dir=out_dir(tuned_on),
            what=f"{tuned_on} ({decoder.label})",
        )
    if record_dir is not None:
        decoder.record(best, tuned_on=tuned_on).save(record_dir)
    for name, data_dir in targets:
        if table and name == tuned_on and Path(data_dir).resolve() == Path(tune_dir).resolve():
            # The sweep decoded this set at every point, the best one included: a decoder's
            # words at a point do not depend on the other points it was asked for.
            hyp = dict(table[best])
        else:
            hyp = decoder.hypotheses(scores(name, data_dir), [best])[best]
        folder = out_dir(name)
        times = None
        if (Path(data_dir) / "stm").is_file() and decoder.has_word_times:
            # NIST scoring places the words by their times (a CTM): from the decoder's alignment.
            prepared_set = scores(name, data_dir)
            times = {utt: decoder.word_times(prepared_set, utt, text) for utt, text in hyp.items()}
        line = write_and_score(hyp, data_dir, folder, word_times=times)
        setting = decoder.setting(best)
        if setting is not None:
            atomic_write(folder / "setting", setting + "\n")
        report(name, decoder.describe(best), line, folder)
    return best


def _pick(
    ref: dict[str, list[str]], table: Mapping[Point, Mapping[str, str]], *, out_dir: Path, what: str
) -> Point:
    """Score each point's hypotheses against ``ref``, writing ``wer_<w>_<s>`` files and
    ``best_wer`` in ``out_dir``; the point with the fewest errors (ties: the lower weights)."""
    results = []
    for (first, second), hyps in table.items():
        words = score_texts(ref, {utt: text.split() for utt, text in hyps.items()}).words
        atomic_write(out_dir / f"wer_{first:g}_{second:g}", words.kaldi_line() + "\n")
        results.append((words.errors, first, second, words.kaldi_line()))
    best = min(results)
    atomic_write(out_dir / BEST_WER_FILE, f"{best[3]} {out_dir / f'wer_{best[1]:g}_{best[2]:g}'}\n")
    log.info(
        "%s: best of %d settings: %g / %g (lm weight / word score or penalty), %s",
        what,
        len(table),
        best[1],
        best[2],
        best[3],
    )
    return best[1], best[2]


def show_decoded(folders: Sequence[tuple[str, Path, str]]) -> None:
    """Print the scores of decoded sets again (a skipped stage): ``(label, folder, set)``;
    the label gets the folder's ``setting`` line."""
    for label, folder, name in folders:
        wer = folder / "scoring" / "wer"
        if wer.is_file():
            setting = folder / "setting"
            text = f"{label}, {setting.read_text().strip()}" if setting.is_file() else label
            report(name, text, wer.read_text().splitlines()[0], folder)


def report(name: str, method: str, line: str | None, out_dir: Path) -> None:
    if line is None:
        log.info("%s (%s): hypotheses in %s (no text to score against)", name, method, out_dir / "hyp")
    else:
        RESULTS.append((name, method.split(",")[0], line))
        # Once on the console (stdout, the result), once in the run's log file.
        log.info("%s (%s): %s (%s)", name, method, line, out_dir / "scoring" / "wer", extra={FILE_ONLY: True})
        print(f"{name}: {line}" if method == "greedy" else f"{name} ({method}): {line}", flush=True)


#: The corpus lexicon with the general words' pronunciations (``lm.general_words``).
OPEN_LEXICON = "lexicon_open.txt"


def pronunciation_lexicon(ctx: StageContext) -> str:
    """The pronunciation lexicon words are spelled from: stage 3's ``lang/lexicon_open.txt``
    with an open vocabulary, else ``tokenizer.lexicon`` or ``data.lexicon`` (may be empty)."""
    path = ctx.exp_dir / "lang" / OPEN_LEXICON
    if ctx.cfg.lm.general_words and path.is_file():
        return str(path)
    return ctx.cfg.tokenizer.lexicon or ctx.cfg.data.lexicon
