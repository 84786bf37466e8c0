"""Frame targets from a CTC model, written the way Kaldi writes alignments.

:func:`ctc_forced_align` takes a model's CTC log-probabilities and a transcript's
token ids and returns the best CTC path (one label per output frame: the token
being emitted or the blank 0). :func:`write_alignment_dir` writes such labels as a
Kaldi alignment dir — ``ali.ark`` (binary int vectors, as ``ali-to-pdf`` writes
them), ``ali.scp`` (byte offsets), ``frame_subsampling_factor`` and
``num_classes`` — so the CE training stage reads them exactly as it reads Kaldi's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
import torchaudio.functional as taf

from asrkit.data.datadir import write_kaldi_map
from asrkit.data.kaldi_ark import write_ark


def ctc_forced_align(log_probs: torch.Tensor, tokens: Sequence[int]) -> np.ndarray | None:
    """The Viterbi CTC path of ``tokens`` through ``log_probs``.

    Args:
        log_probs: ``(T', V)`` CTC log-probabilities of one utterance (blank = 0).
        tokens: the transcript's token ids (1..V-1).

    Returns:
        ``(T',)`` int32 labels (token or blank per frame), or None when the utterance
        has too few frames for its transcript (CTC needs one per token plus one between
        repeated tokens).
    """
    frames = log_probs.shape[0]
    repeats = sum(1 for a, b in zip(tokens, tokens[1:], strict=False) if a == b)
    if not tokens or frames < len(tokens) + repeats:
        return None
    targets = torch.tensor([list(tokens)], dtype=torch.int32)
    path, _ = taf.forced_align(log_probs[None].float().cpu(), targets, blank=0)
    return path[0].numpy().astype(np.int32)


def write_alignment_dir(
    out_dir: str | Path,
    alignments: Mapping[str, np.ndarray],
    *,
    subsampling_factor: int,
    num_classes: int,
    tokenizer_dir: str | Path | None = None,
) -> Path:
    """Write ``alignments`` (utterance -> labels) as a Kaldi alignment dir, atomically.

    Everything is written into ``<out_dir>.tmp`` first and renamed into place, so an
    interrupted run leaves no directory that looks complete. ``tokenizer_dir``, when
    given, is copied in as ``tokenizer/``: the classes are that tokenizer's units with
    the CTC blank as 0 (so a model trained on them decodes to words).
    """
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    scp = write_ark(tmp / "ali.ark", ((u, alignments[u]) for u in sorted(alignments)), kind="int")
    # The scp names the ark where it will be once the directory is renamed into place.
    final_ark = out_dir.resolve() / "ali.ark"
    write_kaldi_map(tmp / "ali.scp", {u: f"{final_ark}:{e.rsplit(':', 1)[1]}" for u, e in scp.items()})
    (tmp / "frame_subsampling_factor").write_text(f"{subsampling_factor}\n")
    (tmp / "num_classes").write_text(f"{num_classes}\n")
    if tokenizer_dir is not None:
        shutil.copytree(tokenizer_dir, tmp / "tokenizer")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return out_dir


def class_counts(alignments: Mapping[str, np.ndarray], num_classes: int) -> np.ndarray:
    """Frames per class over all ``alignments`` (``(num_classes,)`` float64)."""
    counts = np.zeros(num_classes, dtype=np.float64)
    for labels in alignments.values():
        counts += np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes)[:num_classes]
    return counts


def log_priors(counts: np.ndarray, *, floor: float = 1e-8) -> np.ndarray:
    """Log class priors from frame counts; unseen classes get ``floor`` (never -inf)."""
    priors = counts / max(float(counts.sum()), 1.0)
    return np.log(np.maximum(priors, floor)).astype(np.float32)


def write_counts(path: str | Path, counts: np.ndarray) -> None:
    """Kaldi text vector ``[ c0 c1 ... ]``, as nnet1's ``analyze-counts`` writes
    ``ali_train_pdf.counts`` (read by ``--class-frame-counts``)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("[ " + " ".join(f"{int(c)}" for c in counts) + " ]\n", encoding="utf-8")
    os.replace(tmp, path)
