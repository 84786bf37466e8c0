"""Kaldi data directories and audio input.

Public API:
    - :class:`DataDir`, :func:`read_data_dir`, :func:`write_data_dir`,
      :func:`validate_data_dir` — ``wav.scp``/``text``/``utt2spk``/``spk2utt``
      read, write (atomically, sorted under C locale) and checked.
    - :func:`read_kaldi_map`, :func:`write_kaldi_map` — one ``key value`` file.
    - :func:`load_audio` — one ``wav.scp`` entry (path or ``cmd |`` pipe) as
      int16-range float samples and its sample rate.
"""

from asrkit.data.audio import load_audio
from asrkit.data.datadir import (
    DataDir,
    read_data_dir,
    read_kaldi_map,
    validate_data_dir,
    write_data_dir,
    write_kaldi_map,
)
from asrkit.data.io import atomic_write, atomic_writer

__all__ = [
    "DataDir",
    "atomic_write",
    "atomic_writer",
    "load_audio",
    "read_data_dir",
    "read_kaldi_map",
    "validate_data_dir",
    "write_data_dir",
    "write_kaldi_map",
]
