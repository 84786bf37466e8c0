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


#: Settings a member's overrides may not change: the stage sets them for each member.
MEMBER_OWNED = ("name", "exp_dir", "ensemble", "train.num_threads", "resume")


@dataclass
class EnsembleConfig:
    """Settings of system combination (the ``ensemble`` group; stage 8).

    Attributes:
        members: the other systems, each a string of Hydra overrides applied on top of
            this experiment's own (``"seed=2"``, ``"tokenizer=char"``). Stage 8 trains
            and decodes each (stages 3-5) in ``<exp_dir>/member<i>/``, then combines
            them with this experiment's model. No members: no combination. A member
            without ``seed=`` gets this experiment's seed + 1000 x i, so an empty string
            is this experiment again with another seed.
        jobs: members trained at once; each gets ``cores // jobs`` threads.
        nbest: transcripts each system proposes per utterance.
        lm_weights / word_scores: the grid swept on the dev set (``decode.tune_set``).
    """

    members: list[str] = field(default_factory=list)
    jobs: int = 2
    nbest: int = 10
    lm_weights: list[float] = field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0])
    word_scores: list[float] = field(default_factory=lambda: [-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0])

    def check(self) -> None:
        if self.jobs < 1 or self.nbest < 1:
            raise ConfigError(f"ensemble.jobs={self.jobs} and ensemble.nbest={self.nbest} must be >= 1")
        if not self.lm_weights or not self.word_scores:
            raise ConfigError("ensemble.lm_weights and ensemble.word_scores need at least one value")
        for i, member in enumerate(self.members, 1):
            for item in member.split():
                key = item.split("=", 1)[0].lstrip("+~")
                if "=" not in item or not key:
                    raise ConfigError(
                        f"ensemble.members[{i - 1}]={member!r}: {item!r} is not a KEY=VALUE override"
                    )
                if any(key == owned or key.startswith(owned + ".") for owned in MEMBER_OWNED):
                    raise ConfigError(
                        f"ensemble.members[{i - 1}]={member!r}: {key} is set by stage 8 for "
                        f"each member ({', '.join(MEMBER_OWNED)}); leave it out"
                    )
