"""Pronunciation probabilities from a GMM system's training alignments: Kaldi's
``steps/get_prons.sh`` and ``utils/dict_dir_add_pronprobs.sh --max-normalize true``.

Each training utterance's alignment is read as phones (where each phone starts, from its
transition-ids) and spelled as its transcript's words
(:func:`~asrkit.decoding.word_align.spell_words`): which of a word's pronunciations the
aligner chose. The counts, plus one each, divided by the word's largest, are the
probabilities: the likeliest pronunciation keeps 1 (a word with many variants is not
penalised as a whole) and a variant the training data never chose costs ``log(c + 1)``
against it. A word the training transcripts lack keeps 1 for every pronunciation.

L carries them as costs (:func:`~asrkit.gmm.lang.prepare_lang`'s ``pron_probs``); the
decoding graphs are built from that lang dir, while the GMMs keep training on the plain
one, as Kaldi's recipes decode with ``data/lang`` after training on ``data/lang_nosp``.
Kaldi's silence probabilities (the same paper, Chen et al. 2015) are not estimated: a
word-dependent probability of silence after each word changed no WER on speechocean762's
dev set (docs/hybrid.md).
"""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from asrkit.data.io import atomic_write
from asrkit.decoding.word_align import WordAligner, spell_words
from asrkit.errors import DataError
from asrkit.gmm.lang import Lang, load_lang, prepare_lang
from asrkit.targets.alignments import read_alignments

log = logging.getLogger(__name__)

__all__ = ["PRON_COUNTS", "count_pronunciations", "lang_with_pron_probs", "pron_probs", "read_pron_counts"]

#: The counts a lang dir with pronunciation probabilities was made from (Kaldi's
#: ``pron_counts_nowb.txt``: ``count word phone ...`` per line).
PRON_COUNTS = "pron_counts.txt"

Pron = tuple[str, tuple[str, ...]]


def count_pronunciations(
    aligner: WordAligner,
    alignments: Mapping[str, np.ndarray],
    texts: Mapping[str, Sequence[str]],
    *,
    oov: str = "",
) -> tuple[Counter[Pron], int]:
    """How often each ``(word, phones)`` was chosen by the transition-id ``alignments`` of
    the utterances in ``texts`` (utterance -> words), and how many of those utterances had
    no alignment or one that does not spell their words (left out, as Kaldi's
    ``ali-to-prons`` leaves them)."""
    counts: Counter[Pron] = Counter()
    missed = 0
    for utt, words in texts.items():
        alignment = alignments.get(utt)
        spelled = None
        if alignment is not None:
            phones = aligner.phone_spans(alignment)
            spelled = spell_words(words, phones, aligner.prons, silence=aligner.silence, oov=oov)
        if spelled is None:
            missed += 1
            continue
        for word, pron, _, _ in spelled:
            counts[(word if word in aligner.prons else oov, pron)] += 1
    return counts, missed


def pron_probs(
    lexicon: Mapping[str, Sequence[Sequence[str]]], counts: Mapping[Pron, int], *, smoothing: float = 1.0
) -> dict[Pron, float]:
    """Each pronunciation's ``(count + smoothing) / max over the word's (count + smoothing)``."""
    if smoothing <= 0:
        raise DataError(f"pronunciation count smoothing {smoothing}: must be > 0")
    probs: dict[Pron, float] = {}
    for word, prons in lexicon.items():
        smoothed = {tuple(p): counts.get((word, tuple(p)), 0) + smoothing for p in prons}
        top = max(smoothed.values())
        for pron, value in smoothed.items():
            probs[(word, pron)] = value / top
    return probs


def read_pron_counts(path: str | Path) -> Counter[Pron]:
    """A ``count word phone ...`` file (:data:`PRON_COUNTS`)."""
    counts: Counter[Pron] = Counter()
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split()
        if len(fields) < 3 or not fields[0].isdigit():
            raise DataError(f"{path}:{lineno}: not 'count word phone ...': {line!r}")
        counts[(fields[1], tuple(fields[2:]))] += int(fields[0])
    return counts


def lang_with_pron_probs(
    lang_dir: str | Path,
    system_dir: str | Path,
    ali_dir: str | Path,
    texts: Mapping[str, Sequence[str]],
    out_dir: str | Path,
) -> Lang:
    """``lang_dir`` again in ``out_dir``, with the pronunciation probabilities of the
    utterances ``texts`` (utterance -> words) as ``system_dir``'s alignments in ``ali_dir``
    spell them; the counts are kept beside it (:data:`PRON_COUNTS`)."""
    lang_dir, ali_dir, out_dir = Path(lang_dir), Path(ali_dir), Path(out_dir)
    lang = load_lang(lang_dir)
    aligner = WordAligner.from_dirs(lang_dir, system_dir, acoustic_scale=0.1)
    oov_file = lang_dir / "oov.txt"
    oov = oov_file.read_text(encoding="utf-8").strip() if oov_file.is_file() else ""
    counts, missed = count_pronunciations(
        aligner, read_alignments(str(ali_dir), labels="transition"), texts, oov=oov
    )
    if not counts:
        raise DataError(
            f"{ali_dir}: none of the {len(texts)} utterances could be spelled from its alignments; "
            f"are they {system_dir}'s alignments of this data?"
        )
    lexicon = aligner.prons
    probs = pron_probs(lexicon, counts)
    new = prepare_lang(
        lexicon, out_dir, silence_phone=lang.phone_names[lang.silence[0]], oov_word=oov, pron_probs=probs
    )
    for name in ("phones.txt", "words.txt"):
        if (out_dir / name).read_bytes() != (lang_dir / name).read_bytes():
            raise DataError(
                f"{out_dir / name} differs from {lang_dir / name}: the lexicon read back from "
                f"{lang_dir / 'lexicon.txt'} does not make the same lang dir; make {lang_dir} again (stage 4)"
            )
    shutil.copy2(lang_dir / "topo", out_dir / "topo")  # the same HMMs as the lang trained with
    rows = sorted(counts.items(), key=lambda item: (item[0][0], -item[1], item[0][1]))
    table = "".join(f"{n} {w} {' '.join(p)}\n" for (w, p), n in rows)
    atomic_write(out_dir / PRON_COUNTS, table)
    below = sum(1 for v in probs.values() if v < 1.0)
    log.info(
        "%s: pronunciation probabilities from %d words of %d utterances (%d left out): %d of %d "
        "pronunciations below 1",
        out_dir,
        sum(counts.values()),
        len(texts) - missed,
        missed,
        below,
        len(probs),
    )
    return new
