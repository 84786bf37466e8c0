"""Settings of the decoding stage (the ``decode`` config key)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DecodeConfig:
    """Settings of the ``decode`` key.

    Attributes:
        sets: what to decode: data dir names under ``data_root`` or paths to any
            Kaldi data dir (with ``feats.scp``, or just ``wav.scp`` — features are
            then computed from the audio with the model's settings). Empty: the
            recipe's dev and test sets.
        max_frames: cap on padded input frames per decoding batch.
        model: the model bundle inside the experiment dir.
    """

    sets: list[str] = field(default_factory=list)
    max_frames: int = 40000
    model: str = "model.pt"
