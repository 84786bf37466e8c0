"""Audio input for ``wav.scp`` entries: file paths and Kaldi pipe commands.

Samples come back in int16 range (−32768..32767) as float32, which is what
Kaldi's feature extractors — and ``torchaudio.compliance.kaldi`` — expect.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import numpy as np
import soundfile

from asrkit.errors import DataError


def load_audio(entry: str, *, utt: str = "?") -> tuple[np.ndarray, int]:
    """Read one ``wav.scp`` entry.

    Args:
        entry: a path to a wav/flac/NIST-sphere file, or a shell command ending
            in ``|`` whose standard output is such a file (e.g. ``sox ... -t wav - |``).
        utt: the utterance id, for error messages.

    Returns:
        ``(samples, sample_rate)``, samples of shape ``(T,)`` as float32 in int16 range.

    Raises:
        DataError: the file is missing, unreadable, empty or not mono; the
            message names the utterance, the file and the fix.
    """
    entry = entry.strip()
    if entry.endswith("|"):
        command = entry[:-1].strip()
        proc = subprocess.run(command, shell=True, capture_output=True, check=False)
        if proc.returncode != 0 or not proc.stdout:
            detail = proc.stderr.decode(errors="replace").strip().splitlines()
            reason = detail[-1] if detail else f"exit status {proc.returncode}, no output"
            raise DataError(
                f"utterance '{utt}': wav.scp command failed: {command!r}: {reason}; "
                "check that the command and the audio file it reads exist"
            )
        source: object = io.BytesIO(proc.stdout)
        where = f"output of {command!r}"
    else:
        path = Path(entry)
        if not path.is_file():
            raise DataError(
                f"utterance '{utt}': audio file {path} not found; fix its wav.scp entry or restore the file"
            )
        source = str(path)
        where = str(path)
    try:
        samples, rate = soundfile.read(source, dtype="int16", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, ValueError) as err:
        # soundfile prefixes "Error opening <source>: ", a BytesIO's repr for a pipe's output.
        reason = str(err).replace(f"Error opening {source!r}: ", "")
        raise DataError(
            f"utterance '{utt}': cannot read audio {where}: {reason}; the file is truncated or "
            "not wav/flac/sphere — re-create it or convert it with sox"
        ) from None
    if samples.shape[0] == 0:
        raise DataError(f"utterance '{utt}': audio {where} has no samples; re-create the file")
    if samples.shape[1] != 1:
        raise DataError(
            f"utterance '{utt}': audio {where} has {samples.shape[1]} channels; asrkit "
            "expects mono — pick a channel in wav.scp, e.g. 'sox FILE -t wav - remix 1 |'"
        )
    return samples[:, 0].astype(np.float32), int(rate)


#: Extensions read as headerless 16-bit PCM (CMU's AN4 ``.raw`` files are big-endian).
RAW_SUFFIXES = (".raw", ".pcm")


def load_audio_file(
    path: str | Path, *, raw_rate: int = 16000, raw_byteorder: str = "big"
) -> tuple[np.ndarray, int]:
    """Read one audio file: wav/flac/NIST sphere via soundfile, or headerless PCM.

    Args:
        path: the file. ``.raw``/``.pcm`` files are headerless 16-bit mono PCM.
        raw_rate: sample rate of headerless files.
        raw_byteorder: ``big`` or ``little``, byte order of headerless files.

    Returns:
        ``(samples, sample_rate)`` as :func:`load_audio`.

    Raises:
        DataError: missing, unreadable or empty file (named, with the fix).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: audio file not found; check the path")
    if path.suffix.lower() not in RAW_SUFFIXES:
        return load_audio(str(path), utt=path.name)
    data = path.read_bytes()
    if len(data) < 2 or len(data) % 2:
        raise DataError(
            f"{path}: {len(data)} bytes is not whole 16-bit samples; the file is truncated or not 16-bit PCM"
        )
    dtype = ">i2" if raw_byteorder == "big" else "<i2"
    return np.frombuffer(data, dtype=dtype).astype(np.float32), raw_rate
