"""Kaldi feature files as Kaldi's binaries write them, for the table-reading tests.

Float matrices go through kaldi-io's writer (the layout ``copy-feats`` writes); text
matrices as ``copy-feats ark:- ark,t:-`` prints them; compressed matrices through a small
test-only encoder of Kaldi's CompressedMatrix formats (``CM``, ``CM2``, ``CM3``), which
follows ``CompressedMatrix::CopyFromMat`` and is cross-checked against kaldi-io's ``CM``
decoder (:func:`read_cm_with_kaldi_io`).
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from asrkit.data.kaldi_ark import kaldi_io


def random_features(seed: int, rows: dict[str, int], *, dim: int = 5) -> dict[str, np.ndarray]:
    """Seeded float32 ``(rows, dim)`` matrices, N(0, 3), per key."""
    rng = np.random.default_rng(seed)
    return {utt: rng.normal(0, 3, size=(n, dim)).astype(np.float32) for utt, n in rows.items()}


def write_mat_ark(
    path: Path, mats: dict[str, np.ndarray], *, compress_as: str | None = None
) -> dict[str, int]:
    """A binary matrix archive; returns each key's scp offset (just past ``key ``).

    Matrices are ``FM``/``DM`` by dtype (kaldi-io's writer), or with ``compress_as`` given
    ``CM``/``CM2``/``CM3`` (:func:`compress`).
    """
    offsets = {}
    with open(path, "wb") as handle:
        for utt, mat in mats.items():
            offsets[utt] = handle.tell() + len(utt) + 1
            if compress_as is None:
                kaldi_io.write_mat(handle, mat, key=utt)
            else:
                handle.write(f"{utt} ".encode() + compress(mat, compress_as))
    return offsets


def text_mat_ark(mats: dict[str, np.ndarray]) -> str:
    """A text matrix archive; values with ``%g`` (6 significant digits)."""
    # Kaldi's Matrix::Write in text mode: " [", each row as "\n  v v v ", then "]\n".
    out = []
    for utt, mat in mats.items():
        body = "".join("\n  " + "".join(f"{v:g} " for v in row) for row in mat)
        out.append(f"{utt}  [{body}]\n")
    return "".join(out)


def write_gz(path: Path, data: bytes) -> Path:
    with gzip.open(path, "wb") as handle:
        handle.write(data)
    return path


# --- a test-only encoder of Kaldi's CompressedMatrix ------------------------------------------


def to_u16(value: np.ndarray, low: np.float32, span: np.float32) -> np.ndarray:
    frac = np.clip((value.astype(np.float32) - low) / span, 0.0, 1.0)
    return (frac * 65535 + 0.499).astype(np.int64)


def from_u16(q: np.ndarray, low: np.float32, span: np.float32) -> np.ndarray:
    return (low + span * np.float32(1.52590218966964e-05) * q).astype(np.float32)


def global_header(mat: np.ndarray) -> tuple[np.float32, np.float32, bytes]:
    """``(min, range, packed header)``: Kaldi's GlobalHeader without its format field."""
    low, high = np.float32(mat.min()), np.float32(mat.max())
    if high == low:
        high = low + np.float32(1.0 + abs(low))
    span = np.float32(high - low)
    return low, span, struct.pack("<ffii", low, span, *mat.shape)


def compress(mat: np.ndarray, token: str) -> bytes:
    """``\\0B`` + token + Kaldi's CompressedMatrix payload (GlobalHeader without its format field).

    ``CM`` (kOneByteWithColHeaders): per column 4 uint16 percentiles, then the column's bytes,
    column-major; ``CM2`` (kTwoByte): uint16 per element, row-major; ``CM3`` (kOneByte): uint8.
    """
    rows, cols = mat.shape
    low, span, header = global_header(mat)
    if token == "CM2":
        return b"\0BCM2 " + header + to_u16(mat, low, span).astype("<u2").tobytes()
    if token == "CM3":
        q = np.clip(((mat - low) / span * 255 + 0.5).astype(np.int64), 0, 255)
        return b"\0BCM3 " + header + q.astype(np.uint8).tobytes()
    assert token == "CM" and rows >= 5
    col_headers, col_bytes = [], []
    for c in range(cols):
        column = mat[:, c]
        ordered, quarter = np.sort(column), rows // 4
        p = [int(to_u16(ordered[0], low, span))]
        for idx in (quarter, 3 * quarter, rows - 1):  # strictly increasing, as Kaldi makes them
            p.append(max(int(to_u16(ordered[idx], low, span)), p[-1] + 1))
        col_headers.append(struct.pack("<4H", *p))
        p0, p25, p75, p100 = from_u16(np.array(p), low, span)
        code = np.where(
            column < p25,
            np.clip(np.floor((column - p0) / (p25 - p0) * 64 + 0.5), 0, 64),
            np.where(
                column < p75,
                64 + np.clip(np.floor((column - p25) / (p75 - p25) * 128 + 0.5), 0, 128),
                192 + np.clip(np.floor((column - p75) / (p100 - p75) * 63 + 0.5), 0, 63),
            ),
        )
        col_bytes.append(code.astype(np.uint8).tobytes())
    return b"\0BCM " + header + b"".join(col_headers) + b"".join(col_bytes)


def cm_error_bound(mat: np.ndarray) -> np.ndarray:
    """Per column: half the widest step of the piecewise-linear byte code, plus uint16 rounding.

    A ``CM`` byte codes a value to the nearest of 65 (p0..p25), 129 (p25..p75) or 64
    (p75..p100) evenly spaced levels, so it is off by at most half the widest segment's step;
    the percentiles themselves are uint16 levels of the global range (half a level each, moved
    apart by one level where they coincide), which the ``4 * range / 65535`` covers.
    """
    low, span, _ = global_header(mat)
    bounds = []
    for column in mat.T:
        ordered, quarter = np.sort(column), len(column) // 4
        p0, p25, p75, p100 = ordered[[0, quarter, 3 * quarter, -1]]
        step = max((p25 - p0) / 64, (p75 - p25) / 128, (p100 - p75) / 63)
        bounds.append(step / 2 + 4 * span / 65535)
    return np.array(bounds, dtype=np.float32)


def read_cm_with_kaldi_io(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:
    """A ``CM`` archive decoded by kaldi-io 0.9.8: an independent check of the encoder's layout.

    kaldi-io's ``CM`` decoder calls ``np.reshape(..., newshape=...)``, a keyword numpy 2.4
    removed (TypeError); it is accepted here for the duration of the call.
    """
    reshape = np.reshape

    def reshape_with_newshape(
        a: np.ndarray, *args: object, newshape: object = None, **kwargs: object
    ) -> np.ndarray:
        return reshape(a, newshape, **kwargs) if newshape is not None else reshape(a, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(np, "reshape", reshape_with_newshape)
        return dict(kaldi_io.read_mat_ark(str(path)))
