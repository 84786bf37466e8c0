"""Phone units from a pronunciation lexicon, for CTC (``tokenizer=phone``).

A transcript becomes the phones of its words, each word preceded by the word-boundary
unit ``▁`` — the layout of a sentencepiece char model, so beam search spells and decodes
phone models the way it does character ones. Training uses each word's first listed
pronunciation; the decoding lexicon lists every pronunciation (Kaldi-style alternatives).
Stress digits of CMU phones (``AH0``/``AH1``) are dropped unless asked for. A word
without a pronunciation (a dev word the training lexicon lacks) is encoded as the unit
``<unk>``, as Kaldi maps out-of-vocabulary words to a spoken-noise phone; every training
word must have a pronunciation.

A trained phone tokenizer is a directory holding ``lexicon.txt`` (every word of the
source lexicon with its pronunciations in the model's units, the file that marks the
directory as a phone tokenizer), ``units.txt`` (``unit id`` lines, ``<blank> 0`` first)
and ``words.txt`` (the training vocabulary, one word per line, sorted). Greedy decoding
maps each boundary-delimited phone group back to a word: of the words sharing that
pronunciation, the one most frequent in training (then the first in C order); a group
that is no word's pronunciation is ``<unk>``.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from asrkit.data.datadir import iter_kaldi_map
from asrkit.data.io import atomic_write
from asrkit.errors import ConfigError, DataError

log = logging.getLogger(__name__)

BOUNDARY = "\u2581"
UNK = "<unk>"
LEXICON = "lexicon.txt"
_STRESS = re.compile(r"(?<=[A-Z])[012]$")
_ALTERNATIVE = re.compile(r"\(\d+\)$")  # CMU Sphinx marks alternatives WORD(2)


def base_word(entry: str) -> str:
    """A lexicon entry's word: ``WORD(2)`` (a CMU Sphinx alternative) is ``WORD``."""
    return _ALTERNATIVE.sub("", entry)


def read_pronunciations(path: str | Path, *, keep_stress: bool = False) -> dict[str, list[tuple[str, ...]]]:
    """``word -> [pronunciation, ...]`` of a Kaldi/CMU lexicon (``WORD p1 p2 ...`` per line,
    space or TAB separated, a word on several lines for alternatives — also as CMU Sphinx
    dictionaries write them, ``WORD(2)``), in file order.

    Raises:
        DataError: missing file, or a line without phones (file and line named). Phones
            that differ only in case are warned about.
    """
    prons: dict[str, list[tuple[str, ...]]] = {}
    first_seen: dict[str, tuple[str, int, str]] = {}  # phone folded to upper case -> (phone, line, word)
    warned: set[tuple[str, str]] = set()
    for lineno, entry, value in iter_kaldi_map(path, allow_empty_value=True, check_sorted=False):
        word = base_word(entry)
        phones = tuple(p if keep_stress else _STRESS.sub("", p) for p in value.split())
        if not phones:
            raise DataError(
                f"{path}:{lineno}: word '{word}' has no phones; give its pronunciation or remove the line"
            )
        if BOUNDARY in phones or UNK in phones:
            raise DataError(f"{path}:{lineno}: word '{word}' uses a reserved unit ({BOUNDARY!r} or {UNK})")
        for phone in phones:
            # 'ah' beside 'AH' becomes a phone of its own, trained on a few words: a typo in
            # an English lexicon (SAMPA's 'e' and 'E' are two phones: a warning, not an error).
            seen = first_seen.setdefault(phone.upper(), (phone, lineno, word))
            if seen[0] != phone and (seen[0], phone) not in warned:
                warned.add((seen[0], phone))
                log.warning(
                    "%s:%d: word '%s' has phone '%s', and line %d ('%s') has '%s': two phones that "
                    "differ only in case (a typo, unless the phone set means it, as SAMPA does)",
                    path,
                    lineno,
                    word,
                    phone,
                    seen[1],
                    seen[2],
                    seen[0],
                )
        alternatives = prons.setdefault(word, [])
        if phones not in alternatives:
            alternatives.append(phones)
    return prons


class PhoneUnits:
    """The CTC units of a phone tokenizer directory (see the module docstring).

    Args:
        model_dir: a directory written by :func:`train_phone_units`.
    """

    def __init__(self, model_dir: str | Path) -> None:
        self.model_dir = Path(model_dir)
        path = self.model_dir / LEXICON
        if not path.is_file():
            raise DataError(f"{path}: phone lexicon not found; run the tokenizer stage first")
        self.prons = read_pronunciations(path, keep_stress=True)  # already in model units
        units = iter_kaldi_map(self.model_dir / "units.txt", check_sorted=False)
        self._units = [unit for _, unit, _ in units]
        self._ids = {unit: i for i, unit in enumerate(self._units)}
        counts = self._training_counts()
        self._word_of: dict[tuple[str, ...], str] = {}
        for word in sorted(self.prons, key=lambda w: (-counts.get(w, 0), w)):
            for pron in self.prons[word]:
                self._word_of.setdefault(pron, word)

    def _training_counts(self) -> dict[str, int]:
        path = self.model_dir / "word_counts.txt"
        if not path.is_file():
            return {}
        return {w: int(c) for _, w, c in iter_kaldi_map(path, check_sorted=False)}

    @property
    def num_tokens(self) -> int:
        return len(self._units) - 1

    def units(self) -> list[str]:
        return list(self._units)

    def encode(self, text: str) -> list[int]:
        """``▁`` and the first pronunciation of each word (``<unk>`` for a word the lexicon
        lacks), as model ids."""
        ids: list[int] = []
        for word in text.split():
            prons = self.prons.get(word)
            ids.append(self._ids[BOUNDARY])
            ids += [self._ids[p] for p in prons[0]] if prons else [self._ids[UNK]]
        return ids

    def spellings(self, word: str) -> list[list[str]]:
        """Every pronunciation of ``word`` in model units (empty when it has none)."""
        return [list(p) for p in self.prons.get(word, [])]

    def decode(self, ids: Iterable[int]) -> str:
        """Words of model ids: each ``▁``-delimited phone group read back through the
        lexicon (``<unk>`` when no word has that pronunciation); blanks skipped."""
        words: list[str] = []
        group: list[str] = []
        for i in ids:
            unit = self._units[int(i)] if int(i) > 0 else None
            if unit is None:
                continue
            if unit == BOUNDARY:
                if group:
                    words.append(self._word_of.get(tuple(group), UNK))
                group = []
            else:
                group.append(unit)
        if group:
            words.append(self._word_of.get(tuple(group), UNK))
        return " ".join(words)


def train_phone_units(
    texts: dict[str, str], out_dir: str | Path, *, lexicon: str, keep_stress: bool
) -> PhoneUnits:
    """Write a phone tokenizer directory for ``texts`` from the lexicon ``lexicon``.

    Raises:
        ConfigError: no lexicon given.
        DataError: training words the lexicon lacks (the count and the first ones).
    """
    if not lexicon:
        raise ConfigError(
            "tokenizer=phone needs tokenizer.lexicon=/path/to/lexicon.txt (WORD phone phone ... per line)"
        )
    prons = read_pronunciations(lexicon, keep_stress=keep_stress)
    counts = Counter(w for line in texts.values() for w in line.split())
    missing = sorted(w for w in counts if w not in prons)
    if missing:
        raise DataError(
            f"{lexicon}: {len(missing)} training word(s) have no pronunciation, first "
            f"{', '.join(missing[:5])}; add them to the lexicon"
        )
    phones = sorted({p for alternatives in prons.values() for pron in alternatives for p in pron})
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(
        out_dir / "units.txt",
        "".join(f"{unit} {i}\n" for i, unit in enumerate(["<blank>", BOUNDARY, UNK, *phones])),
    )
    atomic_write(out_dir / "words.txt", "".join(f"{w}\n" for w in sorted(counts)))
    atomic_write(out_dir / "word_counts.txt", "".join(f"{w} {c}\n" for w, c in sorted(counts.items())))
    # Written last: its presence marks a complete phone tokenizer directory.
    atomic_write(out_dir / LEXICON, "".join(f"{w} {' '.join(p)}\n" for w in sorted(prons) for p in prons[w]))
    return PhoneUnits(out_dir)
