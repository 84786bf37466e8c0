"""(B)LSTM acoustic model with a CTC head and a frame-classification head.

Input features ``(B, T, F)`` are optionally stacked ``stack`` frames at a time
and subsampled by ``subsample`` (stacking 3 and keeping every 3rd, as in
low-frame-rate acoustic models), run through ``layers`` (B)LSTM layers, an
optional linear bottleneck, then:

* ``ctc``: log-probabilities over ``num_tokens + 1`` symbols (blank = 0);
* ``frame``: logits over ``num_classes`` frame-level targets (for alignment
  targets such as Kaldi pdf-ids), when ``num_classes > 0``.

On the CPU the LSTM runs on the padded batch, one direction and layer at a time, with each
utterance's frames reversed within its own length for the backward direction
(:meth:`LSTMAcousticModel._lstm_padded`): the same outputs as a packed sequence (to float
rounding), but through PyTorch's dense LSTM kernel, which trains ~4x faster on the CPU than
the per-step loop packed sequences take there. Elsewhere (cuDNN handles packed sequences
natively) the packed path is used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from asrkit.errors import ConfigError


@dataclass
class ModelConfig:
    """Settings of the ``model`` config group.

    Attributes:
        size: a name in :data:`MODEL_SIZES` giving the defaults below; the other
            fields, when set (non-zero / non-null), override the named size.
        hidden: LSTM cells per direction.
        layers: stacked LSTM layers.
        bidirectional: BLSTM when true.
        bottleneck: linear bottleneck size after the LSTM (0 = none).
        stack / subsample: frames stacked together / frame-rate reduction.
        dropout: dropout between layers.
        num_classes: frame-classification outputs (0 = no frame head).
    """

    size: str = "demo"
    hidden: int = 0
    layers: int = 0
    bidirectional: bool = True
    bottleneck: int = -1
    stack: int = 0
    subsample: int = 0
    dropout: float = -1.0
    num_classes: int = 0


class LSTMAcousticModel(nn.Module):
    """LSTM encoder with CTC and frame-classification heads.

    Args:
        input_dim: feature dimension ``F``.
        num_tokens: output tokens, not counting the CTC blank (index 0).
        hidden, layers, bidirectional, bottleneck, stack, subsample, dropout,
        num_classes: see :class:`ModelConfig`.
    """

    def __init__(
        self,
        input_dim: int,
        num_tokens: int,
        *,
        hidden: int,
        layers: int,
        bidirectional: bool = True,
        bottleneck: int = 0,
        stack: int = 1,
        subsample: int = 1,
        dropout: float = 0.0,
        num_classes: int = 0,
    ) -> None:
        super().__init__()
        if stack < 1 or subsample < 1 or hidden < 1 or layers < 1:
            raise ConfigError(
                f"model sizes must be positive (hidden={hidden}, layers={layers}, "
                f"stack={stack}, subsample={subsample})"
            )
        self.input_dim, self.num_tokens, self.num_classes = input_dim, num_tokens, num_classes
        #: Constructor arguments, saved in checkpoints so the model rebuilds without a config.
        self.args = {
            "input_dim": input_dim,
            "num_tokens": num_tokens,
            "hidden": hidden,
            "layers": layers,
            "bidirectional": bidirectional,
            "bottleneck": bottleneck,
            "stack": stack,
            "subsample": subsample,
            "dropout": dropout,
            "num_classes": num_classes,
        }
        self.stack, self.subsample = stack, subsample
        #: Run the LSTM on the padded batch on the CPU (:meth:`_lstm_padded`); False takes
        #: the packed-sequence path everywhere (the benchmark's baseline).
        self.padded_on_cpu = True
        self.lstm = nn.LSTM(
            input_dim * stack,
            hidden,
            num_layers=layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if layers > 1 else 0.0,
        )
        width = hidden * (2 if bidirectional else 1)
        self.dropout = nn.Dropout(dropout)
        self.bottleneck = nn.Linear(width, bottleneck) if bottleneck > 0 else None
        width = bottleneck if bottleneck > 0 else width
        self.ctc_head = nn.Linear(width, num_tokens + 1)
        self.frame_head = nn.Linear(width, num_classes) if num_classes > 0 else None

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Frames after stacking/subsampling for input ``lengths`` ``(B,)``."""
        return torch.div(lengths + self.subsample - 1, self.subsample, rounding_mode="floor")

    def _stack(self, feats: torch.Tensor) -> torch.Tensor:
        # (B, T, F) -> (B, ceil(T/s), F*stack): output frame i holds input frames
        # i*s .. i*s+stack-1 (the batch's last frame repeated past its end). Only the frames
        # kept are stacked (one gather), not every frame before subsampling.
        if self.stack == 1:
            return feats[:, :: self.subsample]
        batch, frames, dim = feats.shape
        kept = -(-frames // self.subsample)
        starts = torch.arange(kept, device=feats.device) * self.subsample
        index = (starts[:, None] + torch.arange(self.stack, device=feats.device)).clamp_(max=frames - 1)
        return feats[:, index.reshape(-1)].reshape(batch, kept, self.stack * dim)

    def encode(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder output ``(B, T', D)`` and lengths ``(B,)`` for features ``(B, T, F)``."""
        x = self._stack(feats)
        out_lengths = self.output_lengths(lengths)
        if x.device.type == "cpu" and self.padded_on_cpu:
            y = self._lstm_padded(x, out_lengths)
        else:
            packed = nn.utils.rnn.pack_padded_sequence(
                x, out_lengths.cpu(), batch_first=True, enforce_sorted=False
            )
            y, _ = self.lstm(packed)
            y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        y = self.dropout(y)
        if self.bottleneck is not None:
            y = self.bottleneck(y)
        return y, out_lengths

    def _lstm_padded(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``self.lstm`` over padded ``x`` ``(B, T, D)`` with valid ``lengths``, as if packed.

        The forward direction never sees a frame after ``t``, so trailing padding cannot
        reach a valid output. The backward direction runs on each utterance reversed within
        its length (padding stays at the end) and its outputs are reversed back. Padding
        frames of the result are zero, as ``pad_packed_sequence`` leaves them.
        """
        lstm = self.lstm
        batch, frames, _ = x.shape
        steps = torch.arange(frames, device=x.device)
        lengths = lengths.to(x.device)
        backwards = lengths[:, None] - 1 - steps[None, :]
        # Index of the frame each position reads when reversed; padding reads itself.
        backwards = torch.where(backwards >= 0, backwards, steps[None, :])
        valid = (steps[None, :] < lengths[:, None]).unsqueeze(-1)

        def reverse(y: torch.Tensor) -> torch.Tensor:
            return torch.gather(y, 1, backwards.unsqueeze(-1).expand(-1, -1, y.shape[-1]))

        zeros = x.new_zeros(1, batch, lstm.hidden_size)
        directions = ["", "_reverse"] if lstm.bidirectional else [""]
        y = x
        for layer in range(lstm.num_layers):
            if layer > 0:
                y = nn.functional.dropout(y, lstm.dropout, self.training)
            outputs = []
            for suffix in directions:
                weights = [
                    getattr(lstm, f"{name}_l{layer}{suffix}")
                    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
                ]
                source = reverse(y) if suffix else y
                # One unidirectional layer (the op nn.LSTM itself calls).
                out, _, _ = torch.lstm(
                    source, (zeros, zeros), weights, True, 1, 0.0, self.training, False, True
                )
                outputs.append(reverse(out) if suffix else out)
            y = torch.cat(outputs, dim=-1) if len(outputs) > 1 else outputs[0]
        return y * valid

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        """Run the model.

        Args:
            feats: ``(B, T, F)`` normalised features.
            lengths: ``(B,)`` valid frames per utterance.

        Returns:
            ``{"ctc": (B, T', num_tokens+1) log-probs, "lengths": (B,)}`` plus
            ``"frame": (B, T', num_classes)`` logits when the frame head exists.
        """
        y, out_lengths = self.encode(feats, lengths)
        out = {"ctc": self.ctc_head(y).log_softmax(dim=-1), "lengths": out_lengths}
        if self.frame_head is not None:
            out["frame"] = self.frame_head(y)
        return out


def blstm_tiny() -> dict:
    """For unit tests: 1 BLSTM layer of 16 cells per direction."""
    return {"hidden": 16, "layers": 1, "bottleneck": 0, "stack": 1, "subsample": 1, "dropout": 0.0}


def blstm_demo() -> dict:
    """The ``make demo`` model: 3 BLSTM layers x 192 cells, stack/subsample 3 (~2.6M params)."""
    return {"hidden": 192, "layers": 3, "bottleneck": 0, "stack": 3, "subsample": 3, "dropout": 0.2}


def blstm_large() -> dict:
    """The larger AN4 model: 4 BLSTM layers x 256 cells, stack/subsample 3 (~5.7M params)."""
    return {"hidden": 256, "layers": 4, "bottleneck": 0, "stack": 3, "subsample": 3, "dropout": 0.3}


def blstm_paper() -> dict:
    """The IBM Switchboard size: 6 BLSTM layers x 512 cells per direction, 256 bottleneck."""
    return {"hidden": 512, "layers": 6, "bottleneck": 256, "stack": 1, "subsample": 1, "dropout": 0.0}


MODEL_SIZES: dict[str, Callable[[], dict]] = {
    "tiny": blstm_tiny,
    "demo": blstm_demo,
    "large": blstm_large,
    "paper": blstm_paper,
}


def build_model(cfg: ModelConfig, *, input_dim: int, num_tokens: int) -> LSTMAcousticModel:
    """The model named by ``cfg.size`` with ``cfg``'s explicit overrides applied."""
    return LSTMAcousticModel(
        input_dim, num_tokens, bidirectional=cfg.bidirectional, num_classes=cfg.num_classes, **model_args(cfg)
    )


def model_args(cfg: ModelConfig) -> dict:
    """The named size's shape (hidden, layers, bottleneck, stack, subsample, dropout) with
    ``cfg``'s explicit overrides applied."""
    if cfg.size not in MODEL_SIZES:
        raise ConfigError(f"model.size={cfg.size!r} is unknown; choose one of {sorted(MODEL_SIZES)}")
    args = MODEL_SIZES[cfg.size]()
    for name in ("hidden", "layers", "stack", "subsample"):
        if getattr(cfg, name) > 0:
            args[name] = getattr(cfg, name)
    if cfg.bottleneck >= 0:
        args["bottleneck"] = cfg.bottleneck
    if cfg.dropout >= 0:
        args["dropout"] = cfg.dropout
    return args
