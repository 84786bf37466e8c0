"""CMU AN4 -> Kaldi data dirs (``train``, ``train_dev``, ``test``).

Loaded by asrkit's stage 1 through ``data.prep_script``. Accepts both CMU
layouts of the corpus:

* raw: ``wav/<set>/<spk>/<id>.raw`` — headerless 16-bit PCM, 16 kHz, mono,
  **big-endian** (the corpus README says little-endian; that is wrong). These
  become ``sox ... -t wav - |`` pipes in ``wav.scp``, as a Kaldi recipe would.
* sphere: ``wav/<set>/<spk>/<id>.sph`` (CMU's ``an4_sphere.tar.gz``, what Kaldi
  and ESPnet download), read directly.

Utterance ids are ``<spk>-<corpus id>`` (e.g. ``fash-an251-fash-b``) so that they
sort with their speaker, as Kaldi requires. Transcripts lose the ``<s>``/``</s>``
markers. ``train_dev`` is a fixed hold-out: the first ``num_dev`` training
utterances in sorted id order (whole speakers, alphabetically, plus part of
one); ``train`` is the rest.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from asrkit.data import DataDir, write_data_dir
from asrkit.errors import DataError

_SETS = {"train": "an4_train", "test": "an4_test"}
_LINE = re.compile(r"^(?P<words>.*)\((?P<id>[^()\s]+)\)\s*$")
_RAW_PIPE = "sox -t raw -r 16000 -e signed-integer -b 16 -B -c 1 {path} -t wav - |"


def corpus_present(corpus_dir: Path) -> bool:
    """True when ``corpus_dir`` holds AN4's transcripts and audio folder."""
    corpus_dir = Path(corpus_dir)
    return (
        all(
            (corpus_dir / "etc" / f"{stem}.{ext}").is_file()
            for stem in _SETS.values()
            for ext in ("transcription", "fileids")
        )
        and (corpus_dir / "wav").is_dir()
    )


def _read_transcripts(path: Path) -> dict[str, str]:
    texts: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if not match:
            raise DataError(f"{path}:{lineno}: expected 'WORDS (utterance-id)', got {line!r}")
        words = [w for w in match["words"].split() if w not in ("<s>", "</s>", "<sil>")]
        if not words:
            raise DataError(f"{path}:{lineno}: utterance {match['id']} has an empty transcript")
        texts[match["id"]] = " ".join(words)
    return texts


def _read_set(corpus_dir: Path, stem: str) -> DataDir:
    etc = corpus_dir / "etc"
    texts = _read_transcripts(etc / f"{stem}.transcription")
    fileids = [f for f in (etc / f"{stem}.fileids").read_text().split() if f]
    sox_missing = shutil.which("sox") is None
    wav_scp, text, utt2spk = {}, {}, {}
    for fileid in fileids:
        corpus_id = Path(fileid).name
        spk = Path(fileid).parent.name
        if corpus_id not in texts:
            raise DataError(
                f"{etc / (stem + '.transcription')}: no transcript for {corpus_id} "
                f"listed in {stem}.fileids; restore the line"
            )
        raw, sph = corpus_dir / "wav" / f"{fileid}.raw", corpus_dir / "wav" / f"{fileid}.sph"
        if sph.is_file():
            entry = str(sph.resolve())
        elif raw.is_file():
            if sox_missing:
                raise DataError(
                    "sox not found: the raw AN4 layout is read through sox "
                    "(apt-get install sox), or use the sphere layout"
                )
            entry = _RAW_PIPE.format(path=raw.resolve())
        else:
            raise DataError(
                f"utterance {corpus_id}: audio {raw} (or .sph) not found; "
                "restore it or remove it from the fileids list"
            )
        utt = f"{spk}-{corpus_id}"
        wav_scp[utt], text[utt], utt2spk[utt] = entry, texts[corpus_id], spk
    extra = sorted(set(texts) - {Path(f).name for f in fileids})
    if extra:
        raise DataError(
            f"{etc / (stem + '.transcription')}: {len(extra)} transcript(s) without "
            f"audio in {stem}.fileids, first {extra[0]}"
        )
    return DataDir(
        wav_scp=dict(sorted(wav_scp.items())),
        utt2spk=dict(sorted(utt2spk.items())),
        text=dict(sorted(text.items())),
    )


def prepare(
    corpus_dir: Path,
    data_root: Path,
    *,
    num_dev: int,
    train_set: str = "train",
    dev_set: str = "train_dev",
    test_sets: tuple[str, ...] | list[str] = ("test",),
) -> None:
    """Write ``data_root/{train_set,dev_set}`` and, when ``test_sets`` names it, ``test``
    from the corpus."""
    corpus_dir, data_root = Path(corpus_dir), Path(data_root)
    unknown = [name for name in test_sets if name != "test"]
    if unknown:
        raise DataError(
            f"data.test_sets={list(test_sets)}: AN4 has one test set, 'test' "
            f"('{unknown[0]}' is not one); decode other data dirs with "
            "decode.sets=[/path/to/dir]"
        )
    full_train = _read_set(corpus_dir, _SETS["train"])
    if not 0 < num_dev < len(full_train.utt_ids):
        raise DataError(
            f"data.num_dev={num_dev} must be between 1 and "
            f"{len(full_train.utt_ids) - 1} (training utterances found)"
        )
    held_out = full_train.utt_ids[:num_dev]
    write_data_dir(data_root / dev_set, full_train.subset(held_out))
    write_data_dir(data_root / train_set, full_train.subset(full_train.utt_ids[num_dev:]))
    if "test" in test_sets:
        write_data_dir(data_root / "test", _read_set(corpus_dir, _SETS["test"]))
