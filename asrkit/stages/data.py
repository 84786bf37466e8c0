"""Stages 0-1: fetch the corpus and prepare Kaldi data dirs."""

from __future__ import annotations

import inspect
import logging
import shutil
from pathlib import Path
from typing import Any

from asrkit.data.datadir import read_kaldi_map, validate_data_dir, write_kaldi_map
from asrkit.data.download import download_corpus
from asrkit.data.perturb import speed_perturb
from asrkit.data.text import describe_variants, normalize_text, spelling_variants
from asrkit.errors import ConfigError, DataError
from asrkit.stages.common import load_prep_module
from asrkit.stages.registry import StageContext, stage

log = logging.getLogger(__name__)


@stage(
    0,
    "download",
    "download the corpus unless data.corpus_dir already holds it",
    uses=("data",),
    shared=True,
    pipelines=("ctc", "hybrid"),
    record=False,
)
def download(ctx: StageContext) -> None:
    if imported(ctx.cfg.data.import_dirs):
        log.info("data.import_dirs: the sets are existing Kaldi data dirs; nothing to download")
        return
    prep = load_prep_module(ctx.cfg.data.prep_script)
    corpus_dir = Path(ctx.cfg.data.corpus_dir)
    if prep.corpus_present(corpus_dir):
        log.info("corpus found in %s; skipping download", corpus_dir)
        return
    if not ctx.cfg.data.url:
        raise ConfigError(
            f"{corpus_dir} holds no {ctx.cfg.data.corpus} corpus and data.url is "
            "empty; set data.corpus_dir to your copy or data.url to an archive"
        )
    download_corpus(ctx.cfg.data.url, corpus_dir)
    if not prep.corpus_present(corpus_dir):
        raise DataError(
            f"{ctx.cfg.data.url} unpacked to {corpus_dir} but it does not look like "
            f"the {ctx.cfg.data.corpus} corpus; check data.url"
        )


@stage(
    1,
    "data",
    "write Kaldi data dirs (the train, dev and test sets) and validate them",
    uses=("data", "data_root"),
    needs=(0,),
    shared=True,
    pipelines=("ctc", "hybrid"),
    outputs=lambda ctx: [ctx.data_root / s / "text" for s in ctx.cfg.data.all_sets],
    inputs=lambda ctx: imported_files(ctx.cfg.data.import_dirs),
)
def prepare(ctx: StageContext) -> None:
    if imported(ctx.cfg.data.import_dirs):
        import_data_dirs(imported(ctx.cfg.data.import_dirs), ctx.cfg.data.all_sets, ctx.data_root)
        normalize_transcripts(ctx)
        perturb_training_set(ctx)  # the imported copy: the original dir is never written
        return
    prep = load_prep_module(ctx.cfg.data.prep_script)
    corpus_dir = Path(ctx.cfg.data.corpus_dir)
    if not prep.corpus_present(corpus_dir):
        raise DataError(
            f"{corpus_dir}: no {ctx.cfg.data.corpus} corpus here; run stage 0 to "
            "download it or set data.corpus_dir"
        )
    for name in ctx.cfg.data.all_sets:
        drop_feature_files(ctx.data_root / name)
    extra: dict[str, Any] = {}
    if "corpus_dirs" in inspect.signature(prep.prepare).parameters:
        extra["corpus_dirs"] = {k: Path(v) for k, v in ctx.cfg.data.corpus_dirs.items() if v}
    elif ctx.cfg.data.corpus_dirs:
        raise ConfigError(
            f"data.corpus_dirs: {ctx.cfg.data.prep_script} takes no other corpus locations; "
            "remove the setting"
        )
    prep.prepare(
        corpus_dir,
        ctx.data_root,
        num_dev=ctx.cfg.data.num_dev,
        train_set=ctx.cfg.data.train_set,
        dev_set=ctx.cfg.data.dev_set,
        test_sets=list(ctx.cfg.data.test_sets),
        **extra,
    )
    for name in ctx.cfg.data.all_sets:
        data = validate_data_dir(ctx.data_root / name)
        log.info("%s: %d utterances, %d speakers", ctx.data_root / name, len(data.utt_ids), len(data.spk2utt))
    normalize_transcripts(ctx)
    perturb_training_set(ctx)


def normalize_transcripts(ctx: StageContext) -> None:
    """``data.text_normalize`` on every set's ``text``; with ``none``, a warning when words
    are spelled several ways."""
    how = ctx.cfg.data.text_normalize
    texts = {
        name: read_kaldi_map(ctx.data_root / name / "text", allow_empty_value=True)
        for name in ctx.cfg.data.all_sets
    }
    if how == "none":
        variants = spelling_variants(t for text in texts.values() for t in text.values())
        if variants:
            log.warning(
                "%s: %s; they are different words to the LM and the scorer — set data.text_normalize "
                "(e.g. upper_nopunct) to merge them",
                ctx.data_root,
                describe_variants(variants),
            )
        return
    for name, text in texts.items():
        normalized = {utt: normalize_text(words, how) for utt, words in text.items()}
        empty = [utt for utt, words in normalized.items() if not words]
        if empty:
            raise DataError(
                f"{ctx.data_root / name / 'text'}: utterance '{empty[0]}' has no words left after "
                f"data.text_normalize={how} ({len(empty)} such); fix its transcript or choose another setting"
            )
        write_kaldi_map(ctx.data_root / name / "text", normalized)
    log.info("transcripts of %s normalized (%s)", ", ".join(texts), how)


def perturb_training_set(ctx: StageContext) -> None:
    """``data.speed_perturb``: the training set only, after the dev split."""
    factors = list(ctx.cfg.data.speed_perturb)
    train = ctx.data_root / ctx.cfg.data.train_set
    (train / "speed_perturb").unlink(missing_ok=True)  # a previous run's marker
    if not factors:
        return
    perturbed = speed_perturb(train, factors)
    log.info(
        "%s: speed-perturbed x%s: %d utterances, %d speakers",
        train,
        " ".join(f"{f:g}" for f in sorted(factors)),
        len(perturbed.utt_ids),
        len(perturbed.spk2utt),
    )


#: What a data dir prepared elsewhere brings along that this recipe makes itself (features
#: under its own ``fbank/``): left behind when the dir is imported.
_FEATURE_FILES = frozenset(
    {"feats.scp", "cmvn.scp", "utt2num_frames", "frame_shift", "feats.yaml", "cmvn_global.ark"}
)


def drop_feature_files(data_dir: Path) -> None:
    """Stage 2's files in a data dir that stage 1 writes again: its rewritten lists
    (a different ``data.speed_perturb``, a changed corpus) would not match a previous run's
    ``feats.scp``, and stage 2, which runs after it, makes them anew."""
    for name in _FEATURE_FILES:
        (data_dir / name).unlink(missing_ok=True)


def imported(dirs: dict[str, str]) -> dict[str, str]:
    """The sets of ``data.import_dirs`` that name a directory (empty entries are unset)."""
    return {name: path for name, path in dirs.items() if path}


def imported_files(dirs: dict[str, str]) -> list[Path]:
    """The files at the top of the imported dirs (what :func:`import_data_dirs` copies
    from), whose content the data stage's record covers."""
    files: list[Path] = []
    for path in imported(dirs).values():
        root = Path(path)
        if root.is_dir():
            files += [f for f in sorted(root.iterdir()) if f.is_file()]
        else:
            files.append(root)  # missing: counted as such, and the stage names it
    return files


def import_data_dirs(dirs: dict[str, str], sets: list[str], data_root: Path) -> None:
    """Copy the Kaldi data dirs ``dirs`` (set name -> path) into ``data_root/<name>``.

    Only the text files at the top of each dir are copied (``wav.scp``, ``text``,
    ``utt2spk``, ``segments``, ``reco2file_and_channel``...), features and their stats
    excepted; the originals are read, never written. A segmented dir (``segments``)
    stays one: its recordings are cut into utterances when features are computed. Each
    copy is validated as Kaldi's ``validate_data_dir.sh`` would.

    Raises:
        ConfigError: a set the recipe uses is not listed.
        DataError: a listed dir is missing or invalid (naming the file, line and fix).
    """
    missing = [name for name in sets if name not in dirs]
    if missing:
        raise ConfigError(
            f"data.import_dirs lists {sorted(dirs)} but the recipe uses the set(s) "
            f"{missing} too; add them (data.import_dirs.{missing[0]}=/path/to/dir) "
            "or change data.train_set / data.dev_set / data.test_sets"
        )
    for name in sets:
        source, target = Path(dirs[name]).expanduser().resolve(), data_root / name
        if not (source / "wav.scp").is_file():
            raise DataError(
                f"data.import_dirs.{name}={dirs[name]}: no wav.scp there; give a Kaldi "
                "data dir (e.g. egs/swbd/s5c/data/train_nodup)"
            )
        if target.resolve() == source:
            raise ConfigError(
                f"data.import_dirs.{name}={dirs[name]} is this recipe's own "
                f"{target}; import from another directory"
            )
        staging = target.with_name(f".{name}.importing")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        copied = []
        for path in sorted(source.iterdir()):
            if path.is_file() and path.name not in _FEATURE_FILES and not path.name.startswith("."):
                shutil.copyfile(path, staging / path.name)
                copied.append(path.name)
        try:
            data = validate_data_dir(staging)
        except DataError as err:
            shutil.rmtree(staging)
            raise DataError(
                f"data.import_dirs.{name}: {str(err).replace(str(staging), str(source))}"
            ) from None
        if not (staging / "spk2utt").exists():  # lhotse's export has none: it follows from utt2spk
            write_kaldi_map(staging / "spk2utt", {s: " ".join(u) for s, u in data.spk2utt.items()})
            copied.append("(spk2utt from utt2spk)")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        log.info(
            "%s: imported from %s (%s): %d utterances, %d speakers%s",
            target,
            source,
            " ".join(copied),
            len(data.utt_ids),
            len(data.spk2utt),
            f", cut from {len(data.recordings())} recordings by segments" if data.segmented else "",
        )
