"""kaldi-io, imported once and quietly, and one writer of ``ark`` + ``scp`` pairs.

kaldi-io prints a banner to stderr at import time when ``KALDI_ROOT`` is unset;
asrkit does not need Kaldi's binaries, so the banner is swallowed here and every
other module imports ``kaldi_io`` from this one.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from asrkit.data.io import atomic_writer

with contextlib.redirect_stderr(io.StringIO()):
    import kaldi_io  # noqa: E402


def write_ark(
    path: str | Path, items: Iterable[tuple[str, np.ndarray]], *, kind: str = "mat"
) -> dict[str, str]:
    """Write ``(key, array)`` items as a binary Kaldi archive, atomically.

    Args:
        path: the ``.ark`` file (written under a temporary name, then renamed).
        items: keys and float matrices (``kind="mat"``) or int vectors (``kind="int"``).
        kind: ``mat`` (``write_mat``: float32/float64 matrices) or ``int`` (int32 vectors,
            as Kaldi's alignment tools write them).

    Returns:
        The scp entries, ``key -> "<absolute ark path>:<offset>"``.
    """
    path = Path(path)
    write = {
        "mat": kaldi_io.write_mat,
        "int": lambda f, v, key: kaldi_io.write_vec_int(f, np.asarray(v, dtype=np.int32), key=key),
    }[kind]
    scp: dict[str, str] = {}
    with atomic_writer(path, "wb") as ark:
        for key, value in items:
            # The scp offset points just past "key ", where the binary object starts.
            offset = ark.tell() + len(key.encode()) + 1
            write(ark, value, key=key)
            scp[key] = f"{path.resolve()}:{offset}"
    return scp


__all__ = ["kaldi_io", "write_ark"]
