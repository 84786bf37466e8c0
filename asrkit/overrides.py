"""Command-line settings checked against the typed settings before Hydra composes them.

Hydra reports a misspelt key with OmegaConf's internals (``full_key: ... reference_type=``),
lists a group's options with its search path, and lets ``+train.epoch=3`` add a key that
nothing reads. :func:`check_overrides` reads each ``KEY=VALUE`` word first, against the
dataclasses of :mod:`asrkit.config` and the group folders of ``conf/``, and reports every
mistake as one line with the fix: a close spelling ("did you mean train.epochs?"), the form
a list takes, ``+`` only where a key may be added (the config groups added to the defaults
list, such as ``+experiment``, and free-form dicts such as ``data.import_dirs``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from asrkit.choices import suggestion
from asrkit.errors import raise_all

#: Boolean spellings OmegaConf accepts besides true/false.
_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


@dataclasses.dataclass(frozen=True)
class Setting:
    """One typed setting: its dotted key and its type hint (a dataclass for a section)."""

    key: str
    hint: Any
    default: Any = None

    @property
    def is_section(self) -> bool:
        return dataclasses.is_dataclass(self.hint)

    @property
    def is_open(self) -> bool:
        """A dict or untyped value: any key below it may be set or added."""
        base = _strip_optional(self.hint)
        return base is Any or typing.get_origin(base) is dict or base is dict


def _strip_optional(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else Any
    return hint


def _walk(cls: type, prefix: str, out: dict[str, Setting]) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        hint = hints[f.name]
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        if key not in out or not out[key].is_section:
            out[key] = Setting(key, hint, default)
        if dataclasses.is_dataclass(hint):
            _walk(hint, f"{key}.", out)  # type: ignore[arg-type]


@cache
def typed_settings(schema: type) -> dict[str, Setting]:
    """Every setting of the top-level dataclass ``schema`` (asrkit's ``AsrkitConfig``), by
    dotted key; ``strategy.*`` holds the keys of every strategy's dataclass (which of them a
    strategy takes is checked when Hydra composes)."""
    from asrkit.distributed.config import STRATEGIES

    out: dict[str, Setting] = {}
    _walk(schema, "", out)
    for info in STRATEGIES.values():
        _walk(info.config, "strategy.", out)
    return out


def config_groups(config_dir: str | Path) -> dict[str, list[str]]:
    """``conf/``'s groups and their options (``strategy: [adpsgd, ...]``); the strategies'
    ``NAME_schema`` entries are asrkit's own and not options."""
    root = Path(config_dir)
    return {
        d.name: sorted(p.stem for p in d.glob("*.yaml"))
        for d in sorted(root.iterdir())
        if d.is_dir() and any(d.glob("*.yaml"))
    }


def default_groups(config_dir: str | Path, config_name: str = "config") -> set[str]:
    """The groups the top config's defaults list chooses (``model: demo``): they change
    with ``model=large``; the others (``experiment``) are added with ``+experiment=NAME``."""
    path = Path(config_dir) / f"{config_name}.yaml"
    if not path.is_file():
        return set()
    defaults = OmegaConf.to_container(OmegaConf.load(path)).get("defaults", [])  # type: ignore[union-attr]
    chosen: set[str] = set()
    for entry in defaults:
        if isinstance(entry, dict):
            chosen.update(str(k).split("@")[0].lstrip("+") for k in entry)
    return chosen


def experiment_summaries(config_dir: str | Path) -> dict[str, str]:
    """Each experiment's name and the first sentence of its file's opening comment."""
    out = {}
    for path in sorted((Path(config_dir) / "experiment").glob("*.yaml")):
        comment: list[str] = []
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                if comment:
                    break
                continue
            text = line.lstrip("#").strip()
            if text.startswith("@package"):
                continue
            comment.append(text)
        words = " ".join(comment)
        summary = words.split(". ")[0].split(": ")[0].rstrip(".:")
        if summary.count("(") > summary.count(")"):  # cut inside a parenthesis
            summary = summary[: summary.rfind("(")].rstrip()
        out[path.stem] = summary[:100]
    return out


def _quote(text: str) -> str:
    return f"'{text}'" if any(c in text for c in "[]{}(), $*?") else text


def _value_problem(setting: Setting, raw: str, value: Any) -> str | None:
    """What is wrong with ``value`` for ``setting`` (None when it can be right)."""
    hint = setting.hint
    if value is None:
        return None  # null: Hydra says so where a setting may not be empty
    if isinstance(value, str) and "${" in value:
        return None  # an interpolation, resolved later
    base = _strip_optional(hint)
    origin = typing.get_origin(base) or base
    key = setting.key
    if origin is list:
        if isinstance(value, list):
            return None
        return f"{key}={raw}: {key} is a list; write {_quote(f'{key}=[{raw}]')} (quoted for the shell)"
    if isinstance(value, (list, dict)):
        return f"{key}={raw}: {key} takes one value, not a list; e.g. {key}={_example(setting)}"
    if origin is bool:
        if isinstance(value, bool) or str(value).lower() in _BOOL_WORDS:
            return None
        return f"{key}={raw}: expected true or false"
    if origin is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            return f"{key}={raw}: expected a whole number; e.g. {key}={_example(setting)}"
    if origin is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return f"{key}={raw}: expected a number; e.g. {key}={_example(setting)}"
    return None


def _example(setting: Setting) -> str:
    default = setting.default
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, (int, float, str)) and default != "":
        return str(default)
    return "..."


def check_overrides(
    overrides: Sequence[str], config_dir: str | Path, config_name: str = "config", *, schema: type
) -> None:
    """Raise one :class:`ConfigError` naming every override that cannot be right: an
    unknown key or group option (with the closest spellings), ``+`` on a typed key, a
    group chosen the wrong way, a value of the wrong kind, a sweep. Hydra's own checks
    (a strategy's keys under another strategy, values set by experiments) come after."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    settings = typed_settings(schema)
    groups = config_groups(config_dir)
    in_defaults = default_groups(config_dir, config_name)
    problems: list[str] = []
    for word in overrides:
        try:
            (override,) = parser.parse_overrides([word])
        except HydraException as err:
            first = str(err).splitlines()[0]
            problems.append(
                f"{_quote(word)}: not a KEY=VALUE setting ({first}); quote values with "
                "spaces or brackets, e.g. 'decode.sets=[dev,test]'"
            )
            continue
        key = override.key_or_group
        if key.startswith("hydra") or override.package is not None:
            continue  # Hydra's own settings: Hydra checks them
        raw = word.split("=", 1)[1] if "=" in word else ""
        if override.is_sweep_override():
            setting = settings.get(key)
            is_list = setting is not None and typing.get_origin(_strip_optional(setting.hint)) is list
            fix = f"write '{key}=[{raw}]'" if is_list else "give one value"
            problems.append(
                f"{_quote(word)}: a comma makes a sweep of runs, which `asrkit run` does not do; {fix}"
            )
            continue
        if key in groups:
            problems += _group_problems(key, override, raw, groups[key], key in in_defaults)
            continue
        problems += _key_problems(key, override, raw, settings, groups)
    raise_all(problems)


def _group_problems(group: str, override: Any, raw: str, options: list[str], chosen: bool) -> list[str]:
    if override.is_delete():
        return []
    names = [o for o in options if not o.endswith("_schema")]
    problems = []
    value = override.value()
    for option in value if isinstance(value, list) else [value]:
        if str(option) not in names:
            problems.append(
                f"{group}={option} is unknown{suggestion(str(option), names)} "
                f"({group} is one of: {', '.join(names)})"
            )
    if problems:
        return problems
    if chosen and override.is_add():
        return [f"+{group}={raw}: {group} already has a default; write {group}={raw} (without +)"]
    if not chosen and not (override.is_add() or override.is_force_add()):
        return [f"{group}={raw}: add it to the defaults with a +: +{group}={raw}"]
    return []


def _key_problems(
    key: str, override: Any, raw: str, settings: dict[str, Setting], groups: dict[str, list[str]]
) -> list[str]:
    plus = "+" if override.is_add() else "++" if override.is_force_add() else ""
    setting = settings.get(key)
    if setting is None:
        parts = key.split(".")
        for n in range(len(parts) - 1, 0, -1):
            above = settings.get(".".join(parts[:n]))
            if above is not None and above.is_open:
                return []  # a key inside a dict setting (data.import_dirs.train)
        leaves = [k for k, s in settings.items() if not s.is_section]
        # A word without a dot is first a misspelt group or top-level setting (modle=tiny:
        # model), then a key's last part (lr: optim.lr).
        fix = suggestion(key, [*groups, *(k for k in leaves if "." not in k)]) if "." not in key else ""
        fix = fix or suggestion(key, leaves)
        added = f" ({plus} adds no setting asrkit reads)" if plus else ""
        return [f"unknown setting '{key}'{added}{fix} (`asrkit run --cfg` prints every setting)"]
    if override.is_delete():
        return [f"~{key}: settings cannot be removed; set {key} to the value you want instead"]
    if setting.is_section:
        inner = [k for k in settings if k.startswith(key + ".")][:2]
        return [
            f"{_quote(f'{plus}{key}={raw}')}: {key} is a section of settings, not one value; "
            f"set its keys, e.g. {inner[0] if inner else key + '.KEY'}=..."
        ]
    if override.is_add():
        return [f"+{key}={raw}: {key} is already a setting; write {_quote(f'{key}={raw}')} (without +)"]
    problem = _value_problem(setting, raw, override.value())
    return [problem] if problem else []
