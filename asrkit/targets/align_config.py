"""Settings of the ``align`` key: alignment targets for CE training and the forced-alignment stage."""

from __future__ import annotations

from dataclasses import dataclass, field

from asrkit.errors import ConfigError
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
        fbank: with ``align.fmllr``, the fbank features are part of the input (false: the
            fMLLR features, and the i-vector, alone, as Kaldi's nnet1 DNNs read fMLLR).
        inputs_from: with ``align.fmllr``, the experiment dir whose joined input
            (``data_fmllr/``, written by its training stage) this one trains on instead of
            writing its own; empty: its own. Stage 8 sets it for a hybrid experiment's
            ensemble members, so every member reads the same input (and i-vectors) as the
            experiment that decodes them.
        ivector_dim: with ``align.fmllr``, each frame also gets its speaker's i-vector of
            this many dimensions (0: none; Kaldi's nnet recipes use 100): a UBM and an
            extractor trained on the training set's speaker-independent LDA+MLLT features
            (:mod:`asrkit.gmm.ivector`), one i-vector per speaker from its own audio.
        ivector_gauss: the UBM's Gaussians.
        ivector_max_utts: the training set's i-vectors come from pseudo-speakers of at most
            this many of a speaker's utterances (0: all of them, one i-vector a speaker), as
            Kaldi's nnet recipes extract theirs (``utts-per-spk-max 2``): noisier training
            i-vectors, so the network cannot learn the training speakers by them. The dev
            and decoded sets keep one i-vector a speaker.
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
    fbank: bool = True
    inputs_from: str = ""
    ivector_dim: int = 0
    ivector_gauss: int = 256
    ivector_max_utts: int = 0

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
        if self.ivector_dim < 0 or self.ivector_gauss < 1:
            raise ConfigError(
                f"align.ivector_dim={self.ivector_dim}, align.ivector_gauss={self.ivector_gauss}: "
                "the dimension >= 0 (0: no i-vectors) and the Gaussians >= 1"
            )
        if self.ivector_max_utts < 0:
            raise ConfigError(
                f"align.ivector_max_utts={self.ivector_max_utts}: give 0 (one i-vector a speaker) "
                "or the most utterances a training i-vector is extracted from (Kaldi's recipes: 2)"
            )
        if not self.fbank and not self.fmllr:
            raise ConfigError(
                "align.fbank=false needs align.fmllr=true: without the fMLLR features the "
                "network would have no input"
            )
        if self.inputs_from and not self.fmllr:
            raise ConfigError(
                f"align.inputs_from={self.inputs_from!r} needs align.fmllr=true: it names the "
                "experiment whose joined fbank + fMLLR input this one trains on"
            )
        if self.ivector_dim and not self.fmllr:
            raise ConfigError(
                f"align.ivector_dim={self.ivector_dim} needs align.fmllr=true: the i-vectors join "
                "the fbank + fMLLR input, from the SAT system's LDA+MLLT features"
            )
