"""Settings of the decoding stage (the ``decode`` config group)."""

from __future__ import annotations

from dataclasses import dataclass, field

from asrkit.errors import ConfigError

METHODS = ("greedy", "beam", "beam_lm")


@dataclass
class DecodeConfig:
    """Settings of the ``decode`` group (``decode=greedy|beam|beam_lm``).

    Attributes:
        method: ``greedy`` (best path), ``beam`` (lexicon-free beam search over units)
            or ``beam_lm`` (lexicon + word n-gram LM, tuned on the dev set). Greedy
            results are always written (``decode_<set>/``); the others go to
            ``decode_<method>_<set>/``.
        sets: what to decode: data dir names under ``data_root`` or paths to any
            Kaldi data dir (with ``feats.scp``, or just ``wav.scp`` — features are
            then computed from the audio with the model's settings). Empty: the
            recipe's dev and test sets.
        max_frames: cap on padded input frames per decoding batch.
        model: the model bundle inside the experiment dir.
        beam_size / beam_threshold: hypotheses kept / their score window.
        lm_weights / word_scores: the grid swept on ``tune_set`` (``beam_lm``); every
            other set is decoded with the pair that scored best there.
        tune_set: the set the LM weight and word score are chosen on (never a test set).
    """

    method: str = "greedy"
    sets: list[str] = field(default_factory=list)
    max_frames: int = 40000
    model: str = "model.pt"
    beam_size: int = 50
    beam_threshold: float = 25.0
    lm_weights: list[float] = field(default_factory=lambda: [0.5])
    word_scores: list[float] = field(default_factory=lambda: [0.0])
    tune_set: str = ""

    def check(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"decode.method={self.method!r} is unknown; choose one of {list(METHODS)}")
        if self.beam_size < 1 or self.beam_threshold <= 0:
            raise ConfigError(
                f"decode.beam_size={self.beam_size} must be >= 1 and "
                f"decode.beam_threshold={self.beam_threshold} positive"
            )
        if not self.lm_weights or not self.word_scores:
            raise ConfigError("decode.lm_weights and decode.word_scores need at least one value")
