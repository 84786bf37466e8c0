"""Where tensors live: the one place a device setting becomes a :class:`torch.device`."""

from __future__ import annotations

import torch

from asrkit.errors import ConfigError

#: The values of ``train.device`` and ``--device``.
DEVICES = ("auto", "cpu", "cuda")


def pick_device(name: str) -> torch.device:
    """``auto`` (CUDA when a GPU is visible), ``cpu`` or ``cuda``.

    Raises:
        ConfigError: ``cuda`` without a visible GPU, or an unknown name.
    """
    if name not in DEVICES:
        raise ConfigError(f"device {name!r} is unknown; choose {', '.join(DEVICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device cuda was asked for but no CUDA device is visible; use the CPU "
            "(train.device=auto or cpu, --device cpu)"
        )
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
