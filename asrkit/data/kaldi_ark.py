"""kaldi-io, imported once and quietly, and one writer of ``ark`` + ``scp`` pairs.

kaldi-io prints a banner to stderr at import time when ``KALDI_ROOT`` is unset;
asrkit does not need Kaldi's binaries, so the banner is swallowed here and every
other module imports ``kaldi_io`` from this one. :func:`write_ark` writes the objects
itself, through :mod:`asrkit.data.kaldi_binary`, in the bytes kaldi-io writes.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from asrkit.data.io import atomic_writer
from asrkit.data.kaldi_binary import BINARY_MARKER, pack_float_matrix, pack_int32, pack_int32s

with contextlib.redirect_stderr(io.StringIO()):
    import kaldi_io  # noqa: E402


def write_ark(
    path: str | Path, items: Iterable[tuple[str, np.ndarray]], *, kind: str = "mat"
) -> dict[str, str]:
    """Write ``(key, array)`` items as a binary Kaldi archive, atomically.

    Args:
        path: the ``.ark`` file (written under a temporary name, then renamed).
        items: keys and float matrices (``kind="mat"``) or int vectors (``kind="int"``).
        kind: ``mat`` (float32 / float64 matrices: ``FM`` / ``DM``) or ``int`` (int32 vectors,
            as Kaldi's alignment tools write them: the int32 length, then each element as an
            int32).

    Returns:
        The scp entries, ``key -> "<absolute ark path>:<offset>"``.

    Raises:
        ValueError: a ``mat`` item is not a 2-d float32 or float64 array.
    """
    path = Path(path)
    pack = {"mat": pack_float_matrix, "int": _int_vector_object}[kind]
    scp: dict[str, str] = {}
    with atomic_writer(path, "wb") as ark:
        for key, value in items:
            # The scp offset points just past "key ", where the binary object starts.
            offset = ark.tell() + len(key.encode()) + 1
            ark.write((key + " ").encode("latin-1") + BINARY_MARKER + pack(value))
            scp[key] = f"{path.resolve()}:{offset}"
    return scp


def _int_vector_object(value: np.ndarray) -> bytes:
    """An int32 vector as a table holds it (Kaldi's ``BasicVectorHolder``): its int32 length,
    then each element as an int32 basic type."""
    values = np.asarray(value, dtype=np.int32)
    return pack_int32(len(values)) + pack_int32s(values)


__all__ = ["kaldi_io", "write_ark"]
