"""Training objectives: what the loss is and what validation reports.

* ``ctc`` (default): CTC on the token targets; dev loss per utterance and greedy WER.
* ``ce``: frame-level cross-entropy of the frame-classification head on alignment
  targets (Kaldi pdf-ids, or a CTC model's forced alignment); dev loss per frame and
  frame accuracy, plus greedy WER when the classes are the tokenizer's units (blank = 0).

Public API: :class:`Objective`, :class:`CtcObjective`, :class:`FrameCEObjective`,
:func:`build_objective`.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable

import torch
from torch import nn

from asrkit.decoding.greedy import greedy_ctc
from asrkit.errors import ConfigError
from asrkit.loader.batch import Batch
from asrkit.scoring import score_texts
from asrkit.targets.tokenizer import Tokenizer

#: Frame-target value of padding (and of frames without a label): ignored by the loss.
IGNORE = -1


class Objective(abc.ABC):
    """A loss over batches and the dev metrics that go with it."""

    name = ""
    #: Which model output the greedy decoder reads (``ctc`` or ``frame``), or None.
    decodes_from: str | None = None
    #: The head the loss trains (``ctc`` or ``frame``); the other gets no gradient.
    trains = ""

    @abc.abstractmethod
    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """The summed loss / ``batch.norm``."""

    @abc.abstractmethod
    def accumulate(
        self, model: nn.Module, batches: Iterable[Batch], *, tokenizer: Tokenizer, texts: dict[str, str]
    ) -> dict[str, float]:
        """Sums over ``batches`` that :meth:`metrics` turns into dev metrics; sums of
        several shards of a dev set add up to the whole set's (sharded validation)."""

    @abc.abstractmethod
    def metrics(self, sums: dict[str, float]) -> dict[str, float]:
        """Dev metrics from :meth:`accumulate`'s sums: ``loss`` always; ``wer`` (%) when
        the output decodes to words."""

    def validate(
        self, model: nn.Module, batches: Iterable[Batch], *, tokenizer: Tokenizer, texts: dict[str, str]
    ) -> dict[str, float]:
        """Dev metrics of ``batches`` (``texts``: utterance -> transcript)."""
        return self.metrics(self.accumulate(model, batches, tokenizer=tokenizer, texts=texts))

    @staticmethod
    def _wer(
        batch: Batch,
        scores: torch.Tensor,
        lengths: torch.Tensor,
        tokenizer: Tokenizer,
        ref: dict[str, list[str]],
        hyp: dict[str, list[str]],
        texts: dict[str, str],
    ) -> None:
        for utt, ids in zip(batch.utts, greedy_ctc(scores, lengths), strict=True):
            hyp[utt] = tokenizer.decode(ids).split()
            ref[utt] = texts[utt].split()

    @staticmethod
    def _word_errors(ref: dict[str, list[str]], hyp: dict[str, list[str]]) -> dict[str, float]:
        words = score_texts(ref, hyp).words
        return {"word_errors": float(words.errors), "ref_words": float(words.ref_words)}

    @staticmethod
    def _wer_of(sums: dict[str, float]) -> float:
        # As ErrorCounts.wer: errors x 100 when there are no reference words.
        return 100.0 * sums["word_errors"] / max(sums["ref_words"], 1.0)


class CtcObjective(Objective):
    """CTC on token targets (``zero_infinity`` guards inputs too short for their targets)."""

    name = "ctc"
    decodes_from = "ctc"
    trains = "ctc"

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return _summed_ctc(model(batch.feats, batch.lengths), batch) / batch.norm

    @torch.no_grad()
    def accumulate(
        self, model: nn.Module, batches: Iterable[Batch], *, tokenizer: Tokenizer, texts: dict[str, str]
    ) -> dict[str, float]:
        total, count = 0.0, 0
        ref: dict[str, list[str]] = {}
        hyp: dict[str, list[str]] = {}
        for batch in batches:
            out = model(batch.feats, batch.lengths)
            total += float(_summed_ctc(out, batch))
            count += len(batch.utts)
            self._wer(batch, out["ctc"], out["lengths"], tokenizer, ref, hyp, texts)
        return {"loss_sum": total, "utts": float(count), **self._word_errors(ref, hyp)}

    def metrics(self, sums: dict[str, float]) -> dict[str, float]:
        return {"loss": sums["loss_sum"] / max(sums["utts"], 1.0), "wer": self._wer_of(sums)}


class FrameCEObjective(Objective):
    """Frame cross-entropy of the ``frame`` head on ``batch.frame_targets`` ``(B, T')``.

    Args:
        token_classes: the classes are the tokenizer's units with blank 0 (alignments made
            by the forced-alignment stage), so the frame head also decodes to words.
    """

    name = "ce"
    trains = "frame"

    def __init__(self, *, token_classes: bool = False) -> None:
        self.token_classes = token_classes
        self.decodes_from = "frame" if token_classes else None

    @staticmethod
    def _logits(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        out = model(batch.feats, batch.lengths)
        if "frame" not in out:
            raise ConfigError(
                "objective=ce needs the model's frame-classification head; set "
                "model.num_classes to the number of alignment classes"
            )
        if batch.frame_targets is None:
            raise ConfigError(
                "objective=ce needs alignment targets; set align.train and "
                "align.dev (see docs/alignments-and-kaldi.md)"
            )
        logits = out["frame"][:, : batch.frame_targets.shape[1]]
        return logits, out["lengths"]

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        logits, _ = self._logits(model, batch)
        assert batch.frame_targets is not None  # _logits checked
        return (
            nn.functional.cross_entropy(
                # float32 whatever the step's arithmetic (train.precision)
                logits.flatten(0, 1).float(),
                batch.frame_targets.flatten(),
                ignore_index=IGNORE,
                reduction="sum",
            )
            / batch.norm
        )

    @torch.no_grad()
    def accumulate(
        self, model: nn.Module, batches: Iterable[Batch], *, tokenizer: Tokenizer, texts: dict[str, str]
    ) -> dict[str, float]:
        total, frames, correct = 0.0, 0, 0
        ref: dict[str, list[str]] = {}
        hyp: dict[str, list[str]] = {}
        for batch in batches:
            logits, lengths = self._logits(model, batch)
            targets = batch.frame_targets
            assert targets is not None  # _logits checked
            total += float(
                nn.functional.cross_entropy(
                    logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum"
                )
            )
            valid = targets != IGNORE
            frames += int(valid.sum())
            correct += int(((logits.argmax(dim=-1) == targets) & valid).sum())
            if self.token_classes:
                self._wer(batch, logits, lengths, tokenizer, ref, hyp, texts)
        sums = {"loss_sum": total, "frames": float(frames), "correct": float(correct)}
        if self.token_classes:
            sums.update(self._word_errors(ref, hyp))
        return sums

    def metrics(self, sums: dict[str, float]) -> dict[str, float]:
        frames = max(sums["frames"], 1.0)
        metrics = {"loss": sums["loss_sum"] / frames, "frame_acc": 100.0 * sums["correct"] / frames}
        if self.token_classes:
            metrics["wer"] = self._wer_of(sums)
        return metrics


def build_objective(name: str, *, token_classes: bool = False) -> Objective:
    """The objective called ``name``, one of :data:`asrkit.choices.OBJECTIVES` (``ctc``, or
    ``ce``, whose ``token_classes`` says whether frame classes are tokenizer units)."""
    if name == "ctc":
        return CtcObjective()
    return FrameCEObjective(token_classes=token_classes)


def _summed_ctc(out: dict[str, torch.Tensor], batch: Batch) -> torch.Tensor:
    """The batch's CTC loss summed over utterances (``zero_infinity`` guards too-short inputs)."""
    return nn.functional.ctc_loss(
        out["ctc"].float().transpose(0, 1),  # float32 whatever the step's arithmetic
        batch.targets,
        out["lengths"],
        batch.target_lengths,
        blank=0,
        reduction="sum",
        zero_infinity=True,
    )
