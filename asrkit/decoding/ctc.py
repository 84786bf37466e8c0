"""CTC decoders: best path (``greedy``), lexicon-free beam search (``beam``) and beam
search with the lexicon and word LM (``beam_lm``), all over one experiment's
log-probabilities (:class:`~asrkit.decoding.recognizer.Recognizer`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from asrkit.decoding.beam import BeamSearch
from asrkit.decoding.decoder import Decoder, DecodingRecord, Point, Prepared, register_kind
from asrkit.decoding.recognizer import Recognizer
from asrkit.errors import ConfigError
from asrkit.loader.sources import UtteranceSource
from asrkit.progress import Progress

__all__ = ["CTC_KINDS", "CtcDecoder"]

CTC_KINDS = ("greedy", "beam", "beam_lm")


class CtcDecoder(Decoder):
    """A CTC experiment's network with one of the :data:`CTC_KINDS` searches.

    Args:
        recognizer: the experiment's network, features and tokenizer.
        kind: ``greedy``, ``beam`` or ``beam_lm``.
        grid: (LM weight, word score) points; only ``beam_lm`` has anything to tune.
        beam_size, beam_threshold: the beam search's hypotheses and score window.
        lexicon, lm: ``beam_lm``'s lexicon and ARPA LM (default: the experiment's
            ``lang/lexicon.txt`` and ``lang/lm.arpa``).
    """

    def __init__(
        self,
        recognizer: Recognizer,
        kind: str,
        grid: Sequence[Point] = ((0.0, 0.0),),
        *,
        beam_size: int = 50,
        beam_threshold: float = 25.0,
        lexicon: str | Path | None = None,
        lm: str | Path | None = None,
    ) -> None:
        if kind not in CTC_KINDS:
            raise ConfigError(f"CTC search {kind!r} is unknown; choose one of {list(CTC_KINDS)}")
        super().__init__(grid if kind == "beam_lm" else [(0.0, 0.0)])
        self.kind = kind  # one class serves three kinds
        self.recognizer = recognizer
        self.beam_size, self.beam_threshold = beam_size, beam_threshold
        self._searches: dict[tuple[Point, int], BeamSearch] = {}
        self.lexicon = self.lm = None
        if kind == "beam_lm":
            lang = recognizer.exp_dir / "lang"
            self.lexicon = Path(lexicon) if lexicon else lang / "lexicon.txt"
            self.lm = Path(lm) if lm else lang / "lm.arpa"
            for path in (self.lexicon, self.lm):
                if not path.is_file():
                    raise ConfigError(
                        f"{path}: not found; run stage 3 (lang) for this experiment, "
                        "or decode with decode=greedy"
                    )

    @property
    def sample_rate(self) -> int:
        return self.recognizer.features.sample_rate

    def prepare(self, data_dir: str | Path) -> Prepared:
        return self._prepared(self.recognizer.open_set(data_dir), name=Path(data_dir).name)

    def prepare_audio(self, samples: np.ndarray, rate: int, *, utt: str, where: str) -> Prepared:
        return self._prepared(self.recognizer.audio_source(samples, rate, utt=utt, where=where))

    def prepare_speaker(self, recordings: Sequence[tuple[str, np.ndarray, int, str]]) -> Prepared:
        return self._prepared(self.recognizer.speaker_source(recordings))

    def _prepared(self, utts: UtteranceSource, *, name: str = "") -> Prepared:
        began = time.monotonic()
        with Progress(self.progress_label("acoustic scores", name), total=len(utts)) as progress:
            scores = dict(self.recognizer.posteriors(utts, progress=progress))
        return Prepared(
            scores,
            frames=sum(int(s.shape[0]) for s in scores.values()),
            seconds=time.monotonic() - began,
            name=name,
        )

    def search(self, point: Point, *, nbest: int = 1) -> BeamSearch:
        """The beam search at ``point`` (``beam`` and ``beam_lm``), built once (loading the
        lexicon and LM) and kept."""
        if (point, nbest) not in self._searches:
            self._searches[point, nbest] = self._build(point, nbest)
        return self._searches[point, nbest]

    def _build(self, point: Point, nbest: int) -> BeamSearch:
        return BeamSearch(
            self.recognizer.tokenizer,
            lexicon=self.lexicon,
            lm=self.lm,
            beam_size=self.beam_size,
            beam_threshold=self.beam_threshold,
            lm_weight=point[0],
            word_score=point[1],
            nbest=nbest,
        )

    def hypotheses(self, prepared: Prepared, points: Sequence[Point]) -> dict[Point, dict[str, str]]:
        began = time.monotonic()
        out = {}
        what = self.progress_label("decoding", prepared.name, len(points))
        # A CTC search runs once per point (no lattice to rescore): every point's
        # utterances count.
        with Progress(what, total=len(points) * len(prepared.scores)) as progress:
            for point in points:
                if self.kind == "greedy":
                    search = self.recognizer.greedy
                else:  # a grid's searches are used once each; one point's is kept
                    search = self.search(point) if len(points) == 1 else self._build(point, 1)
                out[point] = {
                    utt: search(log_probs) for utt, log_probs in progress.each(prepared.scores.items())
                }
        prepared.seconds += time.monotonic() - began
        return out

    def setting(self, point: Point) -> str | None:
        if self.kind == "greedy":
            return None
        return f"lm_weight={point[0]:g} word_score={point[1]:g} beam_size={self.beam_size}"

    def describe(self, point: Point) -> str:
        # Without an LM the weights mean nothing: the label alone.
        return super().describe(point) if self.kind == "beam_lm" else self.kind

    def record(self, point: Point, *, tuned_on: str) -> DecodingRecord:
        return DecodingRecord(
            kind=self.kind,
            weights=list(point),
            tuned_on=tuned_on,
            model=self.recognizer.model_file,
            settings={"beam_size": self.beam_size, "beam_threshold": self.beam_threshold},
        )

    def word_times(self, prepared: Prepared, utt: str, text: str) -> list[tuple[str, float, float]] | None:
        log_probs: torch.Tensor = prepared.scores[utt]
        return self.recognizer.word_times(log_probs, text)


@register_kind(*CTC_KINDS)
def _from_record(exp_dir: Path, record: DecodingRecord, *, model: str, device: str) -> CtcDecoder:
    recognizer = Recognizer(exp_dir, model=model, device=device)
    return CtcDecoder(
        recognizer,
        record.kind,
        [record.point],
        beam_size=int(record.settings.get("beam_size", 50)),
        beam_threshold=float(record.settings.get("beam_threshold", 25.0)),
    )
