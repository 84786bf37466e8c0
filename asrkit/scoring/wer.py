"""Word and character error rates of Kaldi text files, with sclite-format outputs."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from asrkit.data.datadir import read_kaldi_map
from asrkit.data.io import atomic_write
from asrkit.errors import DataError
from asrkit.scoring.align import Counts, Op
from asrkit.scoring.align import align as align_with

log = logging.getLogger(__name__)

#: Kaldi's file of the best point of a weight sweep (in the tuned set's decode folder).
BEST_WER_FILE = "best_wer"


@dataclass
class ErrorCounts:
    """Error counts of one alignment or a sum of them."""

    ref_words: int = 0
    corr: int = 0
    sub: int = 0
    dele: int = 0
    ins: int = 0
    sentences: int = 0
    sentence_errors: int = 0

    @property
    def errors(self) -> int:
        return self.sub + self.dele + self.ins

    @property
    def wer(self) -> float:
        """Percent errors per reference token (errors x 100 when there are none)."""
        return 100.0 * self.errors / max(self.ref_words, 1)

    def add(self, other: ErrorCounts) -> None:
        self.ref_words += other.ref_words
        self.corr += other.corr
        self.sub += other.sub
        self.dele += other.dele
        self.ins += other.ins
        self.sentences += other.sentences
        self.sentence_errors += other.sentence_errors

    def kaldi_line(self, label: str = "WER") -> str:
        """Kaldi's summary line, e.g. ``%WER 7.42 [ 57 / 773, 5 ins, 9 del, 43 sub ]``."""
        return (
            f"%{label} {self.wer:.2f} [ {self.errors} / {self.ref_words}, {self.ins} ins, "
            f"{self.dele} del, {self.sub} sub ]"
        )

    @classmethod
    def counted(cls, counts: Counts) -> ErrorCounts:
        """One sentence's counts from its alignment's ``(corr, sub, dele, ins)``."""
        corr, sub, dele, ins = counts
        return cls(
            ref_words=corr + sub + dele,
            corr=corr,
            sub=sub,
            dele=dele,
            ins=ins,
            sentences=1,
            sentence_errors=int(sub + dele + ins > 0),
        )

    @classmethod
    def of(cls, ops: Iterable[Op]) -> ErrorCounts:
        counts = cls(sentences=1)
        for op, ref, _hyp in ops:
            counts.ref_words += ref is not None
            counts.corr += op == "C"
            counts.sub += op == "S"
            counts.dele += op == "D"
            counts.ins += op == "I"
        counts.sentence_errors = int(counts.errors > 0)
        return counts


@dataclass
class ScoreResult:
    """Everything :func:`score_texts` measured."""

    words: ErrorCounts
    chars: ErrorCounts
    per_utt: dict[str, list[Op]]
    per_spk: dict[str, ErrorCounts]
    ref: dict[str, list[str]]
    hyp: dict[str, list[str]]
    missing: list[str] = field(default_factory=list)
    align: str = "sclite"
    #: Each utterance's word counts (those of ``per_utt``).
    utt_counts: dict[str, ErrorCounts] = field(default_factory=dict)


def speaker_of(utt: str) -> str:
    """Kaldi utterance ids start with the speaker id: the part before the first ``-``."""
    return utt.split("-", 1)[0]


def read_text(path: str | Path) -> dict[str, list[str]]:
    """Read a Kaldi text file (``utt word word ...``; a line may hold only the id).

    Raises:
        DataError: missing file, blank line or duplicate id (file, line and id named).
    """
    entries = read_kaldi_map(path, allow_empty_value=True, check_sorted=False)
    return {utt: words.split() for utt, words in entries.items()}


def score_texts(
    ref: dict[str, list[str]], hyp: dict[str, list[str]], *, align: str = "sclite", hyp_name: str = "HYP"
) -> ScoreResult:
    """Score hypotheses against references.

    Utterances of ``ref`` absent from ``hyp`` count as all deleted (with a
    warning); ids in ``hyp`` absent from ``ref`` are an error.
    """
    extra = [utt for utt in hyp if utt not in ref]
    if extra:
        raise DataError(
            f"{hyp_name}: {len(extra)} utterance(s) not in the reference, first "
            f"'{extra[0]}'; score against the matching reference text"
        )
    missing = [utt for utt in ref if utt not in hyp]
    if missing:
        log.warning(
            "%d reference utterance(s) have no hypothesis and count as deleted, first: %s",
            len(missing),
            ", ".join(missing[:5]),
        )
    words, chars = ErrorCounts(), ErrorCounts()
    per_utt: dict[str, list[Op]] = {}
    per_spk: dict[str, ErrorCounts] = {}
    utt_counts: dict[str, ErrorCounts] = {}
    for utt, ref_words in ref.items():
        hyp_words = hyp.get(utt, [])
        counted, ops = align_with(ref_words, hyp_words, weights=align)
        assert ops is not None
        per_utt[utt] = ops
        counts = utt_counts[utt] = ErrorCounts.counted(counted)
        words.add(counts)
        per_spk.setdefault(speaker_of(utt), ErrorCounts()).add(counts)
        chars.add(
            ErrorCounts.counted(
                align_with("".join(ref_words), "".join(hyp_words), weights=align, ops=False)[0]
            )
        )
    return ScoreResult(
        words,
        chars,
        per_utt,
        dict(sorted(per_spk.items())),
        ref,
        {utt: hyp.get(utt, []) for utt in ref},
        missing,
        align,
        utt_counts,
    )


def _trn(texts: dict[str, list[str]]) -> str:
    # sclite's trn ids are (speaker-utterance); Kaldi ids already start with the speaker.
    return "".join(f"{' '.join(words)} ({utt})\n" for utt, words in texts.items())


def _per_utt(result: ScoreResult) -> str:
    lines = []
    for utt, ops in result.per_utt.items():
        # Columns as wide as the longer word (*** for a missing one); built with map() over
        # builtins, as this runs once per word of the test set.
        kinds = [op for op, _, _ in ops]
        refs = [r or "***" for _, r, _ in ops]
        hyps = [h or "***" for _, _, h in ops]
        width = list(map(max, map(len, refs), map(len, hyps)))
        c = result.utt_counts.get(utt) or ErrorCounts.of(ops)
        lines += [
            f"{utt} ref  {' '.join(map(str.ljust, refs, width))}".rstrip(),
            f"{utt} hyp  {' '.join(map(str.ljust, hyps, width))}".rstrip(),
            f"{utt} op   {' '.join(map(str.ljust, kinds, width))}".rstrip(),
            f"{utt} #csid {c.corr} {c.sub} {c.ins} {c.dele}",
        ]
    return "\n".join(lines) + "\n"


def _per_spk(result: ScoreResult) -> str:
    header = (
        f"{'SPEAKER':<12} {'#utts':>6} {'#words':>7} {'corr':>6} {'sub':>5} {'del':>5} "
        f"{'ins':>5} {'err':>5} {'WER%':>7}"
    )
    rows = [header, "-" * len(header)]
    for spk, c in [*result.per_spk.items(), ("SUM", result.words)]:
        rows.append(
            f"{spk:<12} {c.sentences:>6} {c.ref_words:>7} {c.corr:>6} {c.sub:>5} "
            f"{c.dele:>5} {c.ins:>5} {c.errors:>5} {c.wer:>7.2f}"
        )
    return "\n".join(rows) + "\n"


def per_group(result: ScoreResult, spk2group: dict[str, str]) -> dict[str, tuple[int, ErrorCounts]]:
    """``group -> (speakers, summed counts)`` of the scored speakers, grouped by
    ``spk2group`` (a data dir's ``spk2group``: e.g. ``child``/``adult``).

    Raises:
        DataError: a scored speaker has no group.
    """
    missing = [spk for spk in result.per_spk if spk not in spk2group]
    if missing:
        raise DataError(
            f"spk2group: no group for speaker '{missing[0]}' ({len(missing)} "
            "speaker(s) in all); add them or remove spk2group"
        )
    groups: dict[str, tuple[int, ErrorCounts]] = {}
    for spk, counts in result.per_spk.items():
        n, total = groups.get(spk2group[spk], (0, ErrorCounts()))
        total.add(counts)
        groups[spk2group[spk]] = (n + 1, total)
    return dict(sorted(groups.items()))


def _per_group(groups: dict[str, tuple[int, ErrorCounts]], total: ErrorCounts) -> str:
    header = (
        f"{'GROUP':<12} {'#spk':>5} {'#utts':>6} {'#words':>7} {'corr':>6} {'sub':>5} "
        f"{'del':>5} {'ins':>5} {'err':>5} {'WER%':>7}"
    )
    rows = [header, "-" * len(header)]
    speakers = sum(n for n, _ in groups.values())
    for group, (n, c) in [*groups.items(), ("SUM", (speakers, total))]:
        rows.append(
            f"{group:<12} {n:>5} {c.sentences:>6} {c.ref_words:>7} {c.corr:>6} "
            f"{c.sub:>5} {c.dele:>5} {c.ins:>5} {c.errors:>5} {c.wer:>7.2f}"
        )
    return "\n".join(rows) + "\n"


def summary(result: ScoreResult) -> str:
    """The ``%WER``, ``%CER`` and ``%SER`` lines."""
    w = result.words
    ser = 100.0 * w.sentence_errors / max(w.sentences, 1)
    return (
        f"{w.kaldi_line('WER')}\n{result.chars.kaldi_line('CER')}\n"
        f"%SER {ser:.2f} [ {w.sentence_errors} / {w.sentences} ]\n"
    )


def write_scoring_dir(
    result: ScoreResult, out_dir: str | Path, *, spk2group: dict[str, str] | None = None
) -> None:
    """Write ``wer``, ``ref.trn``, ``hyp.trn``, ``per_utt`` and ``per_spk`` atomically, and
    ``per_group`` when ``spk2group`` is given."""
    out_dir = Path(out_dir)
    groups = per_group(result, spk2group) if spk2group is not None else None
    atomic_write(out_dir / "ref.trn", _trn(result.ref))
    atomic_write(out_dir / "hyp.trn", _trn(result.hyp))
    atomic_write(out_dir / "per_utt", _per_utt(result))
    atomic_write(out_dir / "per_spk", _per_spk(result))
    if groups is not None:
        atomic_write(out_dir / "per_group", _per_group(groups, result.words))
    atomic_write(out_dir / "wer", summary(result))


def score_files(
    ref_path: str | Path,
    hyp_path: str | Path,
    *,
    out_dir: str | Path | None = None,
    align: str = "sclite",
    spk2group: str | Path | None = None,
) -> ScoreResult:
    """Score two Kaldi text files; with ``out_dir``, also write the scoring dir (with a
    ``per_group`` table when a ``spk2group`` file is given)."""
    result = score_texts(read_text(ref_path), read_text(hyp_path), align=align, hyp_name=str(hyp_path))
    if out_dir is not None:
        groups = read_kaldi_map(spk2group) if spk2group is not None else None
        write_scoring_dir(result, out_dir, spk2group=groups)
    return result
