"""The import structure the house keeps (issue 29): stage modules share through
asrkit.stages.common and the library layers, never through one another."""

from __future__ import annotations

import ast
from pathlib import Path

import asrkit

PACKAGE = Path(asrkit.__file__).parent


def imports_of(path: Path) -> set[str]:
    """Every asrkit module ``path`` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("asrkit"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("asrkit"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def stage_modules() -> set[str]:
    """The modules that register recipe stages (``@stage(`` or ``stage(``)."""
    return {
        f"asrkit.stages.{p.stem}"
        for p in (PACKAGE / "stages").glob("*.py")
        if "@stage(" in p.read_text() and p.stem != "registry"
    }


def test_no_stage_module_imports_another() -> None:
    stages = stage_modules()
    assert {"asrkit.stages.train", "asrkit.stages.decode", "asrkit.stages.hybrid"} <= stages
    crossing = {}
    for module in sorted(stages):
        others = imports_of(PACKAGE / "stages" / f"{module.rsplit('.', 1)[1]}.py") & (stages - {module})
        if others:
            crossing[module] = sorted(others)
    assert crossing == {}


def test_the_learner_library_sits_below_the_stages() -> None:
    assert not any(m.startswith("asrkit.stages") for m in imports_of(PACKAGE / "learner.py"))
