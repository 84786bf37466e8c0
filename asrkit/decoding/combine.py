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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from asrkit.data.io import load_record, save_record
from asrkit.decoding.beam import BeamSearch
from asrkit.decoding.recognizer import DecodeSettings, Recognizer
from asrkit.errors import DataError
from asrkit.lm.ngram import NGramLM, read_arpa
from asrkit.targets.tokenizer import Tokenizer

#: Written in the experiment dir by stage 8: the combination as tuned.
COMBINATION = "combination.json"


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
) -> dict[str, list[Candidate]]:
    """The scored candidates of every utterance.

    Args:
        posteriors: per system, utterance -> ``(T', V_m)`` CTC log-probabilities (every
            system has the same utterances).
        searches: per system, its n-best beam search (its own lexicon and tuned weights).
        tokenizers: per system, the units its model was trained on.
        lm: the word LM the combination weights.

    Returns:
        utterance -> candidates (the union of the systems' n-best lists).
    """
    if not (len(posteriors) == len(searches) == len(tokenizers)) or not posteriors:
        raise ValueError("combine_nbest needs one search and one tokenizer per system")
    out: dict[str, list[Candidate]] = {}
    for utt in posteriors[0]:
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


@dataclass
class CombinationSettings:
    """What stage 8 combined and the weights it picked on the dev set. ``systems`` are
    experiment dirs relative to the one holding this record (``.`` is that one)."""

    systems: list[str] = field(default_factory=list)
    nbest: int = 10
    lm_weight: float = 0.0
    word_score: float = 0.0
    tuned_on: str = ""

    def save(self, exp_dir: str | Path) -> None:
        save_record(Path(exp_dir) / COMBINATION, self)

    @classmethod
    def load(cls, exp_dir: str | Path) -> CombinationSettings | None:
        """The record, or None when stage 8 combined nothing here."""
        return load_record(
            Path(exp_dir) / COMBINATION,
            cls,
            what="combination",
            fix="rerun stage 8 (combine) to write it again",
        )


def system_search(recognizer: Recognizer, nbest: int) -> BeamSearch:
    """An experiment's beam search + LM as its stage 5 tuned it, returning ``nbest``."""
    tuned = DecodeSettings.load(recognizer.exp_dir)
    if tuned is None or tuned.method != "beam_lm":
        raise DataError(
            f"{recognizer.exp_dir}: no tuned beam_lm decoding (decoding.json); run its stage 5 "
            "with decode=beam_lm"
        )
    lang = recognizer.exp_dir / "lang"
    return BeamSearch(
        recognizer.tokenizer,
        lexicon=lang / "lexicon.txt",
        lm=lang / "lm.arpa",
        beam_size=tuned.beam_size,
        beam_threshold=tuned.beam_threshold,
        lm_weight=tuned.lm_weight,
        word_score=tuned.word_score,
        nbest=nbest,
    )


class CombinedRecognizer:
    """The systems an experiment's stage 8 combined, with their n-best searches and the
    combination's LM; :meth:`transcripts` combines as the stage did.

    Args:
        exp_dir: the experiment dir (the LM is its ``lang/lm.arpa``).
        systems: the systems' experiment dirs.
        settings: nbest and the tuned weights.
        device, max_frames: as for :class:`Recognizer`.
    """

    def __init__(
        self,
        exp_dir: str | Path,
        systems: Sequence[str | Path],
        settings: CombinationSettings,
        *,
        device: str | torch.device = "cpu",
        max_frames: int = 40000,
    ) -> None:
        self.settings = settings
        self.recognizers = [Recognizer(d, device=device, max_frames=max_frames) for d in systems]
        self.searches = [system_search(r, settings.nbest) for r in self.recognizers]
        self.lm = read_arpa(Path(exp_dir) / "lang" / "lm.arpa")

    @classmethod
    def load(cls, exp_dir: str | Path, *, device: str | torch.device = "cpu") -> CombinedRecognizer:
        settings = CombinationSettings.load(exp_dir)
        if settings is None:
            raise DataError(
                f"{Path(exp_dir) / COMBINATION}: not found; this experiment combined no systems "
                "(stage 8 with ensemble.members)"
            )
        return cls(exp_dir, [Path(exp_dir) / s for s in settings.systems], settings, device=device)

    def candidates(self, posteriors: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, list[Candidate]]:
        """Scored candidates of each utterance from every system's log-probabilities."""
        return combine_nbest(
            posteriors, searches=self.searches, tokenizers=[r.tokenizer for r in self.recognizers], lm=self.lm
        )

    def transcripts(self, posteriors: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, str]:
        """Each utterance's combined transcript with the tuned weights."""
        return pick(
            self.candidates(posteriors),
            lm_weight=self.settings.lm_weight,
            word_score=self.settings.word_score,
        )
