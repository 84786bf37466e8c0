"""Settings of the ``align`` key: alignment targets for CE training and the forced-alignment stage."""

from __future__ import annotations

from dataclasses import dataclass, field

from asrkit.targets.alignments import AlignmentCheckConfig


@dataclass
class AlignConfig:
    """Settings of the ``align`` key.

    Attributes:
        train / dev: the training / dev set's frame targets for ``objective=ce`` (and the
            training set's for the class priors of the log-likelihood stage): a Kaldi
            rspecifier (``ark:ali.ark``, ``"ark:gunzip -c ali.1.gz |"``, ``scp:ali.scp``) or
            an alignment dir (``ali.scp``, ``ali.*.gz``, ``ali.ark``); a Kaldi GMM dir
            (``exp/tri3_ali``: transition-ids beside ``final.mdl``) is read as pdf-ids through
            its model, with the model's pdfs as the classes. Empty: this experiment's
            ``ali_<set>/`` written by the forced-alignment stage.
        subsampling_factor: feature frames per alignment frame (0 = the alignment dir's
            ``frame_subsampling_factor`` file, else 1).
        tolerance: alignment frames an utterance may be off by (padded / trimmed).
        num_classes: classes of the targets (0 = the dir's ``num_classes`` file, else the
            largest label + 1).
        max_missing: fraction of utterances allowed to have no alignment (left out, and
            reported).
        sets: what the forced-alignment stage aligns (set names or data dir paths);
            empty: the training and dev sets.
        model: the CTC model bundle (in the experiment dir) that aligns.
        fmllr: the hybrid network's input joins each frame's fbank with the alignment
            system's fMLLR features (a SAT system's dir: ``final.mat`` and the speakers'
            ``trans.1``; :mod:`asrkit.gmm.nnet_input`), IBM's speaker-adapted input.
            Decoded sets take their speakers' transforms from the SAT system's two-pass
            decoding (stage 5).
    """

    train: str = ""
    dev: str = ""
    subsampling_factor: int = 0
    tolerance: int = 2
    num_classes: int = 0
    max_missing: float = 0.0
    sets: list[str] = field(default_factory=list)
    model: str = "model.pt"
    fmllr: bool = False

    def check_config(self, *, num_classes: int = 0) -> AlignmentCheckConfig:
        """The checker's settings (``num_classes``, when non-zero, overrides the key's)."""
        cfg = AlignmentCheckConfig(
            subsampling_factor=self.subsampling_factor,
            tolerance=self.tolerance,
            num_classes=num_classes or self.num_classes,
            max_missing=self.max_missing,
        )
        cfg.check()
        return cfg

    def check(self) -> None:
        self.check_config()
