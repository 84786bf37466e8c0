"""Speed perturbation of a Kaldi data dir (``data.speed_perturb``), as Kaldi's
``utils/data/perturb_data_dir_speed_3way.sh`` and ESPnet do it.

Each factor ``f`` other than 1 adds a copy of every utterance, read through
``sox ... speed f`` (tempo and pitch change together; the sample rate stays), with the
utterance and its speaker renamed ``sp<f>-<id>`` — a perturbed speaker is another
speaker, so per-speaker CMVN treats it as one, and ids stay speaker-prefixed and sorted.
Factor 1 keeps the originals under their own ids. In a segmented dir (``segments``) the
recordings are perturbed instead — ``sp<f>-<recording>`` in ``wav.scp`` and
``reco2file_and_channel`` — and each segment's times are divided by ``f``, as Kaldi's
``utils/perturb_data_dir_speed.sh`` does. Only the training set is perturbed (after the
dev split), and :func:`original_only` lets the LM and tokenizer see each sentence once.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from asrkit.data.datadir import (
    DataDir,
    Segment,
    read_data_dir,
    read_kaldi_map,
    validate_data_dir,
    write_data_dir,
)
from asrkit.data.datadir import write_kaldi_map as write_map
from asrkit.errors import ConfigError, DataError


def check_factors(factors: list[float]) -> list[str]:
    """Problems with ``data.speed_perturb`` (empty: none)."""
    if not factors:
        return []
    problems = []
    if any(not 0.5 <= f <= 2.0 for f in factors):
        problems.append(
            f"data.speed_perturb={list(factors)}: factors must lie in [0.5, 2.0] (Kaldi uses 0.9 1.0 1.1)"
        )
    if len({prefix(f) for f in factors}) != len(factors):
        problems.append(f"data.speed_perturb={list(factors)}: a factor is listed twice (ids use {{f:g}})")
    if 1.0 not in factors:
        problems.append(
            f"data.speed_perturb={list(factors)}: include 1.0, or the original speech is left out of training"
        )
    return problems


def prefix(factor: float) -> str:
    """The id prefix of utterances and speakers perturbed by ``factor`` (``sp0.9-``)."""
    return "" if factor == 1.0 else f"sp{factor:g}-"


def perturbed_factors(data_dir: str | Path) -> list[float]:
    """The factors a data dir was perturbed with (its ``speed_perturb`` file), or ``[]``."""
    marker = Path(data_dir) / "speed_perturb"
    return [float(f) for f in marker.read_text().split()] if marker.is_file() else []


def original_only(text: dict[str, str], factors: list[float]) -> dict[str, str]:
    """``text`` without the perturbed copies (each sentence once, for the LM and tokenizer)."""
    marks = tuple(prefix(f) for f in factors if f != 1.0)
    if not marks:
        return text
    return {utt: words for utt, words in text.items() if not utt.startswith(marks)}


def _through_sox(entry: str, factor: float) -> str:
    """The ``wav.scp`` entry that reads ``entry``'s audio at ``factor`` speed (a pipe).
    ``-R`` (repeatable): sox dithers the resampled 16-bit samples, by default with a new
    random seed each time, so each read (and each fresh preparation's features and
    alignments) would differ; with ``-R`` its seed is fixed."""
    effect = f"sox -R -t wav - -t wav - speed {factor:g} |"
    if entry.rstrip().endswith("|"):
        return f"{entry.rstrip()[:-1].rstrip()} | {effect}"
    return f"sox -R {shlex.quote(entry)} -t wav - speed {factor:g} |"


def speed_perturb(data_dir: str | Path, factors: list[float]) -> DataDir:
    """Replace the utterances of the data dir ``data_dir`` by their speed-perturbed copies.
    The new files are written and validated in a staging dir first, then moved in.
    ``wav.scp``, ``text``, ``utt2spk``, the other ``utt2*`` and the ``spk2*`` files follow
    the renamed ids (``utt2uniq`` names each copy's original, as in Kaldi); in a
    segmented dir the recordings are renamed and read through sox, and the ``segments``
    times divided by the factor (an end of -1 stays -1); features and their stats (and
    ``reco2dur``) are removed, to be recomputed; anything else in the dir is left alone.

    Raises:
        ConfigError: bad factors.
        DataError: the dir is invalid or already perturbed.
    """
    problems = check_factors(factors)
    if problems:
        raise ConfigError("; ".join(problems))
    data_dir = Path(data_dir)
    data = read_data_dir(data_dir)
    assert data.text is not None
    marks = tuple(prefix(f) for f in factors if f != 1.0)
    done = [utt for utt in data.utt_ids if utt.startswith(marks)]
    if done:
        raise DataError(
            f"{data_dir}: utterance '{done[0]}' is already speed-perturbed; prepare the data dir "
            "afresh (run stage 1 from the corpus) instead of perturbing it twice"
        )
    # Other per-utterance and per-speaker files follow the renamed ids (entries of speakers
    # or utterances no longer in the dir are dropped); utt2uniq names each copy's original.
    per_utt = {
        p.name: read_kaldi_map(p)
        for p in sorted(data_dir.glob("utt2*"))
        if p.is_file() and p.name not in ("utt2spk", "utt2uniq", *_DERIVED)
    }
    per_speaker = {
        p.name: read_kaldi_map(p)
        for p in sorted(data_dir.glob("spk2*"))
        if p.name != "spk2utt" and p.is_file()
    }
    out = DataDir(
        wav_scp={},
        utt2spk={},
        text={},
        segments=None if data.segments is None else {},
        reco2file_and_channel=None if data.reco2file_and_channel is None else {},
    )
    assert out.text is not None
    utts: dict[str, dict[str, str]] = {name: {} for name in [*per_utt, "utt2uniq"]}
    speakers: dict[str, dict[str, str]] = {name: {} for name in per_speaker}
    for factor in sorted(factors):
        mark = prefix(factor)
        # wav.scp lists recordings in a segmented dir, utterances otherwise.
        for reco, entry in data.wav_scp.items():
            out.wav_scp[mark + reco] = entry if factor == 1.0 else _through_sox(entry, factor)
        if data.reco2file_and_channel is not None:
            assert out.reco2file_and_channel is not None
            for reco, value in data.reco2file_and_channel.items():
                out.reco2file_and_channel[mark + reco] = value
        for utt, spk in data.utt2spk.items():
            new = mark + utt
            out.utt2spk[new] = mark + spk
            out.text[new] = data.text[utt]
            if data.segments is not None:
                assert out.segments is not None
                out.segments[new] = _scaled(data.segments[utt], mark, factor)
            utts["utt2uniq"][new] = utt
            for name, mapping in per_utt.items():
                if utt in mapping:
                    utts[name][new] = mapping[utt]
        for name, mapping in per_speaker.items():
            speakers[name].update({mark + spk: mapping[spk] for spk in data.spk2utt if spk in mapping})
    out.wav_scp, out.utt2spk, out.text = (
        dict(sorted(m.items())) for m in (out.wav_scp, out.utt2spk, out.text)
    )
    if out.segments is not None:
        out.segments = dict(sorted(out.segments.items()))
    if out.reco2file_and_channel is not None:
        out.reco2file_and_channel = dict(sorted(out.reco2file_and_channel.items()))
    staging = data_dir.with_name(f".{data_dir.name}.perturbing")
    shutil.rmtree(staging, ignore_errors=True)
    write_data_dir(staging, out)
    for name, mapping in {**utts, **speakers}.items():
        write_map(staging / name, dict(sorted(mapping.items())))
    (staging / "speed_perturb").write_text(" ".join(f"{f:g}" for f in sorted(factors)) + "\n")
    validate_data_dir(staging)
    # Replace the dir's files, not the dir: it may hold other things (audio, a user's notes).
    for stale in _DERIVED:
        (data_dir / stale).unlink(missing_ok=True)
    for path in sorted(staging.iterdir()):
        path.replace(data_dir / path.name)
    staging.rmdir()
    return out


def _scaled(segment: Segment, mark: str, factor: float) -> Segment:
    """``segment`` in its recording played at ``factor`` speed: times divided by ``factor``
    (to the microsecond, as ``segments`` is written; -1, "to the end", stays -1)."""
    end = -1.0 if segment.end == -1 else round(segment.end / factor, 6)
    return Segment(mark + segment.recording, round(segment.start / factor, 6), end)


#: Files computed from a data dir's audio (features and their stats, durations): the
#: perturbed dir has other utterances, so they go, to be recomputed by the features stage.
_DERIVED = (
    "feats.scp",
    "cmvn.scp",
    "utt2num_frames",
    "utt2dur",
    "reco2dur",
    "feats.yaml",
    "cmvn_global.ark",
    "frame_shift",
)
