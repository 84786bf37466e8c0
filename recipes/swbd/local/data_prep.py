"""Switchboard-1 (LDC97S62) and Hub5'00 (LDC2002S09 + LDC2002T43) -> Kaldi data dirs.

Loaded by asrkit's stage 1 through ``data.prep_script``; what Kaldi's
``egs/swbd/s5c/local/swbd1_data_prep.sh`` and ``eval2000_data_prep.sh`` do, read from
LDC's layout directly:

* **train** (``data.corpus_dir``: LDC97S62): every ``*.sph`` under it (``swb1_d1/data/
  sw02001.sph`` ...: two channels, 8 kHz mu-law), one recording per side (``sw02001-A``,
  channel 1 through ``sox ... remix 1``); the MS-State transcripts
  (``swb_ms98_transcriptions/NN/NNNN/swNNNNA-ms98-a-trans.text``, under the corpus dir or
  at ``data.corpus_dirs.ms98``) give the segments, as Kaldi's recipe uses them: segments of
  ``[silence]`` alone are dropped, ``[noise]``, ``[vocalized-noise]`` and ``[laughter]`` are
  taken out of the text (Kaldi keeps them as words of noise phones; asrkit's lexicon has
  none yet), ``[laughter-WORD]`` is ``WORD``, a partial word ``TH[E]-`` is ``TH-``. Utterance
  ids are Kaldi's: ``sw02001-A_000098-001156`` (side, start and end in centiseconds); the
  speaker is the conversation side.
* **dev** (``data.dev_set``): the last ``data.num_dev`` conversation sides, held out whole.
* **eval2000** (``data.corpus_dirs.eval2000_audio``: LDC2002S09's ``hub5e_00``, and
  ``data.corpus_dirs.eval2000_text``: LDC2002T43): ``english/*.sph``; the segments are the
  STM's scored segments (``reference/hub5e00.english.000405.stm``; Kaldi reads the same
  times from ``hub5e_00.pem``), their text the STM's without optionally deletable words
  and with an alternation's first choice; the STM and the GLM
  (``reference/en20000405_hub5.glm``) are copied into the data dir as ``stm`` and ``glm``,
  with ``stm_subsets`` (``swbd sw_``, ``callhm en_``), so the decode stages score the set as
  ``hubscr.pl`` does, overall and per subset.
* **lexicon** (``data_root/local/lexicon.txt``): MS-State's ``sw-ms98-dict.text`` when the
  transcripts have it, else CMUdict's pronunciations (stress dropped) of the training words.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from asrkit.data import DataDir, write_data_dir
from asrkit.data.datadir import Segment
from asrkit.data.io import atomic_write
from asrkit.errors import DataError

log = logging.getLogger(__name__)

#: A side of a conversation read as one channel (sox reads SPHERE, mu-law included; LDC's
#: shorten-compressed files need sph2pipe instead: ``sph2pipe -f wav -p -c N FILE |``).
SIDE_PIPE = "sox -t sph {path} -t wav -e signed-integer -b 16 - remix {channel} |"
NOISE = {"[noise]", "[vocalized-noise]", "[laughter]", "[silence]"}
STM_FILE = "hub5e00.english.000405.stm"
GLM_FILE = "en20000405_hub5.glm"
SUBSETS = "swbd sw_\ncallhm en_\n"


def corpus_present(corpus_dir: Path) -> bool:
    """True when ``corpus_dir`` holds Switchboard conversations (``*.sph``)."""
    return Path(corpus_dir).is_dir() and next(Path(corpus_dir).rglob("sw0*.sph"), None) is not None


def map_word(word: str) -> str | None:
    """One MS-State word as Kaldi's recipe reads it (None: taken out)."""
    if word in NOISE:
        return None
    m = re.fullmatch(r"\[laughter-(.+)\]", word)
    if m:
        return m.group(1)
    # partial words: th[e]- -> th-, -[th]at -> -at
    word = re.sub(r"\[[^\]]*\]-$", "-", word)
    return re.sub(r"^-\[[^\]]*\]", "-", word)


def _ms98_dir(corpus_dir: Path, corpus_dirs: dict[str, Path]) -> Path:
    path = corpus_dirs.get("ms98", corpus_dir / "swb_ms98_transcriptions")
    if not path.is_dir():
        raise DataError(
            f"{path}: the MS-State transcripts (swb_ms98_transcriptions) are not here; unpack "
            "them into the corpus dir or set data.corpus_dirs.ms98"
        )
    return path


def _side_id(conv: str, side: str) -> str:
    return f"sw0{conv}-{side}"


def _utt_id(recording: str, start: float, end: float) -> str:
    return f"{recording}_{round(start * 100):06d}-{round(end * 100):06d}"


def read_train(corpus_dir: Path, corpus_dirs: dict[str, Path]) -> DataDir:
    """Every transcribed conversation side of LDC97S62 as one segmented data dir."""
    audio = {p.stem.lower(): p.resolve() for p in corpus_dir.rglob("*.sph")}
    wav_scp, text, utt2spk, segments, r2fc = {}, {}, {}, {}, {}
    for trans in sorted(_ms98_dir(corpus_dir, corpus_dirs).rglob("*-trans.text")):
        m = re.fullmatch(r"sw(\d{4})([AB])-ms98-a-trans", trans.stem.replace(".text", ""))
        if m is None:
            continue
        conv, side = m.groups()
        sph = audio.get(f"sw0{conv}")
        if sph is None:
            raise DataError(
                f"{trans}: no audio sw0{conv}.sph under {corpus_dir}; restore it or remove the transcript"
            )
        recording = _side_id(conv, side)
        wav_scp[recording] = SIDE_PIPE.format(path=sph, channel=1 if side == "A" else 2)
        r2fc[recording] = f"sw0{conv} {side}"
        for number, line in enumerate(trans.read_text(encoding="utf-8").splitlines(), 1):
            fields = line.split()
            if len(fields) < 4:
                continue
            try:
                start, end = float(fields[1]), float(fields[2])
            except ValueError:
                raise DataError(f"{trans}:{number}: times {fields[1:3]} are not numbers; fix it") from None
            words = [w for w in (map_word(x) for x in fields[3:]) if w]
            if not words or end <= start:
                continue
            utt = _utt_id(recording, start, end)
            text[utt] = " ".join(words).upper()
            utt2spk[utt] = recording
            segments[utt] = Segment(recording, start, end)
    if not text:
        raise DataError(f"{corpus_dir}: no transcribed speech found; check the MS-State transcripts' layout")
    return DataDir(
        wav_scp=dict(sorted(wav_scp.items())),
        utt2spk=dict(sorted(utt2spk.items())),
        text=dict(sorted(text.items())),
        segments=dict(sorted(segments.items())),
        reco2file_and_channel=dict(sorted(r2fc.items())),
    )


def _stm_text(words: str) -> str:
    """An STM transcript as training-style text: optional words out, an alternation's first
    choice in."""
    words = re.sub(r"\{([^}]*)\}", lambda m: m.group(1).split("/")[0], words)
    kept = [w for w in words.split() if not (w.startswith("(") and w.endswith(")")) and w != "@"]
    return " ".join(kept).upper()


def read_eval2000(audio_dir: Path, text_dir: Path) -> tuple[DataDir, Path, Path]:
    """eval2000's scored segments as a segmented data dir, with its STM and GLM paths."""
    reference = text_dir / "2000_hub5_eng_eval_tr" / "reference"
    if not reference.is_dir():
        reference = text_dir / "reference"
    stm, glm = reference / STM_FILE, reference / GLM_FILE
    for path in (stm, glm):
        if not path.is_file():
            raise DataError(f"{path}: not found; point data.corpus_dirs.eval2000_text at LDC2002T43")
    english = audio_dir / "english"
    wav_scp, text, utt2spk, segments, r2fc = {}, {}, {}, {}, {}
    for number, line in enumerate(stm.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith(";;"):
            continue
        fields = line.split()
        file, channel = fields[0], fields[1]
        start, end = float(fields[3]), float(fields[4])
        words = " ".join(fields[6:] if fields[5].startswith("<") else fields[5:])
        if words.upper() == "IGNORE_TIME_SEGMENT_IN_SCORING":
            continue
        transcript = _stm_text(words)
        if not transcript:
            continue
        sph = english / f"{file}.sph"
        if not sph.is_file():
            raise DataError(
                f"{stm}:{number}: no audio {sph}; point data.corpus_dirs.eval2000_audio at hub5e_00"
            )
        recording = f"{file}-{channel}"
        wav_scp[recording] = SIDE_PIPE.format(path=sph.resolve(), channel=1 if channel == "A" else 2)
        r2fc[recording] = f"{file} {channel}"
        utt = _utt_id(recording, start, end)
        text[utt], utt2spk[utt], segments[utt] = transcript, recording, Segment(recording, start, end)
    data = DataDir(
        wav_scp=dict(sorted(wav_scp.items())),
        utt2spk=dict(sorted(utt2spk.items())),
        text=dict(sorted(text.items())),
        segments=dict(sorted(segments.items())),
        reco2file_and_channel=dict(sorted(r2fc.items())),
    )
    return data, stm, glm


def write_lexicon(corpus_dir: Path, corpus_dirs: dict[str, Path], words: set[str], target: Path) -> None:
    """MS-State's lexicon when present, else CMUdict's pronunciations of ``words``."""
    ms98 = _ms98_dir(corpus_dir, corpus_dirs) / "sw-ms98-dict.text"
    if ms98.is_file():
        text = ms98.read_text(encoding="utf-8")
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
        atomic_write(target, "".join(f"{ln.upper()}\n" for ln in lines))
        return
    from asrkit.lm.vocab import cmu_pronunciations

    phones = {
        "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY", "F", "G", "HH", "IH",
        "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P", "R", "S", "SH", "T", "TH", "UH", "UW", "V",
        "W", "Y", "Z", "ZH",
    }  # fmt: skip
    prons = cmu_pronunciations(sorted(words), phones, keep_stress=False)
    missing = sorted(words - set(prons))
    if missing:
        raise DataError(
            f"{len(missing)} training word(s) have no CMUdict pronunciation, first {', '.join(missing[:5])}; "
            "give MS-State's sw-ms98-dict.text with the transcripts"
        )
    atomic_write(target, "".join(f"{w} {' '.join(p)}\n" for w in sorted(prons) for p in prons[w]))


def prepare(
    corpus_dir: Path,
    data_root: Path,
    *,
    num_dev: int,
    train_set: str = "train",
    dev_set: str = "dev",
    test_sets: tuple[str, ...] | list[str] = ("eval2000",),
    corpus_dirs: dict[str, Path] | None = None,
) -> None:
    corpus_dir, data_root = Path(corpus_dir), Path(data_root)
    corpus_dirs = dict(corpus_dirs or {})
    full = read_train(corpus_dir, corpus_dirs)
    sides = sorted(full.spk2utt)
    if not 0 < num_dev < len(sides):
        raise DataError(f"data.num_dev={num_dev}: hold out between 1 and {len(sides) - 1} conversation sides")
    held = set(sides[-num_dev:])
    dev = [u for u in full.utt_ids if full.utt2spk[u] in held]
    train = [u for u in full.utt_ids if full.utt2spk[u] not in held]
    write_data_dir(data_root / dev_set, full.subset(dev))
    write_data_dir(data_root / train_set, full.subset(train))
    words = {w for u in train for w in (full.text or {})[u].split()}
    write_lexicon(corpus_dir, corpus_dirs, words, data_root / "local" / "lexicon.txt")
    for name in test_sets:
        if name != "eval2000":
            raise DataError(f"data.test_sets: {name!r} is not a test set of this recipe (eval2000)")
        for key in ("eval2000_audio", "eval2000_text"):
            if key not in corpus_dirs:
                raise DataError(f"data.corpus_dirs.{key} is not set; point it at LDC's Hub5'00 distribution")
        data, stm, glm = read_eval2000(corpus_dirs["eval2000_audio"], corpus_dirs["eval2000_text"])
        write_data_dir(data_root / name, data)
        shutil.copyfile(stm, data_root / name / "stm")
        shutil.copyfile(glm, data_root / name / "glm")
        atomic_write(data_root / name / "stm_subsets", SUBSETS)
    log.info(
        "%s: %d utterances from %d conversation sides (%d held out as %s)",
        corpus_dir,
        len(full.utt_ids),
        len(sides),
        num_dev,
        dev_set,
    )
