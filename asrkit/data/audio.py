"""Audio input for ``wav.scp`` entries: file paths and Kaldi pipe commands.

Samples come back in int16 range (−32768..32767) as float32, which is what
Kaldi's feature extractors — and ``torchaudio.compliance.kaldi`` — expect.
:func:`iter_utterance_audio` gives every utterance of a data dir, segmented or not,
reading each recording once.
"""

from __future__ import annotations

import io
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import soundfile

from asrkit.data.datadir import DataDir, Recording, Segment, format_time, read_data_dir
from asrkit.errors import DataError

#: How far (seconds) a segment may end past its recording's end and be cut at the end
#: instead of rejected: the default of Kaldi's ``extract-segments --max-overshoot``.
MAX_OVERSHOOT = 0.5


def load_audio(
    entry: str, *, utt: str = "?", recording: str | None = None, first_channel: bool = False
) -> tuple[np.ndarray, int]:
    """Read one ``wav.scp`` entry.

    Args:
        entry: a path to a wav/flac/NIST-sphere file, or a shell command ending
            in ``|`` whose standard output is such a file (e.g. ``sox ... -t wav - |``).
        utt: the utterance id, for error messages.
        recording: the recording id when ``entry`` is a recording of a segmented data dir
            (``utt`` is then one of its utterances), for error messages.
        first_channel: take the first channel of a multi-channel file (the caller warns)
            instead of refusing it.

    Returns:
        ``(samples, sample_rate)``, samples of shape ``(T,)`` as float32 in int16 range.

    Raises:
        DataError: the file is missing, unreadable, empty or not mono; the
            message names the utterance, the file and the fix.
    """
    entry = entry.strip()
    owner = f"utterance '{utt}'" if recording is None else f"recording '{recording}' (of utterance '{utt}')"
    if entry.endswith("|"):
        command = entry[:-1].strip()
        proc = subprocess.run(command, shell=True, capture_output=True, check=False)
        if proc.returncode != 0 or not proc.stdout:
            detail = proc.stderr.decode(errors="replace").strip().splitlines()
            reason = detail[-1] if detail else f"exit status {proc.returncode}, no output"
            raise DataError(
                f"{owner}: wav.scp command failed: {command!r}: {reason}; "
                "check that the command and the audio file it reads exist"
            )
        source: object = io.BytesIO(proc.stdout)
        where = f"output of {command!r}"
    else:
        path = Path(entry)
        if not path.is_file():
            raise DataError(
                f"{owner}: audio file {path} not found; fix its wav.scp entry or restore the file"
            )
        source = str(path)
        where = str(path)
    try:
        samples, rate = soundfile.read(source, dtype="int16", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, ValueError) as err:
        # soundfile prefixes "Error opening <source>: ", a BytesIO's repr for a pipe's output.
        reason = str(err).replace(f"Error opening {source!r}: ", "")
        raise DataError(
            f"{owner}: cannot read audio {where}: {reason}; the file is truncated or "
            "not wav/flac/sphere — re-create it or convert it with sox"
        ) from None
    if samples.shape[0] == 0:
        raise DataError(f"{owner}: audio {where} has no samples; re-create the file")
    if samples.shape[1] != 1 and not first_channel:
        raise DataError(
            f"{owner}: audio {where} has {samples.shape[1]} channels; asrkit "
            "expects mono — pick a channel in wav.scp, e.g. 'sox FILE -t wav - remix 1 |'"
        )
    return samples[:, 0].astype(np.float32), int(rate)


class UtteranceAudio(NamedTuple):
    """One utterance's samples, from :func:`iter_utterance_audio`.

    Attributes:
        utt: the utterance id.
        samples: ``(T,)`` float32 samples in int16 range.
        rate: their sample rate in Hz.
        source: where they came from, for messages: the ``wav.scp`` entry, with the
            segment's times (``entry [1.25-3.4 s]``) in a segmented dir.
    """

    utt: str
    samples: np.ndarray
    rate: int
    source: str


def iter_utterance_audio(data: DataDir | str | Path) -> Iterator[UtteranceAudio]:
    """The audio of every utterance of a data dir, each recording read once.

    Without ``segments`` each ``wav.scp`` entry is one utterance. With it, a recording
    is read (file or pipe) once and cut into its utterances at sample
    ``round(time * rate)``; an end of -1 means the recording's end, and an end past it
    by at most :data:`MAX_OVERSHOOT` seconds is cut at the end (Kaldi's
    ``extract-segments`` does the same). Utterances come grouped by recording (see
    :meth:`DataDir.recordings`).

    Args:
        data: a data dir (read and validated) or a :class:`DataDir`.

    Yields:
        :class:`UtteranceAudio` ``(utt, samples, rate, source)``.

    Raises:
        DataError: see :func:`read_recordings`.
    """
    if isinstance(data, DataDir):
        yield from read_recordings(data.recordings())
    else:
        yield from read_recordings(
            read_data_dir(data, require_text=False).recordings(),
            segments_file=str(Path(data) / "segments"),
        )


def read_recordings(
    recordings: Iterable[Recording], *, segments_file: str = "segments"
) -> Iterator[UtteranceAudio]:
    """The audio of the utterances of ``recordings`` (e.g. one parallel job's share of
    :meth:`DataDir.recordings`), each recording read once and cut as
    :func:`iter_utterance_audio` describes.

    Args:
        recordings: what to read, in order.
        segments_file: the ``segments`` file the cuts come from, for messages.

    Yields:
        :class:`UtteranceAudio` ``(utt, samples, rate, source)``.

    Raises:
        DataError: unreadable audio (naming the recording and an utterance), or a
            segment that starts after its recording ends or ends more than
            :data:`MAX_OVERSHOOT` seconds past it (naming the utterance and the fix).
    """
    for recording in recordings:
        first, segment = recording.utterances[0]
        if segment is None:
            samples, rate = load_audio(recording.entry, utt=first)
            yield UtteranceAudio(first, samples, rate, recording.entry)
            continue
        samples, rate = load_audio(recording.entry, utt=first, recording=recording.id)
        for utt, segment in recording.utterances:
            assert segment is not None
            cut = cut_segment(samples, rate, segment, utt=utt, where=segments_file, source=recording.entry)
            span = f"{format_time(segment.start)}-{format_time(segment.end)} s"
            yield UtteranceAudio(utt, cut, rate, f"{recording.entry} [{span}]")


def cut_segment(
    samples: np.ndarray,
    rate: int,
    segment: Segment,
    *,
    utt: str = "?",
    where: str = "segments",
    source: str = "?",
) -> np.ndarray:
    """The samples of ``segment`` in its recording's ``samples``.

    Args:
        samples: ``(T,)`` the whole recording.
        rate: its sample rate in Hz.
        segment: start and end in seconds (end -1: to the end of the recording).
        utt, where, source: the utterance, the ``segments`` file and the ``wav.scp`` entry,
            for error messages.

    Returns:
        ``samples[round(start * rate):round(end * rate)]``, a view (no copy); an end up to
        :data:`MAX_OVERSHOOT` seconds past the recording's end is cut at the end.

    Raises:
        DataError: the segment starts at or after the recording's end, or ends more than
            :data:`MAX_OVERSHOOT` seconds past it.
    """
    total = samples.shape[0]
    duration = total / rate
    begin = round(segment.start * rate)
    end = total if segment.end == -1 else round(segment.end * rate)
    where = f"{where}: utterance '{utt}' of recording '{segment.recording}'"
    if begin >= total:
        raise DataError(
            f"{where} starts at {format_time(segment.start)} s, but the recording ({source}) lasts "
            f"{duration:.3f} s; fix the segment's times or the recording's wav.scp entry"
        )
    if end > total:
        if segment.end - duration > MAX_OVERSHOOT:
            raise DataError(
                f"{where} ends at {format_time(segment.end)} s, {segment.end - duration:.3f} s past "
                f"the end of the recording ({source}, {duration:.3f} s; at most {MAX_OVERSHOOT} s "
                "over is cut at the end); fix the segment's times or the recording's wav.scp entry"
            )
        end = total
    return samples[begin:end]


#: Extensions read as headerless 16-bit PCM (CMU's AN4 ``.raw`` files are big-endian).
RAW_SUFFIXES = (".raw", ".pcm")


def load_audio_file(
    path: str | Path,
    *,
    raw_rate: int = 16000,
    raw_byteorder: str = "big",
    on_multichannel: Callable[[Path, int], None] | None = None,
) -> tuple[np.ndarray, int]:
    """Read one audio file: wav/flac/NIST sphere via soundfile, or headerless PCM.

    Args:
        path: the file. ``.raw``/``.pcm`` files are headerless 16-bit mono PCM.
        raw_rate: sample rate of headerless files.
        raw_byteorder: ``big`` or ``little``, byte order of headerless files.
        on_multichannel: called with the path and its channel count for a file of more
            than one channel, which is then read as its first channel; None: such a file is
            an error.

    Returns:
        ``(samples, sample_rate)`` as :func:`load_audio`.

    Raises:
        DataError: missing, unreadable or empty file, or a directory (named, with the fix).
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: is a directory, not an audio file; give its files (e.g. {path}/*.wav)")
    if not path.is_file():
        raise DataError(f"{path}: audio file not found; check the path")
    if path.suffix.lower() not in RAW_SUFFIXES:
        channels = _channels(path)
        if channels > 1 and on_multichannel is not None:
            on_multichannel(path, channels)
        return load_audio(str(path), utt=path.name, first_channel=on_multichannel is not None)
    data = path.read_bytes()
    if len(data) < 2 or len(data) % 2:
        raise DataError(
            f"{path}: {len(data)} bytes is not whole 16-bit samples; the file is truncated or not 16-bit PCM"
        )
    dtype = ">i2" if raw_byteorder == "big" else "<i2"
    return np.frombuffer(data, dtype=dtype).astype(np.float32), raw_rate


def _channels(path: Path) -> int:
    try:
        return int(soundfile.info(str(path)).channels)
    except (soundfile.LibsndfileError, RuntimeError, ValueError):
        return 1  # unreadable: load_audio says why


def check_audio_files(data: DataDir, *, where: str | Path, show: int = 3) -> dict[int, int]:
    """Check that every audio file ``wav.scp`` names exists and has a readable audio header
    with samples, in one channel (commands ending in ``|`` are not run: only reading them
    would tell; in a segmented dir, recordings no segment uses are skipped, as reading
    does). Only headers are read.

    Returns:
        How many files (headers read) have each sample rate.

    Raises:
        DataError: one line giving how many entries are bad and the first ones, each with
            its id and what is wrong.
    """
    problems: list[str] = []
    rates: dict[int, int] = {}
    recordings = data.recordings()  # in a segmented dir, those some segment uses
    for rec in recordings:
        key, entry = rec.id, rec.entry.strip()
        if entry.endswith("|"):
            continue
        path = Path(entry)
        try:
            if not path.is_file():
                problems.append(f"{key}: {path} not found")
                continue
            if path.stat().st_size == 0:
                problems.append(f"{key}: {path} is empty")
                continue
            if path.suffix.lower() in RAW_SUFFIXES:
                continue  # headerless PCM: nothing to read but its size
            info = soundfile.info(str(path))
        except (soundfile.LibsndfileError, RuntimeError, ValueError, OSError) as err:
            reason = str(err).replace(f"Error opening {str(path)!r}: ", "")
            problems.append(f"{key}: {path} is not readable audio ({reason})")
            continue
        if info.frames == 0:
            problems.append(f"{key}: {path} has no samples")
        elif info.channels != 1:
            problems.append(f"{key}: {path} has {info.channels} channels (asrkit expects mono)")
        else:
            rates[int(info.samplerate)] = rates.get(int(info.samplerate), 0) + 1
            duration = info.frames / info.samplerate
            for utt, segment in rec.utterances:
                if segment is not None and segment.end - duration > MAX_OVERSHOOT:
                    problems.append(
                        f"{utt}: its segment ends at {format_time(segment.end)} s, past the end of {path} "
                        f"({duration:.3f} s; at most {MAX_OVERSHOOT} s over is cut)"
                    )
    if problems:
        shown = "; ".join(problems[:show])
        more = f" (and {len(problems) - show} more)" if len(problems) > show else ""
        raise DataError(
            f"{Path(where) / 'wav.scp'}: {len(problems)} of {len(recordings)} audio entries are bad: "
            f"{shown}{more}; fix the entries or restore the files (--quick skips this check)"
        )
    return rates
