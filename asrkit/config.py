"""Typed recipe settings and Hydra composition.

The dataclasses here hold every setting with its default; the YAML files in
``conf/`` only state what a corpus or variant changes. :func:`compose` builds
the config the way a Hydra app does — ``conf/config.yaml`` plus command-line
overrides such as ``features.num_mel_bins=40`` — and turns Hydra's errors for
unknown keys or bad values into a one-line :class:`ConfigError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from asrkit.choices import OBJECTIVES, PIPELINES, RESUME_MODES, resume_mode, suggestion, unknown
from asrkit.data.perturb import check_factors
from asrkit.data.text import NORMALIZE
from asrkit.decoding.config import DecodeConfig, EnsembleConfig
from asrkit.distributed.config import STRATEGIES, StrategyConfig
from asrkit.errors import ConfigError, raise_all
from asrkit.features.extractors import FeatureConfig
from asrkit.gmm.config import GmmConfig, WfstConfig
from asrkit.lm.config import LMConfig
from asrkit.models.lstm import ModelConfig, model_args
from asrkit.overrides import check_overrides, typed_settings
from asrkit.targets.align_config import AlignConfig
from asrkit.targets.tokenizer import TokenizerConfig
from asrkit.training.config import OptimConfig, ScheduleConfig, SpecAugConfig, TrainConfig

#: What ``${project_root:}`` in a config means: the checkout holding ``recipes/`` (the
#: corpora's preparation scripts, and ``../shared`` beside it). An installed asrkit has no
#: recipes: point ``data.corpus_dir``/``data.prep_script`` at yours, or use ``data=kaldi``.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: The Hydra configs: ``conf/`` at the top of a checkout (editable installs too); a built
#: install ships the same files inside the package as ``asrkit/conf`` (setup.py maps the
#: ``asrkit.conf`` package to the top-level folder).
DEFAULT_CONFIG_DIR = (
    Path(__file__).resolve().parent / "conf"
    if (Path(__file__).resolve().parent / "conf" / "config.yaml").is_file()
    else PROJECT_ROOT / "conf"
)


@dataclass
class DataConfig:
    """The ``data`` config group: where a corpus lives and how it is split.

    Attributes:
        corpus: corpus name (for logs).
        corpus_dir: the corpus on disk; stage 0 downloads it here when it is absent.
        url: where stage 0 downloads the corpus archive from.
        prep_script: the recipe's Python file defining ``corpus_present(dir)`` and
            ``prepare(corpus_dir, data_root, *, num_dev)`` (corpus parsing stays in
            the recipe, not the library).
        num_dev: how much of the training data is held out as ``dev_set``, in the unit
            the recipe's prep script says (AN4: utterances; speechocean762: speakers).
        train_set / dev_set / test_sets: data dir names under ``data_root``.
        corpus_dirs: more corpus locations by name, for a corpus that comes in several
            distributions (Switchboard: ``eval2000_audio``, ``eval2000_text``, ``ms98``);
            handed to the prep script's ``prepare(..., corpus_dirs=...)`` when it takes them.
        import_dirs: Kaldi data dirs prepared elsewhere, by set name (``{train:
            /egs/swbd/s5c/data/train_nodup, ...}``); when set, stage 1 copies their text
            files into ``data_root/<name>`` (never writing into them) instead of running the
            prep script, and stage 0 has nothing to download. Every set of ``train_set``,
            ``dev_set`` and ``test_sets`` must be listed.
        lexicon: the corpus's pronunciation lexicon, when it has one (``tokenizer=phone``
            and ``lm.extra_words`` can use it).
        text_normalize: how stage 1 rewrites every set's transcripts so that one word has
            one spelling (:mod:`asrkit.data.text`): ``none`` (as the corpus has them; a
            warning lists words spelled several ways), ``upper``/``lower`` (case), or
            ``upper_nopunct``/``lower_nopunct`` (case, and punctuation at word edges removed).
        speed_perturb: speed factors for the training set (e.g. ``[0.9,1.0,1.1]``, as Kaldi
            and ESPnet): stage 1 adds a ``sox speed`` copy of every training utterance per
            factor other than 1 (:mod:`asrkit.data.perturb`); empty: none.
    """

    corpus: str = "an4"
    corpus_dir: str = "downloads/an4"
    url: str = ""
    prep_script: str = ""
    num_dev: int = 100
    train_set: str = "train"
    dev_set: str = "train_dev"
    test_sets: list[str] = field(default_factory=lambda: ["test"])
    import_dirs: dict[str, str] = field(default_factory=dict)
    corpus_dirs: dict[str, str] = field(default_factory=dict)
    lexicon: str = ""
    speed_perturb: list[float] = field(default_factory=list)
    text_normalize: str = "none"

    def check(self) -> None:
        problems = check_factors(list(self.speed_perturb))
        if self.text_normalize not in NORMALIZE:
            problems.append(
                f"data.text_normalize={self.text_normalize!r} is unknown; choose one of {list(NORMALIZE)}"
            )
        raise_all(problems)

    @property
    def all_sets(self) -> list[str]:
        return [self.train_set, self.dev_set, *self.test_sets]


@dataclass
class AsrkitConfig:
    """Top-level recipe settings.

    Attributes:
        name: experiment name; outputs go to ``exp_dir``.
        seed: the seed every random choice starts from.
        data_root: where Kaldi data dirs are written (``data/train`` ...).
        feats_root: where feature arks are written.
        exp_dir: experiment directory (config, command, logs, models, decodes).
        objective: ``ctc`` (token targets) or ``ce`` (frame targets from ``align``).
        pipeline: the recipe's stages: ``ctc`` (CTC acoustic models) or ``hybrid`` (GMM-HMM
            systems, then a BLSTM trained with frame CE on their tied states and decoded
            through HCLG; :mod:`asrkit.stages.hmm`).
        resume: training continues from its last complete checkpoint when one made with
            the same settings exists (``auto``), must (``true``) or starts over (``false``).
    """

    name: str = "an4"
    seed: int = 1
    data_root: str = "data"
    feats_root: str = "${features.kind}"
    exp_dir: str = "exp/${name}"
    objective: str = "ctc"
    pipeline: str = "ctc"
    resume: str = "auto"
    data: DataConfig = field(default_factory=DataConfig)
    features: FeatureConfig = field(default_factory=FeatureConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    specaug: SpecAugConfig = field(default_factory=SpecAugConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    ensemble: EnsembleConfig = field(default_factory=EnsembleConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    align: AlignConfig = field(default_factory=AlignConfig)
    lm: LMConfig = field(default_factory=LMConfig)
    gmm: GmmConfig = field(default_factory=GmmConfig)
    wfst: WfstConfig = field(default_factory=WfstConfig)


_registered = False


def _register() -> None:
    global _registered
    if _registered:
        return
    store = ConfigStore.instance()
    store.store(name="asrkit_schema", node=AsrkitConfig)
    # conf/strategy/NAME.yaml starts from NAME_schema: that strategy's own dataclass.
    for name, info in STRATEGIES.items():
        store.store(group="strategy", name=f"{name}_schema", node=info.config(name=name))
    _registered = True


def compose(
    overrides: Sequence[str] = (),
    *,
    config_dir: str | Path = DEFAULT_CONFIG_DIR,
    config_name: str = "config",
) -> DictConfig:
    """Compose ``config_dir/config_name.yaml`` with command-line ``overrides``.

    ``${project_root:}`` in a config resolves to :data:`PROJECT_ROOT`.

    Raises:
        ConfigError: unknown key, wrong type, missing config file.
    """
    _register()
    config_dir = Path(config_dir).resolve()
    if not (config_dir / f"{config_name}.yaml").is_file():
        raise ConfigError(
            f"{config_dir / (config_name + '.yaml')}: config not found; pass --config-dir "
            "pointing at asrkit's conf/ directory"
        )
    check_overrides(overrides, config_dir, config_name, schema=AsrkitConfig)
    root = str(PROJECT_ROOT)
    OmegaConf.register_new_resolver("project_root", lambda: root, replace=True)
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            cfg = hydra_compose(config_name=config_name, overrides=list(overrides))
        OmegaConf.resolve(cfg)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(_describe(err)) from None
    validate(to_object(cfg))
    return cfg


def validate(typed: AsrkitConfig) -> None:
    """Check every setting: walk the typed config tree once, calling each section's
    ``check()`` (nested sections too), then the checks across sections; raise one
    :class:`ConfigError` that lists every bad value found."""
    problems: list[str] = []

    def visit(node: object) -> None:
        check = getattr(node, "check", None)
        if callable(check):
            try:
                check()
            except ConfigError as err:
                problems.extend(getattr(err, "problems", [str(err)]))
        for f in dataclasses.fields(node):  # type: ignore[arg-type]
            child = getattr(node, f.name)
            if dataclasses.is_dataclass(child):
                visit(child)

    for f in dataclasses.fields(typed):
        section = getattr(typed, f.name)
        if dataclasses.is_dataclass(section):
            visit(section)
    for check in (lambda: model_args(typed.model), lambda: _check_across(typed)):
        try:
            check()
        except ConfigError as err:
            problems.extend(getattr(err, "problems", [str(err)]))
    raise_all(problems)


def _check_across(typed: AsrkitConfig) -> None:
    """Settings that are only wrong together (and the top-level ones), every problem at once."""
    problems = []
    held_out = {typed.data.dev_set, *typed.data.test_sets}
    leaked = sorted(held_out & {Path(e).name for e in typed.lm.sets})
    if leaked:
        problems.append(
            f"lm.sets={typed.lm.sets} includes {leaked}: the LM must not see dev or "
            "test transcripts; train it on the training set (the default)"
        )
    if typed.decode.tune_set in typed.data.test_sets:
        problems.append(
            f"decode.tune_set={typed.decode.tune_set!r} is a test set; tune on the "
            f"dev set ({typed.data.dev_set})"
        )
    problems += unknown("resume", resume_mode(typed.resume), RESUME_MODES)
    problems += unknown("pipeline", typed.pipeline, PIPELINES)
    problems += unknown("objective", typed.objective, OBJECTIVES)
    if typed.pipeline == "hybrid" and typed.objective != "ce":
        problems.append(
            "pipeline=hybrid trains on the GMM's tied states with frame cross-entropy; set objective=ce"
        )
    if typed.train.chunk_frames and typed.objective != "ce":
        problems.append(
            f"train.chunk_frames={typed.train.chunk_frames} with objective={typed.objective}: chunks need "
            "frame targets (objective=ce); CTC trains on whole utterances (set train.chunk_frames=0)"
        )
    raise_all(problems)


def load_saved(path: str | Path) -> AsrkitConfig:
    """A config a run saved (``exp/<name>/config.yaml``), typed and checked, with its
    strategy's own settings dataclass."""
    saved = OmegaConf.load(path)
    schema = OmegaConf.structured(AsrkitConfig)
    name = OmegaConf.select(saved, "strategy.name", default="single")
    if name not in STRATEGIES:
        raise ConfigError(f"{path}: strategy.name={name!r} is unknown; choose one of {list(STRATEGIES)}")
    schema.strategy = OmegaConf.structured(STRATEGIES[name].config(name=name))
    try:
        cfg = to_object(OmegaConf.merge(schema, saved))  # type: ignore[arg-type]
    except OmegaConfBaseException as err:
        raise ConfigError(f"{path}: {_describe(err)}") from None
    validate(cfg)
    return cfg


def to_object(cfg: DictConfig) -> AsrkitConfig:
    """The composed config as typed dataclasses."""
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, AsrkitConfig)
    return obj


def _describe(err: Exception) -> str:
    """Hydra's or OmegaConf's error as one line without their internals."""
    cause = err if isinstance(err, OmegaConfBaseException) else (err.__cause__ or err.__context__)
    full_key = str(getattr(cause, "full_key", "") or "")
    text = " ".join(str(err).split())
    if full_key and ("not in" in text + str(cause) or "Could not override" in text):
        return _unknown_here(full_key, getattr(cause, "object_type", None))
    if isinstance(cause, OmegaConfBaseException) and full_key:
        msg = str(getattr(cause, "msg", "") or cause).splitlines()[0]
        return f"{full_key}: {msg}"
    return f"bad configuration: {text.split(' Config search path')[0]}"


def _unknown_here(key: str, where: Any = None) -> str:
    """A key the composed config has no place for: most often another strategy's setting
    (``where``: the dataclass that lacks it)."""
    if key.startswith("strategy."):
        chosen = [name for name, info in STRATEGIES.items() if info.config is where]
        rest = key.removeprefix("strategy.")
        owners = [
            name
            for name, info in STRATEGIES.items()
            if rest in {f.name for f in dataclasses.fields(info.config)}
        ]
        if owners:
            return (
                f"'{key}' is not a setting of "
                f"{'strategy=' + chosen[0] if chosen else 'the chosen strategy'}; it belongs to "
                f"strategy={' / '.join(owners)}"
            )
    leaves = [k for k, s in typed_settings(AsrkitConfig).items() if not s.is_section and k != key]
    return f"unknown setting '{key}'{suggestion(key, leaves)} (`asrkit run --cfg` prints every setting)"


#: Settings that do not change what a stage produces (parallelism, logging, rendezvous,
#: fault handling); a change to them does not make a finished stage run again.
NOT_OUTPUT_SETTINGS = frozenset(
    {
        "features.nj",
        "train.progress",
        "train.adapt_threads",
        "train.loader",
        "train.prefetch",
        "train.loader_workers",
        "train.log_every",
        "train.save_every",
        "train.keep_checkpoints",
        "strategy.master_addr",
        "strategy.master_port",
        "strategy.node_rank",
        "strategy.timeout_s",
        "strategy.max_restarts",
        "decode.nj",
        "gmm.nj",
    }
)


#: Settings added after outputs were made with their default behaviour: they count in a
#: stage's settings hash only when they differ from this default, so those outputs (and
#: resume states) stay current.
HASHED_WHEN_CHANGED: dict[str, Any] = {
    "optim.fused": False,
    "train.precision": "fp32",
    "optim.base_batch": 0,
    "optim.lr_scaling": "linear",
    "schedule.warmup_epochs": 0.0,
    # The speaker-adapted GMM systems and the open vocabulary (2026-11-28): off by default.
    "gmm.tri_kinds": [],
    "gmm.lda_dim": 40,
    "gmm.splice_context": 3,
    "gmm.mllt_rounds": [1, 3, 5, 11],
    "gmm.fmllr_rounds": [1, 5, 9],
    "gmm.fmllr_silence_weight": 0.0,
    "wfst.first_pass": [12.0, 0.0],
    "lm.general_words": 0,
    "align.fmllr": False,
    "lm.general_weights": [0.02, 0.05, 0.1, 0.2, 0.3],
    "align.ivector_dim": 0,
    "align.ivector_gauss": 256,
    # More corpus locations, for a corpus in several distributions (Switchboard, 2026-11-29).
    "data.corpus_dirs": {},
    # Stage 5 may decode the last GMM system only (2026-11-29).
    "wfst.gmm_systems": "all",
    # Two-pass decoding may estimate the test speakers' transforms twice (2026-11-29).
    "wfst.fmllr_estimates": 1,
    # SpecAugment's frequency masks may stay within the fbank of a joined input (2026-11-30).
    "specaug.freq_dims": 0,
    # Training i-vectors may come from pseudo-speakers of a few utterances (2026-11-30).
    "align.ivector_max_utts": 0,
    # The decoding graphs may carry pronunciation probabilities (2026-12-05).
    "wfst.pron_probs": False,
    # The hybrid network may read the fMLLR features without the fbank (2026-12-05).
    "align.fbank": True,
    # A hybrid network may train on another experiment's joined input (ensembles, 2026-12-06).
    "align.inputs_from": "",
}


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """A nested settings dict as ``{"section.key": value}`` (what messages name)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(theirs: dict[str, Any], ours: dict[str, Any], *, most: int = 3) -> tuple[list[str], str]:
    """The flat keys whose values differ between two settings dicts, and the first ``most``
    as ``key: theirs there, ours here`` (for a message about a record made with others)."""
    unset = "(unset)"
    keys = [k for k in sorted(set(theirs) | set(ours)) if theirs.get(k, unset) != ours.get(k, unset)]
    shown = ", ".join(f"{k}: {theirs.get(k, unset)} there, {ours.get(k, unset)} here" for k in keys[:most])
    return keys, shown + (f" and {len(keys) - most} more" if len(keys) > most else "")


def settings_hash(cfg: AsrkitConfig, keys: Sequence[str], *, exclude: Sequence[str] = ()) -> tuple[str, dict]:
    """A short hash of the top-level config ``keys`` (less :data:`NOT_OUTPUT_SETTINGS`,
    the dotted ``exclude`` and :data:`HASHED_WHEN_CHANGED` at their defaults), and the
    settings it covers, as plain data."""
    plain = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    assert isinstance(plain, dict)
    chosen: dict[str, Any] = {key: plain[key] for key in sorted(set(keys))}
    for dotted in (*NOT_OUTPUT_SETTINGS, *exclude):
        section, _, name = dotted.partition(".")
        if isinstance(chosen.get(section), dict):
            chosen[section].pop(name, None)
    for dotted, default in HASHED_WHEN_CHANGED.items():
        section, _, name = dotted.partition(".")
        if isinstance(chosen.get(section), dict) and chosen[section].get(name) == default:
            del chosen[section][name]
    text = json.dumps(chosen, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16], chosen
