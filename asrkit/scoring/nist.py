"""NIST STM/CTM scoring, as ``hubscr.pl -l english -h hub5`` scores Hub5'00.

hubscr filters the STM reference and the CTM hypotheses with the GLM (:mod:`.glm`), then
runs ``sclite -r REF stm -h HYP ctm -F -D``. This module does the same in-process:

* **Segments.** Each STM line is a segment (file, channel, speaker, start, end, text);
  segments whose text is ``ignore_time_segment_in_scoring`` are not scored. A CTM word goes
  to the first segment of its file and channel (in time order) that ends after the word's
  midpoint; a word after the last segment goes to the last one. Words that land in an
  ignored segment are dropped; a CTM file or channel that the STM does not have is an error
  (sclite stops on it too).
* **Alignment.** Per segment, the reference is a network: alternations ``{ a / b c / @ }``
  (``@``: nothing) are parallel paths, ``(w)`` an optionally deletable word. The
  hypothesis may hold alternations too (a GLM rule applied to a CTM word). Both are aligned
  by dynamic programming with sclite's weights (substitution 4, insertion 3, deletion 3),
  case-insensitively; sclite's ``-F``: a fragment ``FR-`` (or ``-OG``) matches a word it
  begins (ends) and is an error only when deleted; sclite's ``-D``: an optionally deletable
  word left out counts as correct (and as a reference word).
* **Counts** per segment, summed per speaker and per subset (a file-name prefix, e.g. ``sw_``
  for Switchboard and ``en_`` for CallHome in eval2000).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from asrkit.errors import DataError
from asrkit.scoring.glm import Glm, Rule, filter_text
from asrkit.scoring.wer import ErrorCounts

IGNORE = "IGNORE_TIME_SEGMENT_IN_SCORING"
# sclite's weights (substitution 4, insertion 3, deletion 3) in thousandths, and two that
# sclite's network alignment behaves as if it had, found by scoring ~4,000 random segments
# with alternations, optional words and fragments against sclite 2.4.10 (-F -D): leaving out
# an optionally deletable word costs 2 (so `(uh)` against `x` is a substitution, but `um
# (a)` against `d` substitutes `um` and leaves `(a)` out), a bit more than 2; an empty
# alternative (`@`) costs a little, so that among equally good alignments the one through
# the fewest empty alternatives wins. Two of those segments still differ (ties between
# alternatives of different lengths; tests/unit/test_nist_scoring.py).
SUB, INS, DEL, NULL, OPT_DEL = 4000, 3000, 3000, 2, 2001


@dataclass(frozen=True)
class Word:
    """A word of a network: its text, and whether the reference may leave it out."""

    text: str
    optional: bool = False


#: One position of a transcript: a word, or alternatives (each a list of words; [] is ``@``).
Item = Word | tuple[tuple[Word, ...], ...]


def parse_items(text: str) -> list[Item]:
    """A transcript's items: ``a (uh) { b / c d / @ }`` → word, optional word, alternation.

    Raises:
        ValueError: unbalanced ``{ }`` or a ``/`` outside an alternation.
    """
    tokens = re.sub(r"([{}/])", r" \1 ", text).split()
    items: list[Item] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "{":
            alternatives: list[tuple[Word, ...]] = []
            current: list[Word] = []
            i += 1
            while i < len(tokens) and tokens[i] != "}":
                if tokens[i] == "/":
                    alternatives.append(tuple(current))
                    current = []
                elif tokens[i] == "{":
                    raise ValueError(f"nested alternation in {text!r}")
                elif tokens[i] != "@":
                    current.append(_word(tokens[i]))
                i += 1
            if i == len(tokens):
                raise ValueError(f"alternation without its closing }} in {text!r}")
            alternatives.append(tuple(current))
            items.append(tuple(alternatives))
        elif token in ("}", "/"):
            raise ValueError(f"{token!r} outside an alternation in {text!r}")
        else:
            items.append(_word(token))
        i += 1
    return items


def _word(token: str) -> Word:
    if token.startswith("(") and token.endswith(")") and len(token) > 2:
        return Word(token.strip("()"), optional=True)
    return Word(token)


def words_match(ref: str, hyp: str, *, fragments: bool = True) -> bool:
    """sclite's word match: case-insensitive; with ``fragments``, ``FR-`` matches any word
    beginning ``FR`` and ``-OG`` any word ending ``OG`` (either side may be the fragment)."""
    a, b = ref.upper(), hyp.upper()
    if a == b:
        return True
    if not fragments:
        return False
    for x, y in ((a, b), (b, a)):
        if len(x) > 1 and x.endswith("-") and y.startswith(x[:-1]):
            return True
        if len(x) > 1 and x.startswith("-") and y.endswith(x[1:]):
            return True
    return False


@dataclass
class Network:
    """A word network: nodes ``0 .. size-1`` in topological order, arcs by their end node.

    ``arcs_into[n]`` lists ``(from_node, word or None)``; ``None`` is an empty path (``@``).
    """

    size: int = 1
    arcs_into: list[list[tuple[int, Word | None]]] = field(default_factory=lambda: [[]])

    def _node(self) -> int:
        self.arcs_into.append([])
        self.size += 1
        return self.size - 1

    @classmethod
    def of(cls, items: Sequence[Item]) -> Network:
        net = cls()
        at = 0
        for item in items:
            if isinstance(item, Word):
                end = net._node()
                net.arcs_into[end].append((at, item))
                at = end
                continue
            ends: list[tuple[int, Word | None]] = []
            for alternative in item:
                if not alternative:
                    ends.append((at, None))
                    continue
                node = at
                for word in alternative[:-1]:
                    nxt = net._node()
                    net.arcs_into[nxt].append((node, word))
                    node = nxt
                ends.append((node, alternative[-1]))
            end = net._node()
            net.arcs_into[end].extend(ends)
            at = end
        return net


#: An aligned pair: (op, ref word, hyp word); op is C, S, D, I.
NistOp = tuple[str, str | None, str | None]


def align_networks(ref: Network, hyp: Network, *, fragments: bool = True) -> list[NistOp]:
    """The cheapest alignment of two networks (sclite's weights), as operations in order.

    A deleted optional reference word is ``("C", word, None)``, an unmatched optional
    hypothesis word ``("C", word, word)`` (sclite's counts); an empty alternative (``@``)
    adds nothing. Ties go, walking back from the end, to a match or substitution,
    then an insertion, then a deletion (as :func:`asrkit.scoring.align.align_words`), and
    among alternatives to the one written first.
    """
    inf = math.inf
    cost = [[inf] * hyp.size for _ in range(ref.size)]
    cost[0][0] = 0.0

    def pair_cost(r: Word, h: Word) -> int:
        return 0 if words_match(r.text, h.text, fragments=fragments) else SUB

    for i in range(ref.size):
        row = cost[i]
        for j in range(hyp.size):
            best = row[j]
            for ri, rw in ref.arcs_into[i]:
                if rw is None:
                    best = min(best, cost[ri][j] + NULL)
                    continue
                for hj, hw in hyp.arcs_into[j]:
                    if hw is not None:
                        best = min(best, cost[ri][hj] + pair_cost(rw, hw))
                best = min(best, cost[ri][j] + (OPT_DEL if rw.optional else DEL))
            for hj, hw in hyp.arcs_into[j]:
                best = min(best, row[hj] + _ins_cost(hw))
            row[j] = best
    ops: list[NistOp] = []
    i, j = ref.size - 1, hyp.size - 1
    while i > 0 or j > 0:
        here = cost[i][j]
        step = _diagonal(ref, hyp, cost, i, j, here, pair_cost)
        if step is not None:
            (i, j), op = step
            ops.append(op)
            continue
        moved = False
        for hj, hw in hyp.arcs_into[j]:
            if here == cost[i][hj] + _ins_cost(hw):
                if hw is not None:
                    ops.append(("C", hw.text, hw.text) if hw.optional else ("I", None, hw.text))
                j, moved = hj, True
                break
        if moved:
            continue
        for ri, rw in ref.arcs_into[i]:
            if rw is None and here == cost[ri][j] + NULL:
                i = ri
                break
            if rw is not None and here == cost[ri][j] + (OPT_DEL if rw.optional else DEL):
                ops.append(("C" if rw.optional else "D", rw.text, None))
                i = ri
                break
        else:  # pragma: no cover - the forward pass reached (i, j) by one of the moves above
            raise AssertionError("alignment traceback lost its way")
    ops.reverse()
    return ops


def _ins_cost(word: Word | None) -> int:
    """An empty hypothesis path, an optionally deletable hypothesis word left unmatched
    (which sclite counts as a correct word), or an insertion."""
    if word is None:
        return NULL
    return OPT_DEL if word.optional else INS


def _diagonal(
    ref: Network,
    hyp: Network,
    cost: list[list[float]],
    i: int,
    j: int,
    here: float,
    pair_cost: Callable[[Word, Word], int],
) -> tuple[tuple[int, int], NistOp] | None:
    for ri, rw in ref.arcs_into[i]:
        if rw is None:
            continue
        for hj, hw in hyp.arcs_into[j]:
            if hw is None:
                continue
            c = pair_cost(rw, hw)
            if here == cost[ri][hj] + c:
                return (ri, hj), ("C" if c == 0 else "S", rw.text, hw.text)
    return None


def counts_of(ops: Iterable[NistOp]) -> ErrorCounts:
    """One segment's counts (reference words: correct + substituted + deleted)."""
    return ErrorCounts.of(ops)


# ---------------------------------------------------------------------------- STM and CTM


@dataclass
class Segment:
    """One STM line."""

    file: str
    channel: str
    speaker: str
    start: float
    end: float
    text: str
    labels: str = ""
    line: int = 0

    @property
    def ignored(self) -> bool:
        return self.text.strip().upper() == IGNORE


@dataclass
class HypWord:
    """One CTM entry: a word, or alternatives when a GLM rule gave several."""

    file: str
    channel: str
    start: float
    duration: float
    text: str
    line: int = 0
    #: Where an alternation's entry is placed (the latest midpoint of its words), else None.
    at: float | None = None

    @property
    def midpoint(self) -> float:
        """In single precision, as sclite computes it (so that a word whose midpoint falls
        on a segment's end, in decimal, lands where sclite puts it)."""
        if self.at is not None:
            return float(np.float32(self.at))
        return float(np.float32(self.start) + np.float32(self.duration) / np.float32(2))


def _float(value: str, path: Path, number: int, what: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise DataError(f"{path}:{number}: {what} {value!r} is not a number; fix the line") from None


def _records(path: Path, what: str, fields: int, form: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of an STM or CTM file's records: blank lines and ``;;``
    comments skipped, a record of fewer than ``fields`` fields refused (``form``: what a
    line holds)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise DataError(f"{path}: cannot read the {what} file ({err.strerror}); check the path") from err
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith(";;"):
            continue
        parts = line.split()
        if len(parts) < fields:
            raise DataError(f"{path}:{number}: a {what} line needs `{form}`, got {line.strip()!r}; fix it")
        yield number, parts


def read_stm(path: str | Path) -> list[Segment]:
    """An STM file's segments (``;;`` comments skipped).

    Raises:
        DataError: a line with fewer than 5 fields, a start or end that is not a number, or
            an end before its start (file and line named).
    """
    path = Path(path)
    segments = []
    for number, fields in _records(path, "STM", 5, "file channel speaker start end [<labels>] text"):
        start = _float(fields[3], path, number, "start time")
        end = _float(fields[4], path, number, "end time")
        if end < start:
            raise DataError(f"{path}:{number}: the segment ends ({end}) before it starts ({start}); fix it")
        rest = fields[5:]
        labels = ""
        if rest and rest[0].startswith("<") and rest[0].endswith(">"):
            labels, rest = rest[0], rest[1:]
        segments.append(Segment(fields[0], fields[1], fields[2], start, end, " ".join(rest), labels, number))
    return segments


def read_ctm(path: str | Path) -> list[HypWord]:
    """A CTM file's words (``;;`` comments skipped; a 6th field, the confidence, ignored).

    Raises:
        DataError: a line with fewer than 5 fields or times that are not numbers.
    """
    path = Path(path)
    words = []
    for number, fields in _records(path, "CTM", 5, "file channel start duration word [confidence]"):
        if fields[4].startswith("<ALT"):
            raise DataError(
                f"{path}:{number}: alternation blocks (<ALT_BEGIN>) are not read; give the "
                "CTM before GLM filtering and the GLM with --glm"
            )
        start = _float(fields[2], path, number, "start time")
        duration = _float(fields[3], path, number, "duration")
        words.append(HypWord(fields[0], fields[1], start, duration, fields[4], number))
    return words


# ---------------------------------------------------------------------------- scoring


@dataclass
class SegmentScore:
    """A scored segment: its STM line, the filtered texts and the alignment."""

    segment: Segment
    ref: str
    hyp: list[str]
    ops: list[NistOp]
    counts: ErrorCounts


@dataclass
class NistResult:
    """Every scored segment, in STM order, and the sums :meth:`total` gives."""

    segments: list[SegmentScore]
    dropped_words: int = 0

    def total(self, keep: Callable[[Segment], bool] = lambda s: True) -> ErrorCounts:
        counts = ErrorCounts()
        for scored in self.segments:
            if keep(scored.segment):
                counts.add(scored.counts)
        return counts

    def per_speaker(self) -> dict[str, ErrorCounts]:
        out: dict[str, ErrorCounts] = {}
        for scored in self.segments:
            out.setdefault(scored.segment.speaker, ErrorCounts()).add(scored.counts)
        return out


def _before_end(mid: float, end: float, *, block: bool) -> bool:
    """Whether a word's midpoint is inside a segment ending at ``end``, in single precision
    as sclite computes; an alternation block on the end itself stays in (sclite's way)."""
    end32 = float(np.float32(end))
    return end32 >= mid if block else end32 > mid


def assign_words(
    segments: Sequence[Segment], words: Sequence[HypWord]
) -> tuple[dict[int, list[HypWord]], int]:
    """Each CTM word's segment (by index into ``segments``; a segment's words in the order
    given) and how many words were dropped for landing in an ignored segment.

    Raises:
        DataError: a CTM word of a file and channel that no STM segment has.
    """
    by_side: dict[tuple[str, str], list[int]] = {}
    for index, seg in enumerate(segments):
        by_side.setdefault((seg.file, seg.channel), []).append(index)
    for indices in by_side.values():
        indices.sort(key=lambda k: segments[k].start)
    placed: dict[int, list[HypWord]] = {index: [] for index in range(len(segments))}
    dropped = 0
    # sclite walks each side's words and segments together and never goes back: once a word
    # has gone to a segment, the words after it (in CTM order) go there or later.
    cursor: dict[tuple[str, str], int] = {}
    for word in words:
        key = (word.file, word.channel)
        side = by_side.get(key)
        if side is None:
            raise DataError(
                f"{f'CTM line {word.line}' if word.line else 'a hypothesis word'}: file {word.file!r} "
                f"channel {word.channel!r} has no segment "
                "in the STM; score the CTM against the STM of the same recordings (a Kaldi text "
                "with --segments needs --reco2file-and-channel to name files and channels)"
            )
        mid = word.midpoint
        k = cursor.get(key, 0)
        while k < len(side) - 1 and not _before_end(mid, segments[side[k]].end, block=word.at is not None):
            k += 1
        cursor[key] = k
        target = side[k]
        if segments[target].ignored:
            dropped += 1
        else:
            placed[target].append(word)
    return placed, dropped


def _filtered(words: Sequence[HypWord], rules: list[Rule]) -> list[HypWord]:
    """CTM words through the GLM, one word at a time as csrfilt filters a CTM: a word that
    becomes several plain words shares its time equally among them (``I'M`` → ``I``, ``AM``,
    each half as long); one that becomes an alternation stays one entry, placed by its
    latest word's midpoint (``GONNA`` → ``{ GOING TO / GONNA }``: the middle of ``TO``)."""
    out = []
    for word in words:
        text = filter_text(word.text, rules)
        pieces = text.split()
        if any(c in text for c in "{}/"):
            # csrfilt writes an alternation as an <ALT_BEGIN> block, each alternative's words
            # sharing the word's time; sclite places the block by its latest word midpoint.
            latest = word.start + word.duration / 2
            for alternative in re.sub(r"[{}]", " ", text).split("/"):
                n = len(alternative.split())
                if n:
                    latest = max(latest, word.start + word.duration * (n - 0.5) / n)
            out.append(HypWord(word.file, word.channel, word.start, word.duration, text, word.line, latest))
            continue
        if len(pieces) <= 1:
            out.append(HypWord(word.file, word.channel, word.start, word.duration, text, word.line))
            continue
        step = word.duration / len(pieces)
        for k, piece in enumerate(pieces):
            out.append(HypWord(word.file, word.channel, word.start + k * step, step, piece, word.line))
    return out


def score_stm(
    segments: Sequence[Segment],
    words: Sequence[HypWord],
    *,
    glm: Glm | None = None,
    fragments: bool = True,
) -> NistResult:
    """Score CTM words against STM segments (see the module docstring)."""
    ref_rules = glm.active("stm", "ref") if glm else []
    # hubscr sorts the CTM (file, channel, start) before the GLM; a word the GLM splits keeps
    # its place, and a segment's words are in this order (sclite does not sort them again).
    words = sorted(words, key=lambda w: (w.file, w.channel, w.start))
    if glm:
        words = _filtered(words, glm.active("ctm", "hyp"))
    placed, dropped = assign_words(segments, words)
    scored = []
    for index, seg in enumerate(segments):
        if seg.ignored:
            continue
        ref_text = filter_text(seg.text, ref_rules) if glm else seg.text
        hyp_texts = [w.text for w in placed[index]]
        try:
            ref_items = parse_items(ref_text)
            hyp_items = [item for text in hyp_texts for item in parse_items(text)]
        except ValueError as err:
            raise DataError(f"STM line {seg.line}: {err}; fix the transcript or the GLM rule") from None
        ops = align_networks(Network.of(ref_items), Network.of(hyp_items), fragments=fragments)
        scored.append(SegmentScore(seg, ref_text, hyp_texts, ops, counts_of(ops)))
    return NistResult(scored, dropped)


# ---------------------------------------------------------------------------- files, reports


def words_from_text(
    text: str | Path,
    segments: str | Path,
    *,
    reco2file_and_channel: str | Path | None = None,
    times: Mapping[str, Sequence[tuple[str, float, float]] | None] | None = None,
) -> list[HypWord]:
    """CTM words from a Kaldi ``text`` of segmented utterances (``segments``: ``utt reco
    start end``). An utterance with ``times`` (``(word, start s, duration s)`` from the
    utterance's start, a decoder's alignment: Kaldi's ``utils/convert_ctm.pl``) has its
    words there; one without has them spread evenly over its segment, so each lands in the
    STM segment its utterance overlaps most. A recording is a file and channel through
    ``reco2file_and_channel`` (``reco file channel``, Kaldi's), else ``reco`` and ``1``.

    Raises:
        DataError: an utterance of ``text`` without a line in ``segments``.
    """
    from asrkit.data.datadir import read_kaldi_map
    from asrkit.scoring.wer import read_text

    hyps = read_text(text)
    spans = read_kaldi_map(segments, check_sorted=False)
    sides: dict[str, tuple[str, str]] = {}
    if reco2file_and_channel is not None:
        for reco, value in read_kaldi_map(reco2file_and_channel, check_sorted=False).items():
            parts = value.split()
            if len(parts) != 2:
                raise DataError(
                    f"{reco2file_and_channel}: {reco}: expected `reco file channel`, got {value!r}; "
                    "fix the line"
                )
            sides[reco] = (parts[0], parts[1])
    words = []
    for utt, utt_words in hyps.items():
        if utt not in spans:
            raise DataError(
                f"{text}: utterance {utt} has no line in {segments}; score with the data dir's own "
                "segments file"
            )
        parts = spans[utt].split()
        reco, start, end = parts[0], float(parts[1]), float(parts[2])
        file, channel = sides.get(reco, (reco, "1"))
        timed = (times or {}).get(utt)
        if timed is not None and [w for w, _, _ in timed] == utt_words:
            words += [HypWord(file, channel, start + at, dur, w) for w, at, dur in timed]
            continue
        step = (end - start) / max(len(utt_words), 1)
        for k, word in enumerate(utt_words):
            words.append(HypWord(file, channel, start + k * step, step, word))
    return words


def ctm_text(words: Sequence[HypWord]) -> str:
    """``words`` as CTM lines (``file channel start duration word``), sorted as hubscr sorts."""
    ordered = sorted(words, key=lambda w: (w.file, w.channel, w.start))
    return "".join(f"{w.file} {w.channel} {w.start:.2f} {w.duration:.2f} {w.text}\n" for w in ordered)


def parse_subsets(specs: Sequence[str]) -> list[tuple[str, str]]:
    """``["swbd=sw_", "en_"]`` → ``[("swbd", "sw_"), ("en_", "en_")]``: name and file prefix."""
    out = []
    for spec in specs:
        name, _, prefix = spec.partition("=")
        out.append((name, prefix) if prefix else (spec, spec))
    return out


def _in_subset(segment: Segment, *, prefix: str) -> bool:
    return segment.file.startswith(prefix)


def report(result: NistResult, subsets: Sequence[tuple[str, str]] = ()) -> str:
    """A ``%WER`` line for all segments and one per subset, sclite's counts in Kaldi's form."""
    lines = []
    for name, prefix in [("all", ""), *subsets]:
        counts = result.total(partial(_in_subset, prefix=prefix))
        lines.append(f"{counts.kaldi_line('WER')} {name} ({counts.sentences} segments)")
    return "\n".join(lines) + "\n"


def _pra(result: NistResult) -> str:
    """Each segment's alignment as sclite's ``pra`` shows it (errors in upper case)."""
    out = []
    for scored in result.segments:
        seg, c = scored.segment, scored.counts
        refs, hyps, evals = [], [], []
        for op, ref, hyp in scored.ops:
            r = ref if ref is not None else "*" * len(hyp or "*")
            h = hyp if hyp is not None else "*" * len(ref or "*")
            if op in "SDI":
                r, h = r.upper(), h.upper()
            width = max(len(r), len(h))
            refs.append(r.ljust(width))
            hyps.append(h.ljust(width))
            evals.append(("" if op == "C" else op).ljust(width))
        out += [
            f"id: ({seg.speaker}-{seg.file}-{seg.channel}-{seg.start:.2f}-{seg.end:.2f})",
            f"Scores: (#C #S #D #I) {c.corr} {c.sub} {c.dele} {c.ins}",
            "REF:  " + " ".join(refs),
            "HYP:  " + " ".join(hyps),
            "Eval: " + " ".join(evals),
            "",
        ]
    return "\n".join(out)


def write_nist_dir(result: NistResult, out_dir: str | Path, subsets: Sequence[tuple[str, str]] = ()) -> None:
    """``wer`` (:func:`report`), ``per_spk`` and ``pra`` (each segment's alignment)."""
    from asrkit.data.io import atomic_write

    out_dir = Path(out_dir)
    head = ("#Snt", "#Wrd", "Corr", "Sub", "Del", "Ins", "Err")
    rows = [f"{'speaker':<20} " + " ".join(f"{h:>6}" for h in head) + f" {'%WER':>7}"]
    for speaker, c in sorted(result.per_speaker().items()):
        rows.append(
            f"{speaker:<20} "
            + " ".join(f"{v:>6}" for v in (c.sentences, c.ref_words, c.corr, c.sub, c.dele, c.ins, c.errors))
            + f" {c.wer:>7.2f}"
        )
    atomic_write(out_dir / "per_spk", "\n".join(rows) + "\n")
    atomic_write(out_dir / "pra", _pra(result))
    atomic_write(out_dir / "wer", report(result, subsets))


def score_nist_files(
    stm: str | Path,
    hyp: str | Path,
    *,
    glm: str | Path | None = None,
    segments: str | Path | None = None,
    reco2file_and_channel: str | Path | None = None,
) -> NistResult:
    """Score a CTM (or a Kaldi text with its ``segments``) against an STM, through a GLM."""
    from asrkit.scoring.glm import read_glm

    words = (
        words_from_text(hyp, segments, reco2file_and_channel=reco2file_and_channel)
        if segments is not None
        else read_ctm(hyp)
    )
    return score_stm(read_stm(stm), words, glm=read_glm(glm) if glm is not None else None)
