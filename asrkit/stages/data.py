"""Stages 0-1: fetch the corpus and prepare Kaldi data dirs."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import ModuleType

from asrkit.data.datadir import validate_data_dir
from asrkit.data.download import download_corpus
from asrkit.errors import ConfigError, DataError
from asrkit.stages.registry import StageContext, stage

log = logging.getLogger(__name__)


def load_prep_module(script: str) -> ModuleType:
    """Import the recipe's corpus preparation script (``data.prep_script``)."""
    path = Path(script)
    if not path.is_file():
        raise ConfigError(f"data.prep_script={script}: file not found; point it at the "
                          "recipe's data preparation script")
    spec = importlib.util.spec_from_file_location(f"asrkit_prep_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("corpus_present", "prepare"):
        if not hasattr(module, name):
            raise ConfigError(f"{path}: defines no {name}(); a prep script needs "
                              "corpus_present(corpus_dir) and prepare(corpus_dir, data_root, "
                              "*, num_dev)")
    return module


@stage(0, "download", "download the corpus unless data.corpus_dir already holds it",
       uses=("data",), shared=True, record=False)
def download(ctx: StageContext) -> None:
    prep = load_prep_module(ctx.cfg.data.prep_script)
    corpus_dir = Path(ctx.cfg.data.corpus_dir)
    if prep.corpus_present(corpus_dir):
        log.info("corpus found in %s; skipping download", corpus_dir)
        return
    if not ctx.cfg.data.url:
        raise ConfigError(f"{corpus_dir} holds no {ctx.cfg.data.corpus} corpus and data.url is "
                          "empty; set data.corpus_dir to your copy or data.url to an archive")
    download_corpus(ctx.cfg.data.url, corpus_dir)
    if not prep.corpus_present(corpus_dir):
        raise DataError(f"{ctx.cfg.data.url} unpacked to {corpus_dir} but it does not look like "
                        f"the {ctx.cfg.data.corpus} corpus; check data.url")


@stage(1, "data", "write Kaldi data dirs (train, train_dev, test) and validate them",
       uses=("data", "data_root"), needs=(0,), shared=True,
       outputs=lambda ctx: [ctx.data_root / s / "text" for s in ctx.cfg.data.all_sets])
def prepare(ctx: StageContext) -> None:
    prep = load_prep_module(ctx.cfg.data.prep_script)
    corpus_dir = Path(ctx.cfg.data.corpus_dir)
    if not prep.corpus_present(corpus_dir):
        raise DataError(f"{corpus_dir}: no {ctx.cfg.data.corpus} corpus here; run stage 0 to "
                        "download it or set data.corpus_dir")
    prep.prepare(corpus_dir, ctx.data_root, num_dev=ctx.cfg.data.num_dev,
                 train_set=ctx.cfg.data.train_set, dev_set=ctx.cfg.data.dev_set)
    for name in ctx.cfg.data.all_sets:
        data = validate_data_dir(ctx.data_root / name)
        log.info("%s: %d utterances, %d speakers", ctx.data_root / name, len(data.utt_ids),
                 len(data.spk2utt))
