"""The import structure the house keeps: stage modules share through
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
    assert {"asrkit.stages.train", "asrkit.stages.decode", "asrkit.stages.hmm"} <= stages
    crossing = {}
    for module in sorted(stages):
        others = imports_of(PACKAGE / "stages" / f"{module.rsplit('.', 1)[1]}.py") & (stages - {module})
        if others:
            crossing[module] = sorted(others)
    assert crossing == {}


def test_the_learner_library_sits_below_the_stages() -> None:
    assert not any(m.startswith("asrkit.stages") for m in imports_of(PACKAGE / "learner.py"))


def test_data_is_the_ground_floor() -> None:
    """asrkit.data (Kaldi files, data dirs, audio) imports nothing of asrkit's but itself and
    the errors; features, targets and the loader build on it."""
    above = {
        str(path.relative_to(PACKAGE)): sorted(
            m for m in imports_of(path) if not m.startswith(("asrkit.data", "asrkit.errors"))
        )
        for path in (PACKAGE / "data").glob("*.py")
    }
    assert {name: found for name, found in above.items() if found} == {}


def _module_graph() -> dict[str, set[str]]:
    """asrkit module -> the asrkit modules it imports (a package's ``__init__`` counts as the
    package; importing a package from inside it does not count)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for imported in imports_of(path):
            while imported and imported not in modules:  # `from pkg.mod import name`
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(imported + "."):
                deps.add(imported)
        graph[name] = deps
    return graph


def test_no_import_circle() -> None:
    graph = _module_graph()

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), list(graph[start])
        while todo:
            current = todo.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                todo.extend(graph.get(current, ()))
        return False

    assert sorted({tuple(sorted((a, b))) for a in graph for b in graph[a] if reaches(b, a)}) == []


def test_the_loader_sits_above_features_and_targets_and_below_the_rest() -> None:
    """asrkit.loader reads through data, features and targets; nothing there reads through
    the loader, and the loader knows nothing of models, training or decoding."""
    below = ("asrkit.data", "asrkit.errors", "asrkit.features", "asrkit.targets", "asrkit.loader")
    reaching_up = {
        str(path.relative_to(PACKAGE)): sorted(m for m in imports_of(path) if not m.startswith(below))
        for path in (PACKAGE / "loader").glob("*.py")
    }
    assert {name: found for name, found in reaching_up.items() if found} == {}
    reaching_down = {
        str(path.relative_to(PACKAGE)): sorted(m for m in imports_of(path) if m.startswith("asrkit.loader"))
        for layer in ("data", "features", "targets")
        for path in (PACKAGE / layer).glob("*.py")
    }
    assert {name: found for name, found in reaching_down.items() if found} == {}


def test_the_choices_are_declared_on_the_ground_floor() -> None:
    assert imports_of(PACKAGE / "choices.py") == set()


def test_training_knows_nothing_of_distribution() -> None:
    """The trainer reaches the other learners through a Communicator (asrkit.comm, a layer
    below both); the strategies plug in through asrkit.training.strategy alone. No arrow
    runs from training back up to distributed."""
    training = {
        m
        for path in (PACKAGE / "training").glob("*.py")
        for m in imports_of(path)
        if m.startswith("asrkit.distributed")
    }
    assert training == set()
    distributed = {
        m
        for path in (PACKAGE / "distributed").glob("*.py")
        for m in imports_of(path)
        if m.startswith("asrkit.training")
    }
    assert {m.rsplit(".", 1)[0] if m.count(".") > 2 else m for m in distributed} <= {
        "asrkit.training.strategy"
    }
    assert {m for m in imports_of(PACKAGE / "comm.py") if m != "asrkit.errors"} == set()


def test_decoding_sits_below_the_stages_and_the_cli() -> None:
    """The decoders (asrkit.decoding) know nothing of stages, the CLI or training; stages
    and transcribe reach them through asrkit.decoding's modules."""
    above = ("asrkit.stages", "asrkit.cli", "asrkit.training", "asrkit.distributed", "asrkit.study")
    reaching_up = {
        str(path.relative_to(PACKAGE)): sorted(m for m in imports_of(path) if m.startswith(above))
        for path in (PACKAGE / "decoding").glob("*.py")
    }
    assert {name: found for name, found in reaching_up.items() if found} == {}


def test_one_module_makes_every_process_group() -> None:
    makers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "new_group"
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    # comm.py: the torch.distributed call inside TorchCommunicator.new_group itself.
    assert makers == ["comm.py", "distributed/groups.py"]


def test_one_function_trains_the_gmm_systems() -> None:
    """The GMM stage and the HMM pipeline's benchmark both train through
    asrkit.gmm.pipeline.train_systems; nothing else calls the system trainers but the
    speaker-adapted systems' own (asrkit.gmm.adapt), which build on them."""
    callers = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", "")) in ("train_mono", "train_triphone")
    }
    assert callers == {"gmm/pipeline.py", "gmm/adapt.py"}
    users = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "train_systems(" in path.read_text() and path.name != "pipeline.py"
    }
    assert users == {"stages/hmm.py", "bench/hmm.py"}
