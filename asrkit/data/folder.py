"""A folder of audio files and their transcripts -> Kaldi data dirs (``asrkit make-data-dir``).

What a newcomer has is rarely a Kaldi data dir: it is a folder of recordings, one file per
utterance, perhaps in one sub-folder per speaker, and the words said in each, either in one
list (``name words ...`` per line) or in a text file beside each recording (``a.wav`` +
``a.txt`` or ``a.lab``; LibriSpeech's per-folder ``*.trans.txt`` lists too). This module
turns that into ``wav.scp``, ``text``, ``utt2spk`` and ``spk2utt``, with Kaldi's rules kept
(utterance ids that start with their speaker id, files sorted in byte order), optionally
split into train/dev/test by speaker so that no speaker is heard in two sets.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import soundfile

from asrkit.data.datadir import DataDir, validate_data_dir, write_data_dir
from asrkit.errors import DataError

log = logging.getLogger(__name__)

#: Audio the readers open (libsndfile's formats; sphere is NIST).
AUDIO_SUFFIXES = (".wav", ".flac", ".sph", ".ogg", ".mp3", ".opus")
#: Transcripts beside an audio file, tried in this order.
SIDECAR_SUFFIXES = (".txt", ".lab")
SPEAKER_MODES = ("dir", "prefix", "utt")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Found:
    """One audio file of the folder and what is known about it."""

    path: Path  # absolute
    rel: str  # relative to the folder, '/'-separated
    speaker: str
    utt: str


def find_audio(root: Path) -> list[Path]:
    """Every audio file under ``root`` (by suffix, case-insensitive), sorted."""
    if not root.is_dir():
        raise DataError(f"{root}: not a directory; give the folder that holds the audio files")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES)
    if not files:
        raise DataError(
            f"{root}: no audio files ({', '.join(AUDIO_SUFFIXES)}) in it or its sub-folders; "
            "convert other formats to wav first (e.g. with sox or ffmpeg)"
        )
    return files


def _safe(name: str) -> str:
    """An id from a file or folder name: Kaldi ids hold no whitespace, and this keeps them
    to characters every shell and sort agree on."""
    return _UNSAFE.sub("_", name).strip("_") or "x"


def _speaker(root: Path, path: Path, mode: str) -> str:
    stem = _safe(path.stem)
    if mode == "utt":
        return stem
    if mode == "prefix":  # 'spk12-0003.wav', 'spk12_0003.wav'
        return re.split(r"[-_]", stem, maxsplit=1)[0] or stem
    parent = path.parent.relative_to(root)
    # The folder right above the file names the speaker; a file directly in the folder is
    # its own speaker (Kaldi's advice when speakers are unknown: CMVN then adapts per file).
    return _safe(parent.parts[-1]) if parent.parts else stem


def _utt_id(speaker: str, stem: str) -> str:
    return (
        stem
        if stem == speaker or stem.startswith(f"{speaker}-") or stem.startswith(f"{speaker}_")
        else f"{speaker}-{stem}"
    )


def index_folder(root: Path, *, speaker: str = "dir") -> list[Found]:
    """The folder's audio files with their speaker and utterance ids.

    Raises:
        DataError: an unknown ``speaker`` mode, no audio, or two files that would get the
            same utterance id (named, with the fix).
    """
    if speaker not in SPEAKER_MODES:
        raise DataError(f"--speaker {speaker}: not one of {', '.join(SPEAKER_MODES)}")
    root = root.resolve()
    found: list[Found] = []
    owners: dict[str, Path] = {}
    for path in find_audio(root):
        spk = _speaker(root, path, speaker)
        utt = _utt_id(spk, _safe(path.stem))
        if utt in owners:
            raise DataError(
                f"{path} and {owners[utt]} both become utterance '{utt}'; rename one of them "
                "(utterance ids come from the file name and the speaker)"
            )
        owners[utt] = path
        found.append(Found(path, path.relative_to(root).as_posix(), spk, utt))
    return found


def read_transcript_list(path: Path) -> dict[str, str]:
    """``name words ...`` lines (name: a file's stem or its path relative to the folder, with
    or without the suffix; a tab or spaces before the words). Blank lines are skipped."""
    entries: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"{path}: transcript list not found; check the path") from None
    except UnicodeDecodeError as err:
        raise DataError(
            f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); re-save it as UTF-8"
        ) from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        key, _, words = line.strip().partition("\t") if "\t" in line else line.strip().partition(" ")
        key, words = key.strip(), " ".join(words.split())
        if not words:
            raise DataError(
                f"{path}:{number}: '{key}' has no words; write 'name words ...' or remove the line"
            )
        if key in entries:
            raise DataError(f"{path}:{number}: '{key}' is listed twice; keep one transcript per file")
        entries[key] = words
    return entries


def _keys(item: Found) -> tuple[str, ...]:
    rel_stem = item.rel.rsplit(".", 1)[0]
    return (item.rel, rel_stem, item.path.name, item.path.stem)


def _sidecar(item: Found) -> str | None:
    for suffix in SIDECAR_SUFFIXES:
        side = item.path.with_suffix(suffix)
        if side.is_file():
            words = " ".join(side.read_text(encoding="utf-8", errors="replace").split())
            if not words:
                raise DataError(f"{side}: empty transcript; write the words said in {item.path.name}")
            return words
    return None


def _folder_lists(found: Iterable[Found]) -> dict[Path, dict[str, str]]:
    """LibriSpeech's ``<speaker>-<chapter>.trans.txt``: one list per folder, keyed by stem."""
    lists: dict[Path, dict[str, str]] = {}
    for folder in sorted({item.path.parent for item in found}):
        merged: dict[str, str] = {}
        for listing in sorted(folder.glob("*.trans.txt")):
            merged.update(read_transcript_list(listing))
        lists[folder] = merged
    return lists


def match_transcripts(
    found: list[Found], transcripts: Mapping[str, str] | None, *, skip_missing: bool = False
) -> dict[str, str]:
    """utterance id -> words, from ``transcripts`` (a list's entries) or, when None, from
    the files beside each recording.

    Raises:
        DataError: recordings without words (unless ``skip_missing``), or list entries that
            name no recording, with the count and the first ones.
    """
    text: dict[str, str] = {}
    missing: list[str] = []
    if transcripts is not None:
        used: set[str] = set()
        for item in found:
            key = next((k for k in _keys(item) if k in transcripts), None)
            if key is None:
                missing.append(item.rel)
                continue
            used.add(key)
            text[item.utt] = transcripts[key]
        unknown = [k for k in transcripts if k not in used]
        if unknown:
            raise DataError(
                f"{len(unknown)} transcript list entries name no audio file in the folder "
                f"(first: {', '.join(unknown[:3])}); names are file stems or paths relative "
                "to the folder — fix the names or remove the lines"
            )
    else:
        lists = _folder_lists(found)
        for item in found:
            words = _sidecar(item) or lists[item.path.parent].get(item.path.stem)
            if words is None:
                missing.append(item.rel)
            else:
                text[item.utt] = words
    if missing and not skip_missing:
        how = "the transcript list" if transcripts is not None else "a .txt file beside each recording"
        raise DataError(
            f"{len(missing)} of {len(found)} audio files have no transcript (first: "
            f"{', '.join(missing[:3])}); add them to {how}, or pass --skip-missing to leave them out"
        )
    if missing:
        log.warning(
            "left out %d audio files without a transcript (first: %s)", len(missing), ", ".join(missing[:3])
        )
    if not text:
        raise DataError("no audio file has a transcript; nothing to write")
    return text


def parse_split(spec: str) -> dict[str, float]:
    """``train=0.8,dev=0.1,test=0.1`` -> set name -> fraction (they must add up to 1)."""
    parts: dict[str, float] = {}
    for piece in spec.split(","):
        name, eq, value = piece.partition("=")
        try:
            fraction = float(value)
        except ValueError:
            fraction = -1.0
        if not eq or not name.strip() or not 0 < fraction <= 1:
            raise DataError(
                f"--split {spec}: '{piece}' is not NAME=FRACTION; e.g. --split train=0.8,dev=0.1,test=0.1"
            )
        parts[name.strip()] = fraction
    if abs(sum(parts.values()) - 1.0) > 1e-6:
        raise DataError(f"--split {spec}: the fractions add up to {sum(parts.values()):g}, not 1")
    return parts


def _bucket(key: str, seed: int) -> float:
    """A stable pseudo-random number in [0, 1) for ``key`` (the same on every machine)."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_sets(found: list[Found], parts: Mapping[str, float], *, seed: int = 0) -> dict[str, list[Found]]:
    """Assign recordings to sets by speaker (no speaker in two sets), or by utterance when
    there are too few speakers to give every set at least one."""
    speakers = sorted({item.speaker for item in found})
    by_speaker = len(speakers) >= 2 * len(parts)
    keys = speakers if by_speaker else sorted(item.utt for item in found)
    if len(keys) < len(parts):
        raise DataError(
            f"{len(found)} recordings cannot be split into {len(parts)} sets; record more or drop --split"
        )
    ordered = sorted(keys, key=lambda k: _bucket(k, seed))
    assignment: dict[str, str] = {}
    start, names = 0, list(parts)
    for index, name in enumerate(names):
        # Every set gets at least one key; the last takes what rounding left over.
        remaining = len(names) - index - 1
        count = len(ordered) - start if remaining == 0 else max(1, round(parts[name] * len(ordered)))
        count = min(count, len(ordered) - start - remaining)
        for key in ordered[start : start + count]:
            assignment[key] = name
        start += count
    sets: dict[str, list[Found]] = {name: [] for name in names}
    for item in found:
        sets[assignment[item.speaker if by_speaker else item.utt]].append(item)
    if not by_speaker:
        log.warning(
            "%d speakers are too few to split by speaker: sets share speakers (utterances were split)",
            len(speakers),
        )
    return sets


def write_folder_data(found: list[Found], text: Mapping[str, str], out: Path) -> DataDir:
    """Write one data dir of the recordings in ``found`` that have words in ``text``, and
    validate it as stage 1 would. It is written beside ``out`` and renamed over it when
    valid, so a failure leaves ``out`` as it was and nothing half-written."""
    items = [item for item in found if item.utt in text]
    data = DataDir(
        wav_scp={item.utt: str(item.path) for item in items},
        utt2spk={item.utt: item.speaker for item in items},
        text={item.utt: text[item.utt] for item in items},
    )
    out = out.absolute()
    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        write_data_dir(staging, data)
        validate_data_dir(staging)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return data


def sample_rates(found: Iterable[Found]) -> dict[int, int]:
    """How many recordings have each sample rate (headers only).

    Raises:
        DataError: an unreadable header, or recordings of more than one channel (the
            feature stage reads mono), with the count, the first ones and the fix.
    """
    rates: dict[int, int] = {}
    stereo: list[str] = []
    for item in found:
        try:
            info = soundfile.info(str(item.path))
        except (soundfile.LibsndfileError, RuntimeError, ValueError) as err:
            raise DataError(
                f"{item.path}: cannot read its audio header ({err}); re-create or convert the file"
            ) from None
        if info.channels != 1:
            stereo.append(f"{item.rel} ({info.channels} channels)")
        rates[int(info.samplerate)] = rates.get(int(info.samplerate), 0) + 1
    if stereo:
        raise DataError(
            f"{len(stereo)} recordings are not mono (first: {', '.join(stereo[:3])}); "
            "convert them, e.g. sox in.wav out.wav remix 1"
        )
    return dict(sorted(rates.items()))
