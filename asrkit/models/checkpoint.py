"""Checkpoints and the model bundle, written atomically, read with ``weights_only=True``.

A checkpoint holds everything needed to continue training (model, optimizer,
progress, RNG seed bookkeeping) and a ``meta`` dict that rebuilds the model
without the recipe config: the model's constructor arguments, the feature
settings, the CMVN mode and the tokenizer directory. ``model.pt`` in an
experiment dir is the bundle that decoding and ``asrkit transcribe`` use: the
best checkpoint's weights and its ``meta``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from asrkit.data.io import atomic_writer
from asrkit.errors import DataError
from asrkit.models.lstm import LSTMAcousticModel


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """``torch.save`` through :func:`~asrkit.data.io.atomic_writer` (a temporary file beside
    ``path``, synced, renamed over it). The same state gives the same bytes (saved through
    a file object, the archive's inner folder is not named after the temporary file), so
    checksums compare models."""
    with atomic_writer(path, "wb") as handle:
        torch.save(state, handle)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint without unpickling arbitrary objects.

    Raises:
        DataError: missing or unreadable file, naming it.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: checkpoint not found; run the training stage first")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for corrupt files
        raise DataError(
            f"{path}: cannot load checkpoint ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:200]}); it is corrupt or not an asrkit "
            "checkpoint — retrain or restore it"
        ) from None


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """A bundle whose weights are the element-wise mean of the checkpoints' models.

    Raises:
        DataError: no paths, or checkpoints of different models.
    """
    if not paths:
        raise DataError("no checkpoints to average; train first or lower train.average_last")
    states = [load_checkpoint(p) for p in paths]
    first = states[0]["model"]
    for path, state in zip(paths[1:], states[1:], strict=True):
        if state["model"].keys() != first.keys():
            raise DataError(f"{path}: a different model than {paths[0]}; average checkpoints of one run only")
    mean = {k: sum(s["model"][k].double() for s in states).div(len(states)).to(first[k].dtype) for k in first}
    return {"model": mean, "meta": states[-1]["meta"]}


def build_from_meta(meta: dict[str, Any], *, path: str | Path = "?") -> LSTMAcousticModel:
    """The model described by a checkpoint's ``meta['model']``.

    Raises:
        DataError: ``meta`` does not describe a model (naming ``path``).
    """
    try:
        args = dict(meta["model"])
        return LSTMAcousticModel(args.pop("input_dim"), args.pop("num_tokens"), **args)
    except (KeyError, TypeError, ValueError) as err:
        raise DataError(
            f"{path}: its 'meta' does not describe an asrkit model ({type(err).__name__}: "
            f"{err}); it was not written by asrkit's training stage — retrain or "
            "point at exp/<name>/model.pt"
        ) from None


def _asrkit_state(path: str | Path, *, need_meta: bool) -> dict[str, Any]:
    state = load_checkpoint(path)
    wanted = ("model", "meta") if need_meta else ("model",)
    if (
        not isinstance(state, dict)
        or any(k not in state for k in wanted)
        or not isinstance(state["model"], dict)
    ):
        raise DataError(
            f"{path}: not an asrkit model (no {'/'.join(repr(k) for k in wanted)} "
            "entries); point at exp/<name>/model.pt or a checkpoint under "
            "exp/<name>/checkpoints/"
        )
    return state


def load_model_bundle(
    path: str | Path, *, device: torch.device | str = "cpu"
) -> tuple[LSTMAcousticModel, dict[str, Any]]:
    """Rebuild the model saved in a bundle or checkpoint; returns ``(model in eval mode, meta)``."""
    state = _asrkit_state(path, need_meta=True)
    model = build_from_meta(state["meta"], path=path)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as err:
        raise DataError(
            f"{path}: its weights do not fit the model its 'meta' describes "
            f"({' '.join(str(err).split())[:200]}); the file is damaged — retrain "
            "or restore it"
        ) from None
    return model.to(device).eval(), state["meta"]


def init_from(model: torch.nn.Module, path: str | Path) -> list[str]:
    """Copy the parameters of the model saved at ``path`` (a bundle or checkpoint) into
    ``model`` where name and shape match; returns the names copied.

    Raises:
        DataError: unreadable file, or nothing in it fits ``model``.
    """
    source = _asrkit_state(path, need_meta=False)["model"]
    own = model.state_dict()
    copied = [k for k, v in source.items() if k in own and own[k].shape == v.shape]
    if not copied:
        raise DataError(
            f"{path}: none of its parameters fits this model (names or shapes "
            "differ); train.init_from needs a model of the same shape"
        )
    model.load_state_dict({**own, **{k: source[k] for k in copied}})
    return copied
