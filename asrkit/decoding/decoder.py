"""One interface for every way asrkit turns acoustic scores into words.

A :class:`Decoder` prepares a set once (:meth:`Decoder.prepare`: CTC log-probabilities,
or pdf log-likelihoods for an HCLG graph, or a combination's scored candidates), holds
the grid of two weights it tunes (an LM weight and a word score or penalty), and gives
every utterance's hypothesis at grid points (:meth:`Decoder.hypotheses`). What a stage
tuned is saved as one :class:`DecodingRecord` with the decoder's kind, in
``<dir>/decoders/<kind>.json``, and :func:`load_decoder` builds the same decoder from it:
``asrkit transcribe`` and the Python API decode with exactly the recipe's recognizer.

Kinds (the decoders are registered by :func:`register_kind` in their own modules):

- ``greedy``, ``beam``, ``beam_lm``: CTC best path; lexicon-free beam search; beam search
  with the lexicon and word LM (:mod:`asrkit.decoding.ctc`);
- ``gmm``, ``hybrid``: a GMM system's, or a hybrid network's, scores through the HCLG
  graph, lattices rescored at each weight pair (:mod:`asrkit.decoding.hclg`);
- ``combined``: the n-best lists of several CTC systems rescored by all of them
  (:mod:`asrkit.decoding.combine`), or a hybrid ensemble's averaged log posteriors
  through HCLG (:mod:`asrkit.decoding.hclg`).
"""

from __future__ import annotations

import abc
import importlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from asrkit.data.datadir import write_kaldi_map
from asrkit.data.io import load_record, save_record
from asrkit.errors import ConfigError, DataError
from asrkit.scoring import score_files

__all__ = [
    "KINDS",
    "RECORDS",
    "Decoder",
    "DecodingRecord",
    "Point",
    "Prepared",
    "forget_record",
    "load_decoder",
    "register_kind",
    "write_and_score",
]

log = logging.getLogger(__name__)

#: A grid point: (LM weight, word score or word penalty).
Point = tuple[float, float]
#: Every decoder kind, in the order ``load_decoder(kind="auto")`` prefers a recorded one.
KINDS = ("combined", "hybrid", "beam_lm", "beam", "greedy", "gmm")
#: The folder, inside an experiment (or GMM system) dir, of the tuned decoders' records.
RECORDS = "decoders"
#: Which stage writes each kind's record (the fix when one is missing or unreadable).
WRITTEN_BY = {
    "greedy": "stage 5 (decode)",
    "beam": "stage 5 (decode) with decode=beam",
    "beam_lm": "stage 5 (decode) with decode=beam_lm",
    "gmm": "the hybrid recipe's stage 5 (gmm_decode)",
    "hybrid": "the hybrid recipe's stage 7 (decode)",
    "combined": "stage 8 (combine) with ensemble.members",
}


@dataclass
class DecodingRecord:
    """A tuned decoder, as a stage saved it.

    Attributes:
        kind: one of :data:`KINDS`.
        weights: the grid point picked on ``tuned_on`` (LM weight, word score/penalty).
        tuned_on: the set it was picked on (``""`` when there was nothing to pick).
        model: the network bundle inside the experiment dir (CTC and hybrid kinds).
        settings: the kind's own settings (beam sizes, graph, priors, systems ...); paths
            are absolute, or relative to the dir holding ``decoders/``.
    """

    kind: str
    weights: list[float] = field(default_factory=lambda: [0.0, 0.0])
    tuned_on: str = ""
    model: str = "model.pt"
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def point(self) -> Point:
        return float(self.weights[0]), float(self.weights[1])

    @staticmethod
    def path(directory: str | Path, kind: str) -> Path:
        return Path(directory) / RECORDS / f"{kind}.json"

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/decoders/<kind>.json`` (atomically); an older asrkit's record
        of this kind in ``directory`` is removed, so the two cannot disagree."""
        path = self.path(directory, self.kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_record(path, self)
        for legacy in _LEGACY.get(self.kind, ()):
            (Path(directory) / legacy.file).unlink(missing_ok=True)
        return path

    @classmethod
    def load(cls, directory: str | Path, kind: str) -> DecodingRecord | None:
        """The record of ``kind`` in ``directory``, or None when that decoder was never
        tuned there. An older asrkit's record (``decoding.json``, ``hybrid_decoding.json``,
        ``combination.json``) is read as the same decoder."""
        path = cls.path(directory, kind)
        fix = f"rerun {WRITTEN_BY.get(kind, 'the decoding stage')} to write it again"
        record = load_record(path, cls, what="decoding settings", fix=fix)
        if record is None:
            for legacy in _LEGACY.get(kind, ()):
                record = legacy.read(Path(directory), fix)
                if record is not None:
                    break
        if record is not None and record.kind != kind:
            raise DataError(f"{path}: records a {record.kind!r} decoder, not {kind!r}; {fix}")
        return record


def forget_record(directory: str | Path, kind: str) -> None:
    """Remove ``kind``'s record from ``directory`` (a stage that decodes another way now)."""
    DecodingRecord.path(directory, kind).unlink(missing_ok=True)
    for legacy in _LEGACY.get(kind, ()):
        if legacy.read(Path(directory), "") is not None:
            (Path(directory) / legacy.file).unlink(missing_ok=True)


@dataclass
class _Legacy:
    """A record file of asrkit before the decoder interface, read as a :class:`DecodingRecord`."""

    file: str
    convert: Callable[[dict[str, Any]], DecodingRecord | None]

    def read(self, directory: Path, fix: str) -> DecodingRecord | None:
        path = directory / self.file
        if not path.is_file():
            return None
        try:
            record = self.convert(json.loads(path.read_text()))
        except (ValueError, TypeError, KeyError) as err:
            raise DataError(f"{path}: unreadable decoding settings ({err}); {fix}") from None
        if record is not None:
            log.info("%s: decoding settings of an older asrkit, read as a %s decoder", path, record.kind)
        return record


def _old_ctc(kind: str) -> Callable[[dict[str, Any]], DecodingRecord | None]:
    def convert(old: dict[str, Any]) -> DecodingRecord | None:
        if old["method"] != kind:
            return None
        return DecodingRecord(
            kind=kind,
            weights=[old["lm_weight"], old["word_score"]],
            tuned_on=old.get("tuned_on", ""),
            model=old.get("model", "model.pt"),
            settings={"beam_size": old["beam_size"], "beam_threshold": old["beam_threshold"]},
        )

    return convert


def _old_hybrid(old: dict[str, Any]) -> DecodingRecord:
    point = [old.pop("lm_weight"), old.pop("word_penalty")]
    tuned_on, model = old.pop("tuned_on", ""), old.pop("model", "model.pt")
    return DecodingRecord(kind="hybrid", weights=point, tuned_on=tuned_on, model=model, settings=old)


def _old_combined(old: dict[str, Any]) -> DecodingRecord:
    return DecodingRecord(
        kind="combined",
        weights=[old["lm_weight"], old["word_score"]],
        tuned_on=old.get("tuned_on", ""),
        settings={"systems": old["systems"], "nbest": old["nbest"]},
    )


_LEGACY: dict[str, tuple[_Legacy, ...]] = {
    "beam": (_Legacy("decoding.json", _old_ctc("beam")),),
    "beam_lm": (_Legacy("decoding.json", _old_ctc("beam_lm")),),
    "hybrid": (_Legacy("hybrid_decoding.json", _old_hybrid),),
    "combined": (_Legacy("combination.json", _old_combined),),
}


@dataclass
class Prepared:
    """A set's acoustic scores, computed once and decoded at any grid point.

    Attributes:
        scores: utterance -> what the decoder searches (its kind's scores).
        frames: input frames of the set (for real-time factors).
        seconds: time spent scoring and searching it so far.
        extra: what else a kind keeps per set (e.g. a combination's candidates).
        name: the set's name (its data dir's), for progress lines; ``""`` for audio.
    """

    scores: Mapping[str, Any]
    frames: int = 0
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    name: str = ""


class Decoder(abc.ABC):
    """Acoustic scores to words (see the module).

    Args:
        grid: the (LM weight, word score/penalty) points to tune over; the first is the
            decoder's own point when it is not tuned (a loaded decoder: the recorded one).
    """

    kind: str
    #: The two weights' names, as settings and ``setting`` files spell them.
    weight_names: ClassVar[tuple[str, str]] = ("lm_weight", "word_score")

    def __init__(self, grid: Sequence[Point]) -> None:
        if not grid:
            raise ConfigError(f"a {self.kind} decoder needs at least one (LM weight, word score) point")
        self.grid = [(float(w), float(s)) for w, s in grid]
        self.point = self.grid[0]

    @property
    def label(self) -> str:
        """What reports call it (``greedy``, ``beam_lm``, ``tri1``, ``hybrid`` ...)."""
        return self.kind

    @property
    @abc.abstractmethod
    def sample_rate(self) -> int:
        """The audio rate the acoustic model's features are computed at."""

    @abc.abstractmethod
    def prepare(self, data_dir: str | Path) -> Prepared:
        """The acoustic scores of a Kaldi data dir's utterances."""

    @abc.abstractmethod
    def prepare_audio(self, samples: np.ndarray, rate: int, *, utt: str, where: str) -> Prepared:
        """The acoustic scores of one recording (int16-range ``samples`` at ``rate``),
        as utterance ``utt``; ``where`` names it in errors."""

    def prepare_speaker(self, recordings: Sequence[tuple[str, np.ndarray, int, str]]) -> Prepared:
        """The acoustic scores of one speaker's recordings, ``(utt, samples, rate, where)``
        each: a decoder that adapts to the speaker (normalisation, transforms) does it over
        all of them; by default each is prepared alone."""
        out = Prepared({}, frames=0, seconds=0.0)
        scores: dict[str, Any] = {}
        for utt, samples, rate, where in recordings:
            one = self.prepare_audio(samples, rate, utt=utt, where=where)
            scores.update(one.scores)
            out.frames += one.frames
            out.seconds += one.seconds
            for key, value in one.extra.items():
                if isinstance(value, dict):
                    out.extra.setdefault(key, {}).update(value)
        out.scores = scores
        return out

    @abc.abstractmethod
    def hypotheses(self, prepared: Prepared, points: Sequence[Point]) -> dict[Point, dict[str, str]]:
        """Every utterance's transcript at each of ``points``: point -> utterance -> text."""

    def transcripts(self, prepared: Prepared) -> dict[str, str]:
        """Every utterance's transcript at the decoder's own point."""
        return self.hypotheses(prepared, [self.point])[self.point]

    def progress_label(self, what: str, name: str, points: int = 1) -> str:
        """What progress lines call ``what`` (``decoding``, ``acoustic scores`` ...) done to
        set ``name`` at ``points`` grid points: ``decoding test (tri1)``, ``decoding dev
        (beam_lm, 12 weight settings)``; sets and sweeps are told apart in a log."""
        where = f"{what} {name}" if name else what
        sweep = f", {points} weight settings" if points > 1 else ""
        return f"{where} ({self.label}{sweep})"

    def setting(self, point: Point) -> str | None:
        """The ``setting`` line written beside a set decoded at ``point`` (None: none)."""
        first, second = self.weight_names
        return f"{first}={point[0]:g} {second}={point[1]:g}"

    def describe(self, point: Point) -> str:
        """The label a set's score is reported under."""
        setting = self.setting(point)
        return f"{self.label}, {setting}" if setting else self.label

    @abc.abstractmethod
    def record(self, point: Point, *, tuned_on: str) -> DecodingRecord:
        """What :func:`load_decoder` needs to decode again at ``point``."""

    def word_times(self, prepared: Prepared, utt: str, text: str) -> list[tuple[str, float, float]] | None:
        """``(word, start s, duration s)`` of ``text`` in utterance ``utt``, or None when it
        has too few frames to align; only decoders with a CTC alignment have them."""
        raise ConfigError(f"word times come from a CTC alignment; a {self.kind} decoder has none")

    @property
    def has_word_times(self) -> bool:
        return type(self).word_times is not Decoder.word_times


#: kind -> builder from a record: ``(exp_dir, record, model=, device=) -> Decoder``.
_BUILDERS: dict[str, Callable[..., Decoder]] = {}
#: The modules whose import registers each kind's builder (the registry fills lazily, so
#: importing this module does not load torch models, Kaldi bindings or KenLM).
_MODULES = {
    "greedy": "asrkit.decoding.ctc",
    "beam": "asrkit.decoding.ctc",
    "beam_lm": "asrkit.decoding.ctc",
    "hybrid": "asrkit.decoding.hclg",
    "gmm": "asrkit.decoding.hclg",
    "combined": "asrkit.decoding.combine",
}


def register_kind(*kinds: str) -> Callable[[Callable[..., Decoder]], Callable[..., Decoder]]:
    """Register ``builder(exp_dir, record, *, model, device)`` for ``kinds``."""

    def wrap(builder: Callable[..., Decoder]) -> Callable[..., Decoder]:
        for kind in kinds:
            _BUILDERS[kind] = builder
        return builder

    return wrap


def load_decoder(
    exp_dir: str | Path, kind: str = "auto", *, model: str | None = None, device: str = "cpu"
) -> Decoder:
    """The decoder an experiment's stages tuned, rebuilt from its record.

    Args:
        exp_dir: the experiment dir (``exp/<name>``).
        kind: one of :data:`KINDS`, or ``auto``: the first recorded of combined, hybrid,
            beam_lm, beam, and greedy when none is.
        model: the network bundle to use instead of the recorded one.
        device: where the network runs.

    Raises:
        ConfigError: ``kind`` was never tuned in ``exp_dir``.
        DataError: a record or a file it names is missing or unreadable.
    """
    exp_dir = Path(exp_dir)
    if kind != "auto" and kind not in KINDS:
        raise ConfigError(f"decoder kind {kind!r} is unknown; choose auto or one of {list(KINDS)}")
    if kind == "auto":
        kind = next((k for k in KINDS[:-1] if DecodingRecord.load(exp_dir, k) is not None), "greedy")
    record = DecodingRecord.load(exp_dir, kind)
    if record is None and kind == "greedy":
        record = DecodingRecord(kind="greedy")  # best path has nothing to tune
    if record is None:
        raise ConfigError(
            f"{DecodingRecord.path(exp_dir, kind)}: no {kind} settings; run {WRITTEN_BY[kind]} "
            "first (it tunes them on the dev set), or decode another way"
        )
    importlib.import_module(_MODULES[kind])
    return _BUILDERS[kind](exp_dir, record, model=model or record.model, device=device)


def write_and_score(
    hyp: Mapping[str, str],
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    word_times: Mapping[str, Sequence[tuple[str, float, float]] | None] | None = None,
) -> str | None:
    """``out_dir/hyp`` and, when ``data_dir`` has a ``text``, ``out_dir/scoring/``; returns
    the Kaldi ``%WER`` line (or None). ``word_times`` (utterance -> ``(word, start s,
    duration s)``, None where it has none) are written as ``out_dir/ctm`` (per utterance,
    Kaldi's ``utt 1 start dur word``) and place the words for NIST scoring."""
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    write_kaldi_map(out_dir / "hyp", dict(hyp))
    if word_times is not None:
        from asrkit.data.io import atomic_write

        atomic_write(
            out_dir / "ctm",
            "".join(
                f"{utt} 1 {start:.2f} {dur:.2f} {word}\n"
                for utt, times in word_times.items()
                for word, start, dur in times or ()
            ),
        )
    if not (data_dir / "text").is_file():
        return None
    # A data dir's spk2group (e.g. speechocean762's child/teen/adult) adds a per_group table.
    groups = data_dir / "spk2group"
    line = score_files(
        data_dir / "text",
        out_dir / "hyp",
        out_dir=out_dir / "scoring",
        spk2group=groups if groups.is_file() else None,
    ).words.kaldi_line()
    if (data_dir / "stm").is_file():
        score_nist(data_dir, out_dir, word_times=word_times)
    return line


#: A data dir's subsets for NIST scoring: ``name prefix`` lines (eval2000: ``swbd sw_``).
STM_SUBSETS = "stm_subsets"


def score_nist(
    data_dir: Path,
    out_dir: Path,
    *,
    word_times: Mapping[str, Sequence[tuple[str, float, float]] | None] | None = None,
) -> None:
    """A data dir with an ``stm`` (and a ``glm``) is also scored as NIST's hubscr.pl does:
    ``out_dir/hyp``'s words placed in time (``word_times``, from the segment's start; an
    utterance without them has its words spread over its segment), through the GLM,
    against the STM, overall and per subset (``stm_subsets``); ``out_dir/scoring_nist/``
    (with the reco-level ``hyp.ctm`` NIST's own tools read)."""
    from asrkit.data.io import atomic_write
    from asrkit.scoring.glm import read_glm
    from asrkit.scoring.nist import (
        ctm_text,
        parse_subsets,
        read_stm,
        report,
        score_stm,
        words_from_text,
        write_nist_dir,
    )

    if not (data_dir / "segments").is_file():
        raise DataError(
            f"{data_dir}: has an stm but no segments; NIST scoring places each utterance's words "
            "by its segment (re-create the dir with its segments file)"
        )
    r2fc = data_dir / "reco2file_and_channel"
    glm = data_dir / "glm"
    subsets_file = data_dir / STM_SUBSETS
    specs = []
    if subsets_file.is_file():
        lines = [ln.split() for ln in subsets_file.read_text().splitlines()]
        specs = ["=".join(parts[:2]) for parts in lines if len(parts) >= 2]
    subsets = parse_subsets(specs)
    words = words_from_text(
        out_dir / "hyp",
        data_dir / "segments",
        reco2file_and_channel=r2fc if r2fc.is_file() else None,
        times=word_times,
    )
    result = score_stm(read_stm(data_dir / "stm"), words, glm=read_glm(glm) if glm.is_file() else None)
    write_nist_dir(result, out_dir / "scoring_nist", subsets)
    # The hypotheses as a CTM, for NIST's own tools (hubscr.pl, sclite).
    atomic_write(out_dir / "scoring_nist" / "hyp.ctm", ctm_text(words))
    for text in report(result, subsets).splitlines():
        log.info("%s: NIST scoring (stm%s): %s", out_dir, " + glm" if glm.is_file() else "", text)
