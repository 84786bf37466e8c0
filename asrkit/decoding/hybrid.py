"""Hybrid (NN-HMM) recognition: a frame model's posteriors through an HCLG graph.

Shared by the hybrid pipeline's decoding stage and ``asrkit transcribe``: the network's
log posteriors over the tied states minus their log priors (counted from the training
alignments) are the decoder's acoustic log-likelihoods (Kaldi's "scaled likelihoods");
:class:`HybridSettings` records, in ``exp/<name>/hybrid_decoding.json``, which graph,
transition model and priors were used and the LM weight and word penalty picked on dev.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from asrkit.data.io import load_record, save_record

HYBRID_SETTINGS = "hybrid_decoding.json"
PRIOR_COUNTS = "ali_train_pdf.counts"


@dataclass
class HybridSettings:
    """What stage 7 decoded with. Paths are absolute, or relative to the experiment dir.

    Attributes:
        graph: the graph dir (``HCLG.fst``, ``words.txt``).
        transitions: the ``final.mdl`` whose transition ids the graph uses.
        counts: the pdf counts of the training alignments (``ali_train_pdf.counts``).
        lm_weight / word_penalty: the pair picked on ``tuned_on``.
    """

    graph: str
    transitions: str
    counts: str = PRIOR_COUNTS
    lm_weight: float = 10.0
    word_penalty: float = 0.0
    acoustic_scale: float = 0.1
    beam: float = 13.0
    lattice_beam: float = 8.0
    max_active: int = 7000
    prior_floor: float = 1e-10
    prior_scale: float = 1.0
    model: str = "model.pt"
    tuned_on: str = ""

    def save(self, exp_dir: str | Path) -> None:
        save_record(Path(exp_dir) / HYBRID_SETTINGS, self)

    @classmethod
    def load(cls, exp_dir: str | Path) -> HybridSettings | None:
        return load_record(
            Path(exp_dir) / HYBRID_SETTINGS,
            cls,
            what="hybrid decoding settings",
            fix="rerun the hybrid recipe's stage 7 (decode) to write them again",
        )


def read_counts(path: str | Path) -> np.ndarray:
    """A Kaldi counts vector file (``[ c0 c1 ... ]``) as float64."""
    text = Path(path).read_text().replace("[", " ").replace("]", " ")
    return np.array([float(x) for x in text.split()], dtype=np.float64)


class HybridScorer:
    """Frame logits ``(T', C)`` -> decoder log-likelihoods ``(T, C)``: log-softmax, minus
    the log priors, repeated back to the alignments' frame rate when the model
    subsamples by ``subsample``."""

    def __init__(
        self,
        log_priors: np.ndarray,
        *,
        subsample: int = 1,
        prior_floor: float = 1e-10,
        prior_scale: float = 1.0,
    ) -> None:
        self.log_priors = log_priors
        self.subsample = subsample
        self.prior_floor, self.prior_scale = prior_floor, prior_scale

    def __call__(self, logits: torch.Tensor, num_frames: int) -> np.ndarray:
        from asrkit.decoding.wfst import pdf_log_likelihoods

        post = logits.float().log_softmax(dim=-1).numpy()
        if self.subsample > 1:
            post = np.repeat(post, self.subsample, axis=0)[:num_frames]
        return pdf_log_likelihoods(
            post, self.log_priors, prior_floor=self.prior_floor, prior_scale=self.prior_scale
        )


class HybridRecognizer:
    """Decodes with the settings stage 7 recorded (see :class:`HybridSettings`)."""

    def __init__(self, exp_dir: str | Path, settings: HybridSettings, *, subsample: int = 1) -> None:
        from asrkit.decoding.wfst import WfstDecoder
        from asrkit.gmm.graph import load_graph_dir
        from asrkit.gmm.model_io import read_model
        from asrkit.targets.forced_align import log_priors

        exp_dir = Path(exp_dir)

        def here(path: str) -> Path:
            return Path(path) if Path(path).is_absolute() else exp_dir / path

        self.settings = settings
        transitions = read_model(here(settings.transitions), with_gmm=False)
        self.decoder = WfstDecoder.from_graph_dir(
            load_graph_dir(here(settings.graph)),
            transitions,
            beam=settings.beam,
            lattice_beam=settings.lattice_beam,
            max_active=settings.max_active,
            acoustic_scale=settings.acoustic_scale,
        )
        counts = read_counts(here(settings.counts))
        self.scorer = HybridScorer(
            log_priors(counts),
            subsample=subsample,
            prior_floor=settings.prior_floor,
            prior_scale=settings.prior_scale,
        )

    def transcribe(self, logits: torch.Tensor, num_frames: int, *, utt: str = "?") -> str:
        lattice = self.decoder.decode_lattice(self.scorer(logits, num_frames), utt=utt)
        ids = lattice.best_path(self.settings.lm_weight, word_penalty=self.settings.word_penalty)
        return " ".join(self.decoder.word_strings(ids))
