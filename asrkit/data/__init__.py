"""Kaldi data directories, audio input and Kaldi matrix tables.

Public API:
    - :class:`DataDir`, :func:`read_data_dir`, :func:`write_data_dir`,
      :func:`validate_data_dir` — ``wav.scp``/``text``/``utt2spk``/``spk2utt``
      read, write (atomically, sorted under C locale) and checked; segmented dirs
      (``segments``: utterances cut from the recordings of ``wav.scp``) too, with
      :class:`Segment` and :func:`read_segments` for one ``segments`` file.
    - :func:`read_kaldi_map`, :func:`write_kaldi_map` — one ``key value`` file.
    - :func:`load_audio` — one ``wav.scp`` entry (path or ``cmd |`` pipe) as
      int16-range float samples and its sample rate; :func:`iter_utterance_audio` —
      every utterance of a data dir, each recording read once and cut by ``segments``.
    - :func:`read_matrix`, :func:`read_matrices` — Kaldi feature / stats matrices from
      an rxfilename (``file.ark:123[0:9]``, ``cmd |``) or a table (``scp:feats.scp``,
      ``ark:gunzip -c x.gz |``): float, double, text and compressed (``CM``/``CM2``/``CM3``,
      what ``make_fbank.sh`` writes by default); :func:`read_vector`, :func:`read_vectors`
      for float vectors. Writing goes through :func:`asrkit.data.kaldi_ark.write_ark`; Kaldi's
      binary basic types (tokens, int32s, float vectors and matrices inside objects) are
      written and read by :mod:`asrkit.data.kaldi_binary`.

The ground floor: this package imports no other asrkit package but :mod:`asrkit.errors`.
What turns data dirs into model batches (CMVN, tokens, planning, read-ahead) is one floor
up, in :mod:`asrkit.loader`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asrkit.data.audio import iter_utterance_audio, load_audio
    from asrkit.data.datadir import (
        DataDir,
        Segment,
        read_data_dir,
        read_kaldi_map,
        read_segments,
        validate_data_dir,
        write_data_dir,
        write_kaldi_map,
    )
    from asrkit.data.io import atomic_write, atomic_writer
    from asrkit.data.kaldi_table import read_matrices, read_matrix, read_vector, read_vectors

# Imported on first use, so that a module needing only the text files (scoring) does not
# pay for numpy and the audio libraries.
_HOME = {
    "load_audio": "audio",
    "iter_utterance_audio": "audio",
    "atomic_write": "io",
    "atomic_writer": "io",
    **dict.fromkeys(
        (
            "DataDir",
            "Segment",
            "read_data_dir",
            "read_kaldi_map",
            "read_segments",
            "validate_data_dir",
            "write_data_dir",
            "write_kaldi_map",
        ),
        "datadir",
    ),
    **dict.fromkeys(("read_matrices", "read_matrix", "read_vector", "read_vectors"), "kaldi_table"),
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'asrkit.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"asrkit.data.{_HOME[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DataDir",
    "Segment",
    "atomic_write",
    "atomic_writer",
    "iter_utterance_audio",
    "load_audio",
    "read_data_dir",
    "read_kaldi_map",
    "read_matrices",
    "read_matrix",
    "read_segments",
    "read_vector",
    "read_vectors",
    "validate_data_dir",
    "write_data_dir",
    "write_kaldi_map",
]
