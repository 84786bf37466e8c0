"""Atomic file output: nothing half-written is ever left looking complete."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from asrkit.errors import DiskFull

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
        # mkstemp makes the file private (0600); the file it becomes gets the mode an
        # ordinary write would, so others sharing a feature or experiment dir can read it.
        os.fchmod(fd, new_file_mode())
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if is_disk_full(err):
            raise disk_full(path) from None
        raise


def _umask() -> int:
    try:  # Linux 4.7+: read it without changing it (os.umask would, for every thread)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode ``open(path, "w")`` would give a new file: 0666 less the umask."""
    return 0o666 & ~_umask()


def new_dir_mode() -> int:
    """The mode ``os.mkdir`` would give a new directory: 0777 less the umask."""
    return 0o777 & ~_umask()


def is_disk_full(err: BaseException) -> bool:
    """An ENOSPC (or EDQUOT) error, torch's way of saying one while saving, or the
    :class:`~asrkit.errors.DiskFull` made of one."""
    if isinstance(err, DiskFull):
        return True
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(err, RuntimeError) and "unexpected pos" in str(err)  # torch.save's zip writer


def disk_full(path: str | os.PathLike, *, fix: str = "") -> DiskFull:
    """The one-line error for a write to ``path`` that ran out of space, with the space
    left on its file system."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = f"{shutil.disk_usage(probe).free / 2**20:.1f} MB free there"
    except OSError:
        free = "free space unknown"
    hint = fix or "free space there, or move the experiment (exp_dir, feats_root) to a larger disk"
    return DiskFull(f"{path}: no space left on the device ({free}); {hint}, then rerun")


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


#: The audit event raised for a file that native code (a C++ decoder, KenLM) opens, which
#: Python's own ``open`` event does not see; ``asrkit export`` listens to both.
READ_EVENT = "asrkit.read"


def note_read(path: str | os.PathLike[str]) -> None:
    """Say that native code is about to read ``path`` (see :data:`READ_EVENT`)."""
    sys.audit(READ_EVENT, os.fspath(path))
