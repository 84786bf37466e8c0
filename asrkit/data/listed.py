"""Corpora of any size without new bytes: a data dir that lists real feature arks many times.

``feats.scp`` entries are byte offsets into archives, so a data dir can name the same
matrices again and again under new utterance and speaker ids. Training reads every one
of them for real — the same reads a corpus of that size would need, served by the page
cache — while the disk holds only the source's arks and a few text files. The tests and
``asrkit bench data`` use it to train from 10 or 100 hours on a machine that holds AN4.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from asrkit.data.datadir import read_frame_shift, read_kaldi_map, read_utt2num_frames
from asrkit.data.io import atomic_writer
from asrkit.errors import DataError

#: Files that are listed again under the new ids (``wav.scp``, and a segmented source's
#: ``segments`` and ``reco2file_and_channel`` whose recordings are renamed like the
#: speakers, keep the data dir valid for every reader; the audio is never read by training).
_PER_UTT = ("feats.scp", "utt2num_frames", "text", "wav.scp", "segments", "reco2file_and_channel")
#: Files whose value starts with an id that is renamed too (a speaker, a recording).
_ID_VALUED = ("utt2spk", "segments")
#: Files copied as they are (the listed corpus has the source's statistics and settings).
_COPIED = ("cmvn_global.ark", "frame_shift", "feats.yaml")


def list_corpus(source: str | Path, target: str | Path, *, hours: float) -> dict[str, float]:
    """Write ``target``: ``source``'s utterances listed ``ceil(hours / source hours)`` times.

    Copy ``k`` renames speaker ``spk`` to ``x{k:04d}-spk`` and utterance ``utt`` to
    ``x{k:04d}-utt`` (and a segmented source's recording ``rec`` to ``x{k:04d}-rec``), so
    ids stay unique, speaker-prefixed and C-sorted. Per-speaker CMVN (``cmvn.scp``) is
    listed for the new speakers too.

    Args:
        source: a data dir with ``feats.scp``, ``utt2num_frames``, ``utt2spk`` (``text``,
            ``wav.scp``, ``segments``, ``reco2file_and_channel``, ``cmvn.scp`` and the global
            stats are carried along when present).
        target: the new data dir (replaced).
        hours: at least this much speech (at the source's frame shift).

    Returns:
        ``copies``, ``utterances``, ``frames`` and ``hours`` of the listed corpus.
    """
    source, target = Path(source), Path(target)
    frames = read_utt2num_frames(source / "utt2num_frames")
    shift = read_frame_shift(source)
    total = sum(frames.values())
    if total == 0:
        raise DataError(f"{source}/utt2num_frames: no frames to list; run the feature stage")
    copies = max(1, math.ceil(hours * 3600.0 / (total * shift)))
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    utt2spk = read_kaldi_map(source / "utt2spk")
    for name in (*_PER_UTT, "utt2spk"):
        if (source / name).is_file():
            entries = utt2spk if name == "utt2spk" else read_kaldi_map(source / name)
            if name == "feats.scp":
                entries = {key: _absolute(rx) for key, rx in entries.items()}
            _write_copies(target / name, entries, copies, prefix_value=name in _ID_VALUED)
    spk2utt: dict[str, list[str]] = {}
    for utt, spk in utt2spk.items():
        spk2utt.setdefault(spk, []).append(utt)
    with atomic_writer(target / "spk2utt") as out:
        for k in range(copies):
            for spk in sorted(spk2utt):
                out.write(f"x{k:04d}-{spk} " + " ".join(f"x{k:04d}-{u}" for u in spk2utt[spk]) + "\n")
    if (source / "cmvn.scp").is_file():
        cmvn = {spk: _absolute(rx) for spk, rx in read_kaldi_map(source / "cmvn.scp").items()}
        _write_copies(target / "cmvn.scp", cmvn, copies, prefix_value=False)
    for name in _COPIED:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
    return {
        "copies": copies,
        "utterances": copies * len(frames),
        "frames": copies * total,
        "hours": round(copies * total * shift / 3600.0, 2),
    }


def _write_copies(path: Path, entries: dict[str, str], copies: int, *, prefix_value: bool) -> None:
    """``entries`` ``copies`` times with prefixed keys (and, with ``prefix_value``, values
    that start with a prefixed id: a speaker, a segment's recording)."""
    with atomic_writer(path) as out:
        for k in range(copies):
            prefix = f"x{k:04d}-"
            for key, value in entries.items():
                out.write(f"{prefix}{key} {prefix + value if prefix_value else value}\n")


def _absolute(rx: str) -> str:
    """``file.ark:offset`` with an absolute path (Kaldi resolves a relative one against the
    working directory, which a data dir written elsewhere does not share)."""
    path, sep, offset = rx.rpartition(":")
    if sep and offset.isdigit() and not rx.endswith("|") and not Path(path).is_absolute():
        return f"{Path(path).resolve()}:{offset}"
    return rx
