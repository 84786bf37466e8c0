"""Atomic file output: nothing half-written is ever left looking complete."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path`` and rename it over ``path`` on success.

    If the body raises, the temporary file is removed and ``path`` is untouched,
    so a reader sees either the old complete file or the new complete file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_writer`)."""
    with atomic_writer(path) as handle:
        handle.write(text)


def save_record(path: str | os.PathLike, record: Any) -> None:
    """Write a dataclass ``record`` as indented JSON, atomically."""
    atomic_write(path, json.dumps(dataclasses.asdict(record), indent=2) + "\n")


def load_record(path: str | os.PathLike, cls: type[T], *, what: str, fix: str) -> T | None:
    """The dataclass ``cls`` saved at ``path`` by :func:`save_record`; None when there is
    no file. An unreadable one raises DataError naming ``what`` it holds and the ``fix``."""
    from asrkit.errors import DataError

    if not Path(path).is_file():
        return None
    try:
        return cls(**json.loads(Path(path).read_text()))
    except (ValueError, TypeError) as err:
        raise DataError(f"{path}: unreadable {what} ({err}); {fix}") from None
