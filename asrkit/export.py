"""A trained experiment as a directory to hand over: the files ``transcribe`` reads, and
nothing else, with a model card.

An experiment dir holds everything a recipe made (checkpoints, alignments, GMM systems,
decodes: hundreds of MB); recognising speech needs a few of them, and which ones depends on
the decoder (a CTC model with its tokenizer, lexicon and LM; a hybrid model with its HCLG,
transition model, priors, and for speaker-adapted input the GMM system that estimates
each speaker's transform). Rather than keep a second list of those files beside each
decoder, :func:`export` loads the decoder and recognises a generated second of audio
while Python's audit hook notes every file opened for reading; those under the
experiment dir are copied, keeping their paths, and the copy is checked by recognising the
same audio from it (the two transcripts must agree) before it is moved into place.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from asrkit.data.io import READ_EVENT, atomic_write
from asrkit.errors import ConfigError, DataError

log = logging.getLogger("asrkit.export")

#: The card written beside the exported files.
CARD = "MODEL_CARD.md"
#: Where the data licences come from (the corpora asrkit's recipes prepare).
LICENCES = {
    "an4": "CMU AN4: CMU BSD-style licence, free for any use; keep its copyright notice",
    "speechocean762": "speechocean762: CC BY 4.0 (cite Zhang et al., Interspeech 2021)",
}

_watching: list[set[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == READ_EVENT and _watching:
        _watching[-1].add(str(args[0]))
    elif event == "open" and _watching and args and isinstance(args[0], (str, bytes, os.PathLike)):
        mode = args[1] if len(args) > 1 else "r"
        if not isinstance(mode, str) or not any(c in mode for c in "wax+"):
            _watching[-1].add(os.fsdecode(args[0]))


_hooked = False


@contextmanager
def files_opened() -> Iterator[set[str]]:
    """The paths opened for reading inside the ``with`` block: by Python code, and by
    native code that says so (:func:`asrkit.data.io.note_read`)."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)  # cannot be removed; it only records while watching
        _hooked = True
    seen: set[str] = set()
    _watching.append(seen)
    try:
        yield seen
    finally:
        _watching.pop()


def probe_audio(rate: int, seconds: float = 1.5, seed: int = 0) -> np.ndarray:
    """A fixed stretch of quiet noise with a tone in it (int16 range): enough frames for
    every decoder to run its whole path (features, network, search, speaker transform)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rate * seconds)) / rate
    tone = 3000 * np.sin(2 * np.pi * 220 * t) * (np.abs(t - seconds / 2) < seconds / 4)
    return (rng.normal(0, 300, t.size) + tone).astype(np.float32)


def _recognise(exp_dir: Path, kind: str, model: str | None) -> tuple[str, str, Any]:
    """Load the decoder and recognise the probe audio; (kind, text, decoder)."""
    from asrkit.decoding.decoder import load_decoder

    decoder = load_decoder(exp_dir, kind, model=model)
    samples = probe_audio(decoder.sample_rate)
    recordings = [("probe", samples, decoder.sample_rate, "probe")]
    quiet = logging.getLogger("asrkit.decoding")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # noise decodes to no sentence: the search warns so
    try:
        prepared = decoder.prepare_speaker(recordings)
        text = decoder.transcripts(prepared)["probe"]
        if decoder.has_word_times and text:
            decoder.word_times(prepared, "probe", text)
    finally:
        quiet.setLevel(level)
    return decoder.kind, text, decoder


def export(exp_dir: str | Path, out: str | Path, *, kind: str = "auto", model: str | None = None) -> Path:
    """Copy what ``transcribe EXP_DIR`` (decoder ``kind``) reads into ``out``, with a
    model card; returns ``out``.

    Raises:
        ConfigError: ``out`` exists and is not empty, or the decoder reads a file outside
            ``exp_dir`` (it cannot travel with the copy).
        DataError: the experiment cannot be loaded, or the copy does not recognise the
            probe audio as the experiment does (nothing is left at ``out``).
    """
    from asrkit.decoding.recognizer import check_exp_dir

    exp_dir, out = Path(exp_dir).resolve(), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out}: exists and is not empty; export into a new directory")
    check_exp_dir(exp_dir, model or "model.pt")
    with files_opened() as opened:
        chosen, text, decoder = _recognise(exp_dir, kind, model)
    inside, outside = [], []
    for name in sorted(opened):
        path = Path(name).resolve()
        if not path.is_file():
            continue
        if path.is_relative_to(exp_dir):
            inside.append(path.relative_to(exp_dir))
        elif _is_data(path):
            outside.append(path)
    if outside:
        raise ConfigError(
            f"{exp_dir}: its {chosen} decoder reads {outside[0]}, outside the experiment dir; "
            "an export holds the experiment's own files only — copy that file into the "
            "experiment and point its record (decoders/*.json) at it"
        )
    staging = out.with_name(f".{out.name}.exporting")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for rel in inside:
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(exp_dir / rel, staging / rel)
        _relative_records(staging, exp_dir)
        with files_opened() as opened_again:
            _, again, _ = _recognise(staging, chosen, model)
        leaning = sorted(
            name
            for name in opened_again
            if Path(name).resolve().is_relative_to(exp_dir) and Path(name).is_file()
        )
        if leaning:
            raise DataError(
                f"{out}: the exported {chosen} decoder still reads {leaning[0]} from the "
                "experiment; the export is incomplete (this is a bug in asrkit)"
            )
        if again != text:
            raise DataError(
                f"{out}: the exported {chosen} decoder recognised a test signal as {again!r}, "
                f"the experiment as {text!r}; the export is incomplete (this is a bug in asrkit)"
            )
        atomic_write(staging / CARD, model_card(exp_dir, chosen, inside, _model_file(decoder)))
        if out.exists():
            out.rmdir()
        out.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    size = sum((out / rel).stat().st_size for rel in inside)
    log.info("%s: %d files, %.1f MB (%s decoder) from %s", out, len(inside), size / 1e6, chosen, exp_dir)
    return out


def _relative_records(staging: Path, exp_dir: Path) -> None:
    """Rewrite the copied decoder records' absolute paths into the experiment as paths
    relative to the export (records read a relative path from the dir holding them)."""

    def rewrite(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: rewrite(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rewrite(v) for v in value]
        if isinstance(value, str) and os.path.isabs(value) and Path(value).resolve().is_relative_to(exp_dir):
            return str(Path(value).resolve().relative_to(exp_dir))
        return value

    for record in sorted((staging / "decoders").glob("*.json")):
        data = json.loads(record.read_text())
        atomic_write(record, json.dumps(rewrite(data), indent=2) + "\n")


def _is_data(path: Path) -> bool:
    """A file read outside the experiment that is data, not code (Python, the libraries
    and asrkit open their own files too)."""
    code = (sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parent))
    system = ("/proc", "/sys", "/dev", "/etc", "/usr")
    return not str(path).startswith(code) and not str(path).startswith(system)


def _model_file(decoder: Any) -> str:
    recognizer = getattr(decoder, "recognizer", None)  # a combination has one per system
    return str(getattr(recognizer, "model_file", "model.pt"))


def _meta(path: Path) -> dict[str, Any]:
    import torch

    if not path.is_file():
        return {}
    bundle = torch.load(path, map_location="cpu", weights_only=False)
    return dict(bundle.get("meta", {})) if isinstance(bundle, dict) else {}


def model_card(exp_dir: Path, kind: str, files: list[Path], model: str = "model.pt") -> str:
    """The card: what the model recognises, what it was trained on and how, how well."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(exp_dir / "config.yaml") if (exp_dir / "config.yaml").is_file() else None

    def get(key: str, default: Any = "?") -> Any:
        return OmegaConf.select(cfg, key, default=default) if cfg is not None else default

    corpus = str(get("data.corpus"))
    command = (exp_dir / "command").read_text().strip() if (exp_dir / "command").is_file() else "?"
    # The decodes of this decoder only (stage 5 writes decode_<set> for greedy search and
    # decode_<kind>_<set> for the others).
    prefix = "decode_" if kind == "greedy" else f"decode_{kind}_"
    kinds = ("beam", "beam_lm", "hybrid", "combined")
    wers = []
    for wer in sorted(exp_dir.glob(f"{prefix}*/scoring/wer")):
        name = wer.parent.parent.name
        if kind == "greedy" and any(name.startswith(f"decode_{k}_") for k in kinds):
            continue
        if kind == "beam" and name.startswith("decode_beam_lm_"):
            continue
        first = wer.read_text().splitlines()[:1]
        if first:
            wers.append(f"| {name.removeprefix(prefix)} | `{first[0]}` |")
    meta = _meta(exp_dir / model)
    net = meta.get("model", {})
    units = (
        f"{meta.get('units', {}).get('num_tokens', '?')} {get('tokenizer.kind')} units (CTC)"
        if meta.get("objective") == "ctc"
        else f"{net.get('num_classes', '?')} tied triphone states (frame cross-entropy)"
    )
    feats = meta.get("features", {})
    lines = [
        f"# {exp_dir.name}",
        "",
        f"An asrkit acoustic model and its decoder ({kind}), exported "
        f"{datetime.date.today().isoformat()} from `{exp_dir}` by asrkit {_version()}.",
        "",
        "Use it with `asrkit transcribe THIS_DIR audio.wav ...` or, in Python, "
        "`asrkit.Recognizer.load(THIS_DIR).transcribe('audio.wav')`.",
        "",
        f"- Pipeline: {get('pipeline', 'ctc')}; output: {units}",
        f"- Network: {'B' if net.get('bidirectional') else ''}LSTM, {net.get('layers', '?')} layers of "
        f"{net.get('hidden', '?')} cells ({get('model.size')} size), input stacked x{net.get('stack', 1)}, "
        f"subsampled x{net.get('subsample', 1)}",
        (
            "- Input: the speaker's fMLLR features (no fbank)"
            if meta.get("fmllr") and not meta.get("fbank", True)
            else f"- Input: {feats.get('kind', '?')}, {feats.get('num_mel_bins', '?')} bins at "
            f"{feats.get('sample_rate', '?')} Hz, CMVN {meta.get('cmvn', '?')}"
            + (", joined with the speaker's fMLLR features" if meta.get("fmllr") else "")
        )
        + (f" and a {meta['ivector_dim']}-dim i-vector" if meta.get("ivector_dim") else ""),
        f"- Trained on: {corpus} ({get('data.train_set')}), seed {get('seed')}",
        f"- Trained by: `{command}`",
        f"- Data licence: {LICENCES.get(corpus, 'see the corpus distribution')}",
        "",
        "## Word error rates the recipe measured",
        "",
        "| set | result |",
        "|---|---|",
        *(wers or ["| (none recorded) | |"]),
        "",
        "Weights were tuned on the dev set; dev figures are therefore optimistic.",
        "",
        "## Files",
        "",
        *(f"- `{rel}`" for rel in files),
        "",
    ]
    return "\n".join(lines)


def _version() -> str:
    from asrkit import __version__

    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__} (commit {commit})"
