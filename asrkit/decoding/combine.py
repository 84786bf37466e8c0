"""System combination of CTC models by n-best rescoring.

Averaging CTC posteriors frame by frame fails for separately trained models: each puts
its spikes on its own frames, so the average is mostly blank (measured on AN4: two models
of 9.1% and 7.1% dev WER averaged to 13.7%). Combining at the sequence level avoids
that: every system's beam search (lexicon + LM) proposes its n best transcripts, and each
candidate of the union is scored by every system's CTC likelihood of the whole
transcript, ``log P_m(y | x)``, which sums over all alignments and so does not care where
the spikes are::

    score(y) = mean_m log P_m(y | x) + lm_weight * ln P_LM(y) + word_score * |y|

``lm_weight`` and ``word_score`` are chosen on the dev set, as for a single system. The
systems may use different units (phones, characters): each scores ``y`` through its own
tokenizer, which is what makes them disagree usefully.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from asrkit.decoding.beam import BeamSearch
from asrkit.decoding.ctc import CtcDecoder
from asrkit.decoding.decoder import Decoder, DecodingRecord, Point, Prepared, register_kind
from asrkit.decoding.recognizer import Recognizer
from asrkit.errors import DataError
from asrkit.lm.ngram import NGramLM, read_arpa
from asrkit.progress import Progress
from asrkit.targets.tokenizer import Tokenizer


@dataclass(frozen=True)
class Candidate:
    """One transcript proposed for an utterance, with the scores that do not depend on
    the combination weights."""

    words: tuple[str, ...]
    acoustic: float  #: mean over systems of log P_m(words | x)
    lm: float  #: natural-log LM probability, sentence end included

    def score(self, lm_weight: float, word_score: float) -> float:
        return self.acoustic + lm_weight * self.lm + word_score * len(self.words)


def ctc_log_likelihood(log_probs: torch.Tensor, tokens: Sequence[int]) -> float:
    """``log P(tokens | x)`` under CTC: the sum over every alignment of ``tokens`` to the
    ``(T', V)`` log-probabilities (blank = 0); ``-inf`` when they cannot fit in ``T'``."""
    target = torch.tensor(list(tokens), dtype=torch.long)
    loss = F.ctc_loss(
        log_probs.float()[:, None, :],
        target[None],
        torch.tensor([log_probs.shape[0]]),
        torch.tensor([len(target)]),
        blank=0,
        reduction="sum",
        zero_infinity=False,
    )
    return -float(loss)


def sentence_log_prob(lm: NGramLM, words: Sequence[str]) -> float:
    """``ln P(<s> words </s>)`` under ``lm`` (a word it lacks scores as ``<unk>``)."""
    context, total = ["<s>"], 0.0
    for word in [*words, "</s>"]:
        total += math.log(max(lm.prob(word, context), 1e-99))
        context.append(word)
    return total


def combine_nbest(
    posteriors: Sequence[Mapping[str, torch.Tensor]],
    *,
    searches: Sequence[BeamSearch],
    tokenizers: Sequence[Tokenizer],
    lm: NGramLM,
    progress: Progress | None = None,
) -> dict[str, list[Candidate]]:
    """The scored candidates of every utterance.

    Args:
        posteriors: per system, utterance -> ``(T', V_m)`` CTC log-probabilities (every
            system has the same utterances).
        searches: per system, its n-best beam search (its own lexicon and tuned weights).
        tokenizers: per system, the units its model was trained on.
        lm: the word LM the combination weights.
        progress: counts the utterances as their candidates are scored.

    Returns:
        utterance -> candidates (the union of the systems' n-best lists).
    """
    if not (len(posteriors) == len(searches) == len(tokenizers)) or not posteriors:
        raise ValueError("combine_nbest needs one search and one tokenizer per system")
    out: dict[str, list[Candidate]] = {}
    for utt in posteriors[0] if progress is None else progress.each(posteriors[0]):
        proposals: list[tuple[str, ...]] = []
        for post, search in zip(posteriors, searches, strict=True):
            for hyp in search.hypotheses(post[utt]):
                if tuple(hyp) not in proposals:
                    proposals.append(tuple(hyp))
        scored = []
        for words in proposals:
            acoustic = 0.0
            for post, tokenizer in zip(posteriors, tokenizers, strict=True):
                acoustic += ctc_log_likelihood(post[utt], tokenizer.encode(" ".join(words)))
            if math.isfinite(acoustic):
                scored.append(Candidate(words, acoustic / len(posteriors), sentence_log_prob(lm, words)))
        out[utt] = scored
    return out


def pick(
    candidates: Mapping[str, Sequence[Candidate]], *, lm_weight: float, word_score: float
) -> dict[str, str]:
    """Each utterance's best candidate under the weights (empty when it has none)."""
    return {
        utt: " ".join(max(cands, key=lambda c: c.score(lm_weight, word_score)).words) if cands else ""
        for utt, cands in candidates.items()
    }


class CombinedDecoder(Decoder):
    """Several CTC systems combined by n-best rescoring (see the module); ``lm_weight`` and
    ``word_score`` weigh the combination's LM.

    Args:
        exp_dir: the experiment dir holding the combination (its ``lang/lm.arpa`` is the
            LM; the systems' paths are recorded relative to it).
        systems: each system's beam + LM decoder as its stage 5 tuned it (the first is
            ``exp_dir``'s own).
        grid: (LM weight, word score) points of the combination.
        nbest: transcripts each system proposes per utterance.
    """

    kind = "combined"

    def __init__(
        self, exp_dir: str | Path, systems: Sequence[CtcDecoder], grid: Sequence[Point], *, nbest: int = 10
    ) -> None:
        super().__init__(grid)
        self.exp_dir, self.systems, self.nbest = Path(exp_dir), list(systems), nbest
        self.searches = [system.search(system.point, nbest=nbest) for system in self.systems]
        self.lm = read_arpa(self.exp_dir / "lang" / "lm.arpa")

    @property
    def recognizers(self) -> list[Recognizer]:
        return [system.recognizer for system in self.systems]

    @property
    def sample_rate(self) -> int:
        return self.systems[0].sample_rate

    def prepare(self, data_dir: str | Path) -> Prepared:
        posteriors = []
        for system in self.systems:
            posteriors.append(system.prepare(data_dir))
            if posteriors[-1].scores.keys() != posteriors[0].scores.keys():
                raise DataError(
                    f"{data_dir}: {system.recognizer.exp_dir} decoded other utterances than "
                    f"{self.systems[0].recognizer.exp_dir}"
                )
        return self._combined(posteriors)

    def prepare_audio(self, samples: np.ndarray, rate: int, *, utt: str, where: str) -> Prepared:
        # Each system with its own features and CMVN stats.
        return self._combined([s.prepare_audio(samples, rate, utt=utt, where=where) for s in self.systems])

    def prepare_speaker(self, recordings: Sequence[tuple[str, np.ndarray, int, str]]) -> Prepared:
        return self._combined([s.prepare_speaker(recordings) for s in self.systems])

    def _combined(self, posteriors: list[Prepared]) -> Prepared:
        began = time.monotonic()
        name = posteriors[0].name
        with Progress(self.progress_label("n-best lists", name), total=len(posteriors[0].scores)) as progress:
            candidates = combine_nbest(
                [p.scores for p in posteriors],
                searches=self.searches,
                tokenizers=[r.tokenizer for r in self.recognizers],
                lm=self.lm,
                progress=progress,
            )
        seconds = sum(p.seconds for p in posteriors) + time.monotonic() - began
        # The first system's log-probabilities stay for word times.
        return Prepared(
            candidates,
            frames=posteriors[0].frames,
            seconds=seconds,
            extra={"own": posteriors[0]},
            name=name,
        )

    def hypotheses(self, prepared: Prepared, points: Sequence[Point]) -> dict[Point, dict[str, str]]:
        return {point: pick(prepared.scores, lm_weight=point[0], word_score=point[1]) for point in points}

    def setting(self, point: Point) -> str | None:
        return (
            f"systems={len(self.systems)} nbest={self.nbest} lm_weight={point[0]:g} word_score={point[1]:g}"
        )

    def record(self, point: Point, *, tuned_on: str) -> DecodingRecord:
        systems = [os.path.relpath(s.recognizer.exp_dir, self.exp_dir) for s in self.systems]
        return DecodingRecord(
            kind="combined",
            weights=list(point),
            tuned_on=tuned_on,
            settings={"systems": systems, "nbest": self.nbest},
        )

    def word_times(self, prepared: Prepared, utt: str, text: str) -> list[tuple[str, float, float]] | None:
        return self.systems[0].word_times(prepared.extra["own"], utt, text)


def system_decoder(exp_dir: str | Path, *, device: str = "cpu", max_frames: int = 40000) -> CtcDecoder:
    """An experiment's beam + LM decoder as its stage 5 tuned it (a system to combine)."""
    record = DecodingRecord.load(exp_dir, "beam_lm")
    if record is None:
        raise DataError(
            f"{exp_dir}: no tuned beam_lm decoding ({DecodingRecord.path(exp_dir, 'beam_lm')}); "
            "run its stage 5 with decode=beam_lm"
        )
    recognizer = Recognizer(exp_dir, model=record.model, device=device, max_frames=max_frames)
    return CtcDecoder(
        recognizer,
        "beam_lm",
        [record.point],
        beam_size=int(record.settings["beam_size"]),
        beam_threshold=float(record.settings["beam_threshold"]),
    )


@register_kind("combined")
def _from_record(exp_dir: Path, record: DecodingRecord, *, model: str, device: str) -> Decoder:
    if "members" in record.settings:  # a hybrid experiment's ensemble: averaged posteriors
        from asrkit.decoding.hclg import hybrid_from_record

        return hybrid_from_record(exp_dir, record, model=model, device=device)
    systems = [system_decoder(exp_dir / s, device=device) for s in record.settings["systems"]]
    return CombinedDecoder(exp_dir, systems, [record.point], nbest=int(record.settings["nbest"]))
