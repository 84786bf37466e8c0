"""Opening a data dir for training or decoding: ``feats.scp``, ``utt2spk``, ``text``,
``utt2num_frames`` and the CMVN stats read line by line and checked against each other,
every problem named with its file and utterance; the result is a
:class:`~asrkit.loader.archive.StreamingSource` (nothing but the first matrix is read).
"""

from __future__ import annotations

import array
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar, cast

import numpy as np

from asrkit.data.datadir import iter_kaldi_map, iter_utt2num_frames, read_kaldi_map
from asrkit.errors import DataError
from asrkit.features.cmvn import read_cmvn
from asrkit.loader.archive import RERUN_FEATURES, Packed, StreamingSource, feature_dim, matrix_rows
from asrkit.loader.batch import CmvnNormalizer, Utterance
from asrkit.targets.tokenizer import Tokenizer

log = logging.getLogger(__name__)

_V = TypeVar("_V")


def open_data_dir(
    data_dir: str | Path,
    normalize: CmvnNormalizer,
    *,
    tokenizer: Tokenizer | None = None,
    input_dim: int | None = None,
    keep_text: bool = False,
) -> StreamingSource:
    """Index a data dir's features for streaming: reads its metadata, no feature data.

    Checks what can be checked cheaply before training starts: every utterance of
    ``feats.scp`` has a speaker, a frame count (and a transcript that encodes to tokens
    when ``tokenizer`` is given); every archive exists and is longer than its largest
    offset (one ``stat`` per archive); the first matrix has ``input_dim`` columns.

    Args:
        data_dir: a Kaldi data dir with ``feats.scp`` and ``utt2spk`` (``utt2num_frames``
            is read when present, otherwise the matrix headers are).
        normalize: the CMVN applied to every utterance as it is read.
        tokenizer: encodes ``text`` into token targets.
        input_dim: the feature dimension the model expects.
        keep_text: keep the transcripts (a dev set: its WER needs them).

    Raises:
        DataError: naming the file, the utterance (and the offset) and the fix.
    """
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"{data_dir}: data directory not found; run the data preparation stage first")
    scp = data_dir / "feats.scp"
    if not scp.is_file():
        raise DataError(f"{scp}: not found; run the feature stage (stage 2) for {data_dir}")
    # Every file is read line by line and joined on the sorted ids, so opening a corpus of
    # millions of utterances never holds its text files in memory.
    ids: list[str] = []
    arks: list[str] = []
    ark_number: dict[str, int] = {}
    ark_of, offsets = array.array("i"), array.array("q")
    others: dict[int, str] = {}
    for _, utt, rx in iter_kaldi_map(scp):
        path, sep, offset = rx.rpartition(":")
        if sep and offset.isdigit() and not rx.endswith("|"):
            number = ark_number.get(path)
            if number is None:
                number = ark_number[path] = len(arks)
                arks.append(path)
            ark_of.append(number)
            offsets.append(int(offset))
        else:
            others[len(ids)] = rx
            ark_of.append(-1)
            offsets.append(0)
        ids.append(utt)
    if not ids:
        raise DataError(f"{scp}: empty; {RERUN_FEATURES} for {data_dir}")
    spk_number: dict[str, int] = {}
    spk_of = array.array("i")
    for spk in _joined(ids, data_dir / "utt2spk", "a speaker", _rows(data_dir / "utt2spk")):
        spk_of.append(spk_number.setdefault(spk, len(spk_number)))
    speakers = list(spk_number)
    tokens, text = None, None
    if tokenizer is not None or keep_text:
        values, starts, kept = array.array("i"), array.array("q", [0]), {}
        for utt, transcript in zip(
            ids,
            _joined(ids, data_dir / "text", "a transcript", _rows(data_dir / "text", allow_empty=True)),
            strict=True,
        ):
            if keep_text:
                kept[utt] = transcript
            if tokenizer is not None:
                encoded = tokenizer.encode(transcript)
                if not encoded:
                    raise DataError(
                        f"{data_dir}/text: utterance '{utt}' encodes to no tokens; check its transcript"
                    )
                values.extend(encoded)
                starts.append(len(values))
        if tokenizer is not None:
            tokens = Packed(np.frombuffer(values, dtype=np.int32), np.frombuffer(starts, dtype=np.int64))
        text = kept if keep_text else None
    source = StreamingSource(
        data_dir=data_dir,
        ids=ids,
        lengths=np.zeros(len(ids), dtype=np.int64),
        arks=arks,
        ark_of=np.frombuffer(ark_of, dtype=np.int32),
        offsets=np.frombuffer(offsets, dtype=np.int64),
        others=others,
        speakers=speakers,
        spk_of=np.frombuffer(spk_of, dtype=np.int32),
        tokens=tokens,
        text=text,
        normalize=normalize,
        speaker_stats={},
        dim=0,
    )
    _check_arks(scp, ids, arks, source.ark_of, source.offsets)
    source.speaker_stats = _speaker_stats(data_dir, normalize, speakers)
    source.lengths = _frame_counts(data_dir, source)
    source.dim = feature_dim(source, input_dim)
    return source


def _rows(path: Path, *, allow_empty: bool = False) -> Iterator[tuple[int, str, str]]:
    return iter_kaldi_map(path, allow_empty_value=allow_empty)


def _joined(ids: list[str], path: Path, what: str, entries: Iterator[tuple[int, str, _V]]) -> Iterator[_V]:
    """The value of each of ``ids`` (sorted) in ``entries``, the sorted ``(line, key,
    value)`` rows of ``path``; the file may list more utterances (they are skipped), not
    fewer."""
    key: str | None = None
    value: _V | None = None
    for utt in ids:
        while key is None or key < utt:
            try:
                _, key, value = next(entries)
            except StopIteration:
                key = None
                break
        if key != utt:
            raise DataError(
                f"{path}: utterance '{utt}' of feats.scp has no {what}; fix the data "
                "dir (Kaldi: utils/fix_data_dir.sh)"
            )
        yield cast(_V, value)


def _check_arks(scp: Path, ids: list[str], arks: list[str], ark_of: np.ndarray, offsets: np.ndarray) -> None:
    """Every archive exists and extends past its largest offset (one stat per archive)."""
    if not arks:
        return
    first = np.full(len(arks), -1, dtype=np.int64)  # each archive's first utterance
    last = np.full(len(arks), -1, dtype=np.int64)  # the utterance at its largest offset
    for i in np.flatnonzero(ark_of >= 0).tolist():
        a = int(ark_of[i])
        if first[a] < 0:
            first[a] = i
        if last[a] < 0 or offsets[i] > offsets[last[a]]:
            last[a] = i
    for a, path in enumerate(arks):
        i = int(last[a])
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise DataError(
                f"{scp}: utterance '{ids[first[a]]}': {path}: file not found; rerun "
                f"the feature stage with --force (or fix the paths in feats.scp)"
            ) from None
        except OSError as err:
            raise DataError(
                f"{scp}: utterance '{ids[first[a]]}': {path}: cannot stat "
                f"({err.strerror}); check its permissions"
            ) from None
        if offsets[i] >= size:
            raise DataError(
                f"{scp}: utterance '{ids[i]}': offset {offsets[i]} is past the end "
                f"of {path} ({size} bytes); the archive was cut short or the scp is "
                f"stale — regenerate both: {RERUN_FEATURES}"
            )


def _speaker_stats(data_dir: Path, normalize: CmvnNormalizer, speakers: list[str]) -> dict[str, np.ndarray]:
    if normalize.mode != "speaker":
        return {}
    cmvn_scp = data_dir / "cmvn.scp"
    if not cmvn_scp.is_file():
        raise DataError(
            f"{cmvn_scp}: not found; features.cmvn=speaker needs the per-speaker "
            f"stats that the feature stage (stage 2) writes for {data_dir}"
        )
    entries = read_kaldi_map(cmvn_scp)
    missing = [spk for spk in speakers if spk not in entries]
    if missing:
        raise DataError(
            f"{cmvn_scp}: no stats for speaker '{missing[0]}' ({len(missing)} "
            f"speaker(s) missing); {RERUN_FEATURES}"
        )
    return {spk: read_cmvn(entries[spk]) for spk in speakers}


def _frame_counts(data_dir: Path, source: StreamingSource) -> np.ndarray:
    """Frames per utterance from ``utt2num_frames``, else from the matrix headers."""
    path = data_dir / "utt2num_frames"
    if path.is_file():
        counts = _joined(source.ids, path, "frame count", iter_utt2num_frames(path))
        return np.fromiter(counts, dtype=np.int64, count=len(source.ids))
    log.info(
        "%s: no utt2num_frames; reading the %d matrix headers instead (write it once with "
        "feat-to-len scp:feats.scp ark,t:%s)",
        data_dir,
        len(source.ids),
        path,
    )
    return np.array(matrix_rows(source), dtype=np.int64)


def load_utterances(
    data_dir: str | Path,
    normalize: CmvnNormalizer,
    *,
    tokenizer: Tokenizer | None = None,
    input_dim: int | None = None,
) -> list[Utterance]:
    """Read a data dir's features into memory (and token targets when ``tokenizer`` is given).

    Raises:
        DataError: as :func:`open_data_dir`, and for a matrix that cannot be read.
    """
    return open_data_dir(
        data_dir,
        normalize,
        tokenizer=tokenizer,
        input_dim=input_dim,
        keep_text=(Path(data_dir) / "text").is_file(),
    ).read_all()
