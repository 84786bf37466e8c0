"""Kaldi data directories: read, write and validate.

A data dir holds one line per utterance in ``wav.scp`` (``utt path`` or
``utt cmd ... |``), ``text`` (``utt word word ...``) and ``utt2spk``
(``utt spk``), and one line per speaker in ``spk2utt``. Every file is sorted
under the C locale (byte order) and utterance ids start with their speaker id
so that sorting by utterance also groups speakers — Kaldi's own rules, so the
directories asrkit writes work with Kaldi's scripts and vice versa.

A *segmented* dir (Switchboard, Fisher, eval2000 as Kaldi prepares them) has a
``segments`` file, ``utt recording start end`` (seconds; end ``-1`` means "to the
end of the recording"): then ``wav.scp`` lists recordings, the utterances are the
lines of ``segments``, and an optional ``reco2file_and_channel``
(``recording file channel``, for CTM scoring) is kept along.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from asrkit.data.io import atomic_write
from asrkit.errors import DataError

log = logging.getLogger(__name__)

#: Files with one line per utterance that are checked against ``utt2spk`` when present.
_PER_UTT_FILES = ("wav.scp", "text", "feats.scp", "utt2num_frames", "utt2dur")


def _c_sorted(keys: list[str]) -> bool:
    # Python compares str by code point, which for UTF-8 text is the C locale's byte order.
    return all(a < b for a, b in zip(keys, keys[1:], strict=False))


def read_kaldi_map(
    path: str | Path, *, allow_empty_value: bool = False, check_sorted: bool = True
) -> dict[str, str]:
    """Read a Kaldi ``key value...`` file into an ordered dict.

    Args:
        path: the file.
        allow_empty_value: accept lines with a key only (e.g. an empty transcript in
            a hypothesis file); otherwise such a line is an error.
        check_sorted: require C-locale sorted, unique keys (Kaldi's rule for data dirs).

    Raises:
        DataError: missing file, bytes that are not UTF-8, empty key, missing value,
            duplicate or unsorted key; the message names the file, the line number and the key.
    """
    entries: dict[str, str] = {}
    for lineno, key, value in iter_kaldi_map(
        path, allow_empty_value=allow_empty_value, check_sorted=check_sorted
    ):
        if key in entries:
            raise DataError(
                f"{path}:{lineno}: duplicate id '{key}' (first seen earlier in the file); "
                "ids must be unique — remove or rename one"
            )
        entries[key] = value
    return entries


def iter_kaldi_map(
    path: str | Path, *, allow_empty_value: bool = False, check_sorted: bool = True
) -> Iterator[tuple[int, str, str]]:
    """``(line number, key, value)`` of a Kaldi ``key value...`` file, read line by line
    (a file of millions of lines is never held in memory). Checks as :func:`read_kaldi_map`;
    without ``check_sorted``, duplicate keys are the caller's to find."""
    path = Path(path)
    if not path.exists() or path.is_dir():
        raise DataError(
            f"{path}: file not found; check the path (for a data dir, run the stage that creates it)"
        )
    previous = None
    with open(path, encoding="utf-8") as handle:
        for lineno, line in _utf8_lines(handle, path):
            line = line.rstrip("\n")
            if not line.strip():
                raise DataError(f"{path}:{lineno}: empty line; remove it")
            # Kaldi splits the key off at the first space or TAB (SplitStringOnFirstSpace).
            key, value = (line.split(maxsplit=1) + [""])[:2]
            value = value.strip()
            if not value and not allow_empty_value:
                raise DataError(
                    f"{path}:{lineno}: utterance/key '{key}' has no value; give it one or remove the line"
                )
            if check_sorted and previous is not None and key <= previous:
                if key == previous:
                    raise DataError(
                        f"{path}:{lineno}: duplicate id '{key}' (first seen earlier in the file); "
                        "ids must be unique — remove or rename one"
                    )
                raise DataError(
                    f"{path}:{lineno}: not sorted: '{key}' comes after '{previous}'; "
                    f"sort it with: LC_ALL=C sort -o {path} {path}"
                )
            yield lineno, key, value
            previous = key


def _utf8_lines(handle: IO[str], path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a file opened as UTF-8; other bytes are a DataError naming
    the line (the decoder fails per chunk, so the line is found in the raw bytes)."""
    try:
        yield from enumerate(handle, start=1)
    except UnicodeDecodeError:
        data = path.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as err:
            lineno = data.count(b"\n", 0, err.start) + 1
            raise DataError(
                f"{path}:{lineno}: not UTF-8 text (byte {data[err.start]:#04x}); data dir files "
                "must be UTF-8 — convert it, e.g. with iconv -f latin1 -t utf-8"
            ) from None
        raise


@dataclass(frozen=True)
class Segment:
    """Where an utterance lies in its recording (one line of ``segments``).

    Attributes:
        recording: the recording id (a ``wav.scp`` key).
        start: start time in seconds (>= 0).
        end: end time in seconds (> start), or -1 for "to the end of the recording".
    """

    recording: str
    start: float
    end: float

    def __str__(self) -> str:
        """The ``segments`` value: ``recording start end``."""
        return f"{self.recording} {format_time(self.start)} {format_time(self.end)}"


def format_time(seconds: float) -> str:
    """A time for ``segments``: fixed point to the microsecond, without trailing zeros
    (``0.98``, ``12``, ``-1``) — what Kaldi's scripts and awk read back."""
    text = f"{seconds + 0.0:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


#: The format of a ``segments`` line, for error messages.
_SEGMENT_FORMAT = "'<utterance-id> <recording-id> <start-seconds> <end-seconds>'"


def read_segments(path: str | Path, *, recordings: Collection[str] | None = None) -> dict[str, Segment]:
    """Read and check a Kaldi ``segments`` file.

    Args:
        path: the file (``utt recording start end`` per line, C-sorted by utterance).
        recordings: the recording ids of ``wav.scp``; when given, every line must name one.

    Returns:
        utterance id -> :class:`Segment`, in file order.

    Raises:
        DataError: missing file, unsorted or duplicate utterance id, wrong number of
            fields, times that are not numbers, a negative start, an end not after the
            start (other than -1), or an unknown recording; the message names the file,
            the line, the utterance and the fix.
    """
    segments: dict[str, Segment] = {}
    for lineno, utt, value in iter_kaldi_map(path):
        where = f"{path}:{lineno}: utterance '{utt}'"
        fields = value.split()
        if len(fields) != 3:
            raise DataError(
                f"{where} has {len(fields) + 1} fields, not 4; a segments line is "
                f"{_SEGMENT_FORMAT} — fix the line"
            )
        recording, start_text, end_text = fields
        try:
            start, end = float(start_text), float(end_text)
        except ValueError:
            start = end = math.nan
        if not (math.isfinite(start) and math.isfinite(end)):
            raise DataError(
                f"{where}: times '{start_text} {end_text}' are not numbers; give start and end in "
                f"seconds, e.g. '{utt} {recording} 1.25 3.4'"
            )
        if start < 0:
            raise DataError(
                f"{where}: start time {start_text} is negative; times count seconds from the "
                "start of the recording — fix the line"
            )
        if end != -1 and end <= start:
            raise DataError(
                f"{where}: end time {end_text} is not after start time {start_text}; fix the times "
                "(-1 as the end means 'to the end of the recording') or remove the line"
            )
        if recordings is not None and recording not in recordings:
            raise DataError(
                f"{where}: recording '{recording}' is not in wav.scp; add the recording to "
                "wav.scp or fix the recording id"
            )
        segments[utt] = Segment(recording, start, end)
    return segments


def read_reco2file_and_channel(path: str | Path) -> dict[str, str]:
    """Read a Kaldi ``reco2file_and_channel`` file (``recording file channel`` per line).

    Returns:
        recording id -> ``"file channel"``.

    Raises:
        DataError: missing file, unsorted or duplicate recording id, or a line without
            exactly a file and a channel (named with its line and the fix).
    """
    entries: dict[str, str] = {}
    for lineno, recording, value in iter_kaldi_map(path):
        if len(value.split()) != 2:
            raise DataError(
                f"{path}:{lineno}: recording '{recording}' has {len(value.split()) + 1} fields, "
                "not 3; a reco2file_and_channel line is '<recording-id> <file> <channel>' "
                "(channel A or B, or 1) — fix the line"
            )
        entries[recording] = value
    return entries


def iter_utt2num_frames(path: str | Path) -> Iterator[tuple[int, str, int]]:
    """``(line number, utterance, frames)`` of an ``utt2num_frames`` file, line by line,
    each count checked (an integer >= 0). The one reader of this file."""
    for lineno, utt, value in iter_kaldi_map(path):
        if not value.isdigit():
            raise DataError(
                f"{path}:{lineno}: utterance '{utt}' has frame count {value!r}, expected an "
                "integer >= 0; regenerate it (feat-to-len scp:feats.scp ark,t:-)"
            )
        yield lineno, utt, int(value)


def read_utt2num_frames(path: str | Path) -> dict[str, int]:
    """Frames per utterance from an ``utt2num_frames`` file (see :func:`iter_utt2num_frames`);
    an empty file is an error."""
    counts = {utt: frames for _, utt, frames in iter_utt2num_frames(path)}
    if not counts:
        raise DataError(f"{path}: empty; regenerate it with feat-to-len scp:feats.scp ark,t:-")
    return counts


def read_frame_shift(data_dir: str | Path) -> float:
    """A data dir's frame shift in seconds (its ``frame_shift`` file; 10 ms when absent)."""
    try:
        return float((Path(data_dir) / "frame_shift").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.01


def write_kaldi_map(path: str | Path, entries: dict[str, str]) -> None:
    """Write ``key value`` lines sorted under the C locale, atomically."""
    lines = [f"{key} {entries[key]}".rstrip() + "\n" for key in sorted(entries)]
    atomic_write(path, "".join(lines))


@dataclass
class DataDir:
    """The contents of a Kaldi data directory (all maps ordered by utterance id).

    Attributes:
        wav_scp: utterance id -> audio path or pipe command ending in ``|``; in a
            segmented dir, recording id -> audio.
        text: utterance id -> transcript (words separated by single spaces).
        utt2spk: utterance id -> speaker id.
        extra: other per-utterance maps found in the dir (``feats.scp``, ...).
        segments: utterance id -> where it lies in its recording, for a segmented dir
            (``segments``); None when every ``wav.scp`` entry is one utterance.
        reco2file_and_channel: recording id -> ``"file channel"``, when the dir has one.
    """

    wav_scp: dict[str, str]
    utt2spk: dict[str, str]
    text: dict[str, str] | None = None
    extra: dict[str, dict[str, str]] = field(default_factory=dict)
    segments: dict[str, Segment] | None = None
    reco2file_and_channel: dict[str, str] | None = None

    @property
    def utt_ids(self) -> list[str]:
        return list(self.utt2spk)

    @property
    def segmented(self) -> bool:
        """True when utterances are cut from recordings by ``segments``."""
        return self.segments is not None

    def recordings(self) -> list[Recording]:
        """The audio to read, each recording once with the utterances cut from it.

        In a segmented dir, recordings come in the order of their first utterance (by
        utterance id) and hold their utterances in utterance order; recordings that no
        utterance uses are left out. Otherwise each utterance is its own recording.
        """
        if self.segments is None:
            return [Recording(utt, self.wav_scp[utt], ((utt, None),)) for utt in self.utt2spk]
        cuts: dict[str, list[tuple[str, Segment | None]]] = {}
        for utt in self.utt2spk:
            segment = self.segments[utt]
            cuts.setdefault(segment.recording, []).append((utt, segment))
        return [Recording(reco, self.wav_scp[reco], tuple(utts)) for reco, utts in cuts.items()]

    @property
    def spk2utt(self) -> dict[str, list[str]]:
        mapping: dict[str, list[str]] = {}
        for utt, spk in self.utt2spk.items():
            mapping.setdefault(spk, []).append(utt)
        return dict(sorted(mapping.items()))

    def subset(self, utt_ids: list[str]) -> DataDir:
        """A new DataDir holding only ``utt_ids`` (order follows this one)."""
        keep = set(utt_ids)
        pick = {utt: None for utt in self.utt2spk if utt in keep}

        def sub(mapping: dict[str, str]) -> dict[str, str]:
            return {utt: mapping[utt] for utt in pick if utt in mapping}

        segments = reco2fc = None
        if self.segments is None:
            wav_scp = sub(self.wav_scp)
            used: Collection[str] = pick
        else:
            segments = {utt: self.segments[utt] for utt in pick if utt in self.segments}
            used = {segment.recording for segment in segments.values()}
            wav_scp = {reco: entry for reco, entry in self.wav_scp.items() if reco in used}
        if self.reco2file_and_channel is not None:
            reco2fc = {r: v for r, v in self.reco2file_and_channel.items() if r in used}
        return DataDir(
            wav_scp=wav_scp,
            utt2spk=sub(self.utt2spk),
            text=None if self.text is None else sub(self.text),
            extra={name: sub(mapping) for name, mapping in self.extra.items()},
            segments=segments,
            reco2file_and_channel=reco2fc,
        )


@dataclass(frozen=True)
class Recording:
    """One ``wav.scp`` entry and the utterances cut from it (see :meth:`DataDir.recordings`).

    Attributes:
        id: the recording id (the utterance id in a dir without ``segments``).
        entry: the ``wav.scp`` value: a path or a pipe command ending in ``|``.
        utterances: ``(utterance id, segment)`` pairs; segment None means the whole audio.
    """

    id: str
    entry: str
    utterances: tuple[tuple[str, Segment | None], ...]


def write_data_dir(path: str | Path, data: DataDir) -> None:
    """Write ``wav.scp``, ``utt2spk``, ``spk2utt``, and ``text``, ``segments`` and
    ``reco2file_and_channel`` when present.

    Each file is written atomically and sorted; the directory is validated
    first, so an inconsistent DataDir never reaches disk.
    """
    _check_consistency(data, where=str(path))
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    write_kaldi_map(path / "wav.scp", data.wav_scp)
    write_kaldi_map(path / "utt2spk", data.utt2spk)
    write_kaldi_map(path / "spk2utt", {spk: " ".join(u) for spk, u in data.spk2utt.items()})
    if data.text is not None:
        write_kaldi_map(path / "text", data.text)
    if data.segments is not None:
        write_kaldi_map(path / "segments", {utt: str(seg) for utt, seg in data.segments.items()})
    if data.reco2file_and_channel is not None:
        write_kaldi_map(path / "reco2file_and_channel", data.reco2file_and_channel)
    for name, mapping in data.extra.items():
        write_kaldi_map(path / name, mapping)


def read_data_dir(path: str | Path, *, require_text: bool = True) -> DataDir:
    """Read and validate a Kaldi data directory.

    Raises:
        DataError: the first problem found (file, line/utterance and fix), see
            :func:`validate_data_dir`.
    """
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path}: data directory not found; run the data preparation stage first")
    utt2spk = read_kaldi_map(path / "utt2spk")
    wav_scp = read_kaldi_map(path / "wav.scp")
    segments = reco2fc = None
    if (path / "segments").exists():
        segments = read_segments(path / "segments", recordings=wav_scp)
    if (path / "reco2file_and_channel").exists():
        reco2fc = read_reco2file_and_channel(path / "reco2file_and_channel")
    text = None
    if (path / "text").exists() or require_text:
        text = read_kaldi_map(path / "text", allow_empty_value=True)
        _check_transcripts(path / "text", text)
    extra = {
        name: read_kaldi_map(path / name)
        for name in _PER_UTT_FILES
        if name not in ("wav.scp", "text") and (path / name).exists()
    }
    data = DataDir(
        wav_scp=wav_scp,
        utt2spk=utt2spk,
        text=text,
        extra=extra,
        segments=segments,
        reco2file_and_channel=reco2fc,
    )
    _check_consistency(data, where=str(path))
    _check_spk2utt(path, data)
    if segments is not None:
        unused = sorted(set(wav_scp) - {segment.recording for segment in segments.values()})
        if unused:  # Kaldi allows it (fix_data_dir.sh would drop them)
            log.info(
                "%s/wav.scp: %d recording(s) no segment uses, first '%s'; they are not read",
                path,
                len(unused),
                unused[0],
            )
    return data


def validate_data_dir(path: str | Path, *, require_text: bool = True) -> DataDir:
    """Check a data dir the way Kaldi's ``validate_data_dir.sh`` does.

    Checks: required files exist; lines well formed; ids unique and C-sorted;
    no empty transcripts; the same utterance ids in every per-utterance file;
    ``spk2utt`` is the inverse of ``utt2spk``; utterance ids sort consistently
    with their speakers (Kaldi requires speaker-prefixed ids). With ``segments``,
    the utterances are its lines (times well formed, see :func:`read_segments`),
    ``wav.scp`` lists recordings, and every recording a segment names is in
    ``wav.scp`` (and in ``reco2file_and_channel`` when there is one); a recording
    no segment uses is allowed, as in Kaldi. Whether a segment ends within its
    recording is known only once the audio is read (feature extraction checks it).

    Returns:
        The DataDir that was read.

    Raises:
        DataError: naming the file, the line or utterance, and the fix.
    """
    return read_data_dir(path, require_text=require_text)


def _check_transcripts(path: Path, text: dict[str, str]) -> None:
    for lineno, (utt, words) in enumerate(text.items(), start=1):
        if not words.strip():
            raise DataError(
                f"{path}:{lineno}: utterance '{utt}' has an empty transcript; "
                "fix the transcript or remove the utterance from the data dir"
            )


def _check_consistency(data: DataDir, *, where: str) -> None:
    utts = list(data.utt2spk)
    if not utts:
        raise DataError(f"{where}/utt2spk: no utterances; the data dir is empty")
    if not _c_sorted(utts):
        raise DataError(f"{where}/utt2spk: not sorted; sort with LC_ALL=C sort")
    reference = set(utts)
    if data.segments is None:
        maps = {"wav.scp": data.wav_scp, **data.extra}
    else:
        maps = {"segments": {u: str(s) for u, s in data.segments.items()}, **data.extra}
        _check_recordings(data, where=where)
    if data.text is not None:
        maps["text"] = data.text
    for name, mapping in maps.items():
        ids = set(mapping)
        if ids == reference:
            continue
        only_here = sorted(ids - reference)
        only_spk = sorted(reference - ids)
        parts = []
        if only_spk:
            parts.append(f"{len(only_spk)} utterance(s) in utt2spk but not in {name}, first '{only_spk[0]}'")
        if only_here:
            parts.append(
                f"{len(only_here)} utterance(s) in {name} but not in utt2spk, first '{only_here[0]}'"
            )
        raise DataError(
            f"{where}/{name}: utterance ids differ from utt2spk: {'; '.join(parts)}; "
            "make the files list the same utterances (Kaldi's fix_data_dir.sh does this)"
        )
    # Kaldi requires utt2spk sorted by utterance to also be sorted by speaker, which
    # holds when utterance ids start with their speaker id.
    pairs = [(spk, utt) for utt, spk in data.utt2spk.items()]
    if pairs != sorted(pairs):
        for utt, spk in data.utt2spk.items():
            if not utt.startswith(spk):
                raise DataError(
                    f"{where}/utt2spk: utterance '{utt}' of speaker '{spk}' breaks speaker "
                    "order; prefix utterance ids with their speaker id (e.g. "
                    f"'{spk}-{utt}')"
                )
        raise DataError(
            f"{where}/utt2spk: not sorted by speaker; prefix utterance ids with their speaker ids"
        )


def _check_recordings(data: DataDir, *, where: str) -> None:
    """Every recording a segment names is in ``wav.scp`` and ``reco2file_and_channel``."""
    assert data.segments is not None
    for name, recordings in (
        ("wav.scp", data.wav_scp),
        ("reco2file_and_channel", data.reco2file_and_channel),
    ):
        if recordings is None:
            continue
        missing = [
            (utt, seg.recording) for utt, seg in data.segments.items() if seg.recording not in recordings
        ]
        if missing:
            utt, reco = missing[0]
            raise DataError(
                f"{where}/segments: utterance '{utt}' is cut from recording '{reco}', which is not "
                f"in {name} ({len(missing)} such utterance(s)); add the recording to {name} or fix "
                "the recording ids"
            )


def _check_spk2utt(path: Path, data: DataDir) -> None:
    spk_file = path / "spk2utt"
    if not spk_file.exists():  # lhotse's `kaldi export` writes none: it follows from utt2spk
        log.info("%s: no spk2utt; it follows from utt2spk", path)
        return
    spk2utt = read_kaldi_map(spk_file)
    expected = {spk: " ".join(utts) for spk, utts in data.spk2utt.items()}
    if spk2utt == expected:
        return
    for spk in sorted(set(spk2utt) | set(expected)):
        if spk2utt.get(spk) != expected.get(spk):
            raise DataError(
                f"{spk_file}: speaker '{spk}' lists {spk2utt.get(spk, '(nothing)')!r} but "
                f"utt2spk gives {expected.get(spk, '(nothing)')!r}; regenerate it with "
                "utils/utt2spk_to_spk2utt.pl or asrkit's data preparation"
            )
