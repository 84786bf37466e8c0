"""A corpus of malformed inputs, one row each, through the CLI.

Every case ends the same way: exit status 2, exactly one ``asrkit: error:`` line that
names the offending file and/or utterance and says how to fix it, no traceback, and
none of the failing command's outputs left behind (no ``feats.scp`` or arks, no
``model.pt``, no decode dirs, no stage record, no ``*.tmp`` file).

Each case is a setup function registered with :func:`case`: it breaks one thing in its
own directory (raw data dirs, or a copy of the features and model that the module
fixture ``built`` makes once) and returns the command to run and the words the error
line must contain. Most commands run in this process through ``asrkit.cli.main.main``
(an exception escaping it fails the case), which saves the ~2 s interpreter and torch
start of a subprocess per case; the feature-extraction cases, which fork ``features.nj``
jobs, and a few in every other group run as ``python -m asrkit``, as users meet the CLI.
Bad data dirs are also checked function by function in ``test_datadir.py``, bad
``segments`` files case by case in ``test_segments.py``.
"""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from asrkit.cli.main import main
from asrkit.data.datadir import read_kaldi_map, write_kaldi_map
from asrkit.data.kaldi_ark import write_ark
from asrkit.data.kaldi_table import read_matrices
from asrkit.stages.lock import LOCK_NAME, _start_time
from tests.helpers import make_data_dir, run_cli, tone

SETS = ("train", "train_dev", "test")
#: The smallest settings that run every stage: 23 mel bins, the tiny BLSTM, one epoch.
SMALL = (
    "features.num_mel_bins=23",
    "tokenizer=char",  # the fixtures' words are not in AN4's dictionary
    "features.nj=2",
    "model=tiny",
    "train.epochs=1",
    "train.progress=false",
    "decode=greedy",
)
#: What a stage writes (globs under the case dir); a failed run leaves none of it.
OUTPUTS = {
    2: ("data/*/feats.scp", "data/*/cmvn.scp", "data/*/cmvn_global.ark", "data/*/utt2num_frames", "fbank/*"),
    3: ("exp/tokenizer", "exp/lang"),
    4: ("exp/model.pt", "exp/checkpoints", "exp/train_summary.json"),
    5: ("exp/decode_*",),
}


@dataclass
class Run:
    """A command and the paths (globs under the case dir) it must not leave behind."""

    argv: list[str]
    absent: tuple[str, ...] = ()
    own_process: bool = False


class Work:
    """One case's directory: ``data/``, ``fbank/``, ``exp/``."""

    def __init__(self, root: Path, built: Callable[[], Path]) -> None:
        self.root, self._built = root, built
        self.data, self.fbank, self.exp = root / "data", root / "fbank", root / "exp"

    def raw_data(self) -> None:
        """Three data dirs of three utterances each, no features."""
        for i, name in enumerate(SETS):
            make_data_dir(self.data / name, utts=3, seed=10 * i)

    def trained(self, *, model: bool = True) -> None:
        """A copy of the module's features, tokenizer and (with ``model``) trained model."""
        built = self.built
        for name in ("data", "fbank"):
            shutil.copytree(built / name, self.root / name)
        for scp in self.data.rglob("*.scp"):  # they hold absolute paths into ``built``
            scp.write_text(scp.read_text().replace(str(built), str(self.root)))
        shutil.copytree(built / "exp" / "tokenizer", self.exp / "tokenizer")
        if model:
            for name in ("model.pt", "cmvn_global.ark"):
                shutil.copy(built / "exp" / name, self.exp / name)

    def audio(self, utt: str, name: str = "train") -> Path:
        return self.data / name / "audio" / f"{utt}.wav"

    @property
    def built(self) -> Path:
        return self._built()

    def stages(self, first: int, last: int, *overrides: str) -> list[str]:
        """``asrkit run`` arguments for stages ``first..last`` on this case's dirs."""
        return [
            "run",
            "--stage",
            str(first),
            "--stop-stage",
            str(last),
            f"data_root={self.data}",
            f"feats_root={self.fbank}",
            f"exp_dir={self.exp}",
            *_merge(SMALL, overrides),
        ]

    def stage(self, number: int, *overrides: str, own_process: bool = False) -> Run:
        """Stage ``number`` alone; it must leave none of its outputs and no stage record."""
        return Run(
            self.stages(number, number, *overrides),
            absent=(*OUTPUTS[number], f"**/.stages/{number}-*"),
            own_process=own_process,
        )

    def extract(self) -> Run:
        """Stage 2 as ``python -m asrkit``: past the data dir checks it forks ``features.nj`` jobs."""
        return self.stage(2, own_process=True)

    def config(self, *overrides: str, own_process: bool = False) -> Run:
        """A run whose config is wrong: it must stop before creating any directory."""
        return Run(self.stages(2, 2, *overrides), absent=("*",), own_process=own_process)


def _merge(base: tuple[str, ...], overrides: tuple[str, ...]) -> list[str]:
    """``key=value`` overrides, a later key replacing an earlier one."""
    merged = {item.split("=", 1)[0]: item for item in (*base, *overrides)}
    return list(merged.values())


Setup = Callable[[Work], tuple[Run, list[str]]]
CASES: list = []


def case(name: str) -> Callable[[Setup], Setup]:
    """Register a setup as the corpus row ``name``."""

    def add(setup: Setup) -> Setup:
        CASES.append(pytest.param(setup, id=name))
        return setup

    return add


def _edit(path: Path, old: str, new: str) -> Path:
    text = path.read_text()
    assert old in text, (old, path)
    path.write_text(text.replace(old, new, 1))
    return path


# --- audio ------------------------------------------------------------------------------


@case("audio-missing")
def _(w: Work):
    w.raw_data()
    wav = w.audio("spk2-utt1")
    wav.unlink()
    return w.extract(), ["'spk2-utt1'", str(wav), "not found", "fix its wav.scp entry"]


@case("audio-truncated")
def _(w: Work):
    w.raw_data()
    wav = w.audio("spk2-utt1")
    wav.write_bytes(wav.read_bytes()[:40])
    return w.extract(), ["'spk2-utt1'", str(wav), "cannot read audio", "re-create it"]


@case("audio-wrong-sample-rate")
def _(w: Work):
    w.raw_data()
    wav = w.audio("spk1-utt0")
    soundfile.write(wav, tone(1, rate=8000), 8000, subtype="PCM_16")
    return w.extract(), ["'spk1-utt0'", str(wav), "is 8000 Hz", "features.resample=true"]


@case("audio-no-samples")
def _(w: Work):
    w.raw_data()
    wav = w.audio("spk2-utt2")
    soundfile.write(wav, np.zeros(0, dtype=np.int16), 16000, subtype="PCM_16")
    return w.extract(), ["'spk2-utt2'", str(wav), "has no samples", "re-create"]


@case("audio-shorter-than-a-frame")
def _(w: Work):
    w.raw_data()
    wav = w.audio("spk2-utt2")
    soundfile.write(wav, tone(2, seconds=0.01), 16000, subtype="PCM_16")
    return w.extract(), ["'spk2-utt2'", str(wav), "fewer than one 25.0 ms frame", "remove the utterance"]


@case("audio-pipe-command-fails")
def _(w: Work):
    w.raw_data()
    gone = w.root / "gone.wav"
    _edit(w.data / "train" / "wav.scp", str(w.audio("spk2-utt1")), f"cat {gone} |")
    return w.extract(), ["'spk2-utt1'", f"cat {gone}", "No such file", "check that the command"]


@case("audio-pipe-output-not-audio")
def _(w: Work):
    w.raw_data()
    _edit(w.data / "train" / "wav.scp", str(w.audio("spk2-utt1")), "echo hello |")
    return w.extract(), [
        "'spk2-utt1'",
        "output of 'echo hello': Format not recognised",
        "convert it with sox",
    ]


@case("transcribe-audio-missing")
def _(w: Work):
    w.trained()
    gone = w.root / "gone.wav"
    return Run(["transcribe", str(w.exp), str(gone)], own_process=True), [
        str(gone),
        "not found",
        "check the path",
    ]


# --- data dirs --------------------------------------------------------------------------


@case("datadir-no-wav.scp")
def _(w: Work):
    w.raw_data()
    (w.data / "train" / "wav.scp").unlink()
    return w.stage(2), [str(w.data / "train" / "wav.scp"), "file not found"]


@case("datadir-no-utt2spk")
def _(w: Work):
    w.raw_data()
    (w.data / "train" / "utt2spk").unlink()
    return w.stage(2), [str(w.data / "train" / "utt2spk"), "file not found"]


@case("datadir-no-text")
def _(w: Work):
    w.raw_data()
    (w.data / "train" / "text").unlink()
    return w.stage(3), [str(w.data / "train" / "text"), "file not found"]


@case("datadir-duplicate-id")
def _(w: Work):
    w.raw_data()
    text = _edit(w.data / "train" / "text", "spk2-utt2 WORD2", "spk2-utt1 WORD2")
    return w.stage(2), [f"{text}:3", "duplicate id 'spk2-utt1'", "remove or rename one"]


@case("datadir-unsorted")
def _(w: Work):
    w.raw_data()
    wav_scp = _edit(w.data / "train" / "wav.scp", "spk1-utt0", "spk3-utt0")
    return w.stage(2), [str(wav_scp), "not sorted", "'spk2-utt1'", "LC_ALL=C sort"]


@case("datadir-text-id-not-in-wav.scp")
def _(w: Work):
    w.raw_data()
    text = _edit(w.data / "train" / "text", "spk2-utt2 ", "spk2-utt7 ")
    return w.stage(2), [str(text), "'spk2-utt7'", "not in utt2spk", "fix_data_dir.sh"]


@case("datadir-spk2utt-mismatch")
def _(w: Work):
    w.raw_data()
    spk2utt = _edit(w.data / "train" / "spk2utt", "spk2-utt1 spk2-utt2", "spk2-utt1")
    return Run(["validate-data", str(w.data / "train")]), [str(spk2utt), "speaker 'spk2'", "regenerate it"]


@case("validate-data-audio-missing-empty-or-not-audio")
def _(w: Work):
    w.raw_data()
    w.audio("spk1-utt0").unlink()
    w.audio("spk2-utt1").write_bytes(b"")
    w.audio("spk2-utt2").write_text("not audio at all\n")
    return Run(["validate-data", str(w.data / "train")]), [
        str(w.data / "train" / "wav.scp"),
        "3 of 3 audio entries are bad",
        f"spk1-utt0: {w.audio('spk1-utt0')} not found",
        f"spk2-utt1: {w.audio('spk2-utt1')} is empty",
        f"spk2-utt2: {w.audio('spk2-utt2')} is not readable audio",
        "--quick",
    ]


@case("datadir-empty-transcript")
def _(w: Work):
    w.raw_data()
    text = _edit(w.data / "train" / "text", "WORD1 HELLO", "")
    return w.stage(2), [f"{text}:2", "'spk2-utt1'", "empty transcript", "fix the transcript"]


@case("datadir-empty-line")
def _(w: Work):
    w.raw_data()
    text = _edit(w.data / "train" / "text", "\nspk2-utt1", "\n\nspk2-utt1")
    return w.stage(3), [f"{text}:2", "empty line", "remove it"]


@case("datadir-text-not-utf8")
def _(w: Work):
    w.raw_data()
    text = w.data / "train" / "text"
    text.write_bytes(text.read_bytes().replace(b"WORD1", b"CAF\xc9"))
    return w.stage(2), [f"{text}:2", "not UTF-8", "iconv"]


def _segmented(w: Work, name: str = "train") -> Path:
    """Make set ``name`` a segmented dir, each utterance cut (0 to 0.4 s, all of it) from a
    recording of its own id; returns its ``segments`` file."""
    data_dir = w.data / name
    utts = read_kaldi_map(data_dir / "utt2spk")
    write_kaldi_map(data_dir / "segments", {utt: f"{utt} 0 0.4" for utt in utts})
    return data_dir / "segments"


@case("segments-end-before-start")
def _(w: Work):
    w.raw_data()
    segments = _edit(_segmented(w), "spk2-utt1 spk2-utt1 0 0.4", "spk2-utt1 spk2-utt1 0.3 0.2")
    return w.stage(2), [f"{segments}:2", "'spk2-utt1'", "not after start time 0.3", "fix the times"]


@case("segments-end-past-recording")
def _(w: Work):
    w.raw_data()
    segments = _edit(_segmented(w), "spk2-utt1 spk2-utt1 0 0.4", "spk2-utt1 spk2-utt1 0 3")
    return w.extract(), [
        str(segments),
        "'spk2-utt1'",
        "past the end of the recording",
        "fix the segment's times",
    ]


@case("validate-data-segment-past-recording")
def _(w: Work):
    # Seen in the field: validate-data said OK, feature extraction failed later.
    w.raw_data()
    _edit(_segmented(w), "spk2-utt1 spk2-utt1 0 0.4", "spk2-utt1 spk2-utt1 0 3")
    return Run(["validate-data", str(w.data / "train")]), ["spk2-utt1", "ends at 3 s, past the end of"]


@case("datadir-missing")
def _(w: Work):
    w.raw_data()
    shutil.rmtree(w.data / "train_dev")
    return Run(["validate-data", str(w.data / "train_dev")]), [
        str(w.data / "train_dev"),
        "data directory not found",
    ]


# --- features ---------------------------------------------------------------------------


@case("features-ark-truncated")
def _(w: Work):
    w.trained(model=False)
    scp = w.data / "train" / "feats.scp"
    last, entry = list(read_kaldi_map(scp).items())[-1]
    ark, offset = entry.rsplit(":", 1)
    with open(ark, "r+b") as handle:
        handle.truncate(int(offset) + 20)
    return w.stage(4, own_process=True), [str(scp), f"'{last}'", "truncated", "feature stage with --force"]


@case("features-matrix-corrupt-while-streaming")
def _(w: Work):
    # Found only when its batch is read (opening a set reads its first matrix only):
    # the run stops at that batch, naming the utterance, the archive and the offset.
    w.trained(model=False)
    scp = w.data / "train" / "feats.scp"
    utt, entry = list(read_kaldi_map(scp).items())[1]
    ark, offset = entry.rsplit(":", 1)
    with open(ark, "r+b") as handle:
        handle.seek(int(offset) + 2)
        handle.write(b"ZZ")  # the FM type token
    return w.stage(4, own_process=True), [
        str(scp),
        f"'{utt}'",
        f"{ark}:{offset}",
        "ZZ",
        "rerun the feature stage",
    ]


def _garble_values(w: Work, name: str) -> tuple[Path, str, str]:
    """100 random bytes over utterance 1's float data (as a disk or a copy can garble an
    archive): every header intact, the values NaN, infinite or up to 3.4e38."""
    w.trained(model=False)
    scp = w.data / name / "feats.scp"
    utt, entry = list(read_kaldi_map(scp).items())[1]
    ark, offset = entry.rsplit(":", 1)
    garbage = np.random.default_rng(3).integers(0, 256, 100, dtype=np.uint8).tobytes()
    garbage = b"\xff\xff\xff\x7f" + garbage[4:]  # at least one NaN, whatever the seed
    with open(ark, "r+b") as handle:
        handle.seek(int(offset) + 15 + 4 * 23 * 2)  # past the header, into frame 2
        handle.write(garbage)
    return scp, utt, f"{ark}:{offset}"


@case("features-values-garbled")
def _(w: Work):
    scp, utt, where = _garble_values(w, "train")
    return w.stage(4, own_process=True), [str(scp), f"'{utt}'", where, "feature value", "--force"]


@case("validate-data-features-values-garbled")
def _(w: Work):
    scp, utt, where = _garble_values(w, "train_dev")
    return Run(["validate-data", str(w.data / "train_dev")]), [str(scp), f"'{utt}'", where, "feature value"]


@case("features-scp-offset-past-ark-end")
def _(w: Work):
    w.trained(model=False)
    scp = w.data / "train" / "feats.scp"
    utt, entry = list(read_kaldi_map(scp).items())[-1]
    ark, offset = entry.rsplit(":", 1)
    with open(ark, "r+b") as handle:
        handle.truncate(int(offset) - 1)
    return w.stage(4), [str(scp), f"'{utt}'", f"offset {offset}", ark, "past the end"]


@case("features-rows-differ-from-utt2num_frames")
def _(w: Work):
    w.trained(model=False)
    counts = w.data / "train" / "utt2num_frames"
    entries = read_kaldi_map(counts)
    utt = list(entries)[-1]
    entries[utt] = str(int(entries[utt]) + 3)
    write_kaldi_map(counts, entries)
    return w.stage(4, own_process=True), [
        str(w.data / "train" / "feats.scp"),
        f"'{utt}'",
        "utt2num_frames says",
        "rerun the feature stage",
    ]


@case("features-scp-points-at-missing-ark")
def _(w: Work):
    w.trained(model=False)
    ark = w.fbank / "raw_fbank_train_dev.1.ark"
    ark.unlink()
    return w.stage(4), [str(w.data / "train_dev" / "feats.scp"), "'spk1-utt0'", str(ark), "file not found"]


@case("features-dim-differs-from-config")
def _(w: Work):
    w.trained(model=False)  # computed with 23 mel bins; training asks for 80
    return w.stage(4, "features.num_mel_bins=80"), [
        str(w.data / "train" / "feats.scp"),
        "'spk1-utt0'",
        "23-dim",
        "expects 80",
        "stage 2",
    ]


@case("features-dim-differs-from-model")
def _(w: Work):
    w.trained()
    scp = w.data / "train_dev" / "feats.scp"
    wide = [(utt, np.pad(mat, ((0, 0), (0, 17)))) for utt, mat in read_matrices(f"scp:{scp}")]
    write_kaldi_map(scp, write_ark(w.fbank / "wide_train_dev.ark", wide))
    return w.stage(5), [str(scp), "'spk1-utt0'", "40-dim", "expects 23", "stage 2"]


@case("features-train-cmvn-missing")
def _(w: Work):
    w.trained(model=False)
    stats = w.data / "train" / "cmvn_global.ark"
    stats.unlink()
    return w.stage(4), [str(stats)]


@case("features-speaker-cmvn-missing")
def _(w: Work):
    w.trained(model=False)
    (w.data / "train" / "cmvn.scp").unlink()
    return w.stage(4, "features.cmvn=speaker"), [str(w.data / "train" / "cmvn.scp"), "not found", "stage 2"]


@case("decode-model-cmvn-missing")
def _(w: Work):
    w.trained()
    (w.exp / "cmvn_global.ark").unlink()
    return w.stage(5), [str(w.exp / "cmvn_global.ark"), "global CMVN", "retrain"]


# --- alignments (objective=ce) ----------------------------------------------------------


def _alignments(w: Work, name: str, how: str = "") -> Path:
    """An alignment dir (``ali.1.gz``, 5 classes) for set ``name``'s features, broken ``how``."""
    frames = read_kaldi_map(w.data / name / "utt2num_frames")
    alis = {utt: np.arange(int(n), dtype=np.int32) % 5 for utt, n in frames.items()}
    if how == "unknown":
        alis = {f"other-{utt}": ali for utt, ali in alis.items()}
    elif how == "short":
        alis["spk2-utt1"] = alis["spk2-utt1"][:10]
    elif how == "range":
        alis["spk2-utt2"][4] = 99
    ali_dir = w.root / f"ali_{name}"
    ali_dir.mkdir()
    (ali_dir / "num_classes").write_text("5\n")
    write_ark(ali_dir / "ali.ark", sorted(alis.items()), kind="int")
    packed = gzip.compress((ali_dir / "ali.ark").read_bytes())
    (ali_dir / "ali.ark").unlink()
    (ali_dir / "ali.1.gz").write_bytes(packed[: len(packed) // 2] if how == "corrupt" else packed)
    return ali_dir


def _ce(w: Work, how: str) -> tuple[Run, Path]:
    w.trained(model=False)
    ali_dir = _alignments(w, "train", how)
    return w.stage(
        4, "objective=ce", f"align.train={ali_dir}", f"align.dev={_alignments(w, 'train_dev')}"
    ), ali_dir


@case("alignments-for-unknown-utterances")
def _(w: Work):
    run, ali_dir = _ce(w, "unknown")
    return run, [
        str(ali_dir),
        "none of the 3 feature utterances",
        "spk1-utt0",
        "other-spk1-utt0",
        "same data set",
    ]


@case("alignments-length-differs-from-frames")
def _(w: Work):
    run, ali_dir = _ce(w, "short")
    return run, [str(ali_dir), "spk2-utt1 (got 10, expected", "re-align with these features"]


@case("alignments-class-out-of-range")
def _(w: Work):
    run, ali_dir = _ce(w, "range")
    return run, [str(ali_dir), "outside [0, 5)", "spk2-utt2 (label 99)", "num_classes"]


@case("alignments-gz-corrupt")
def _(w: Work):
    run, ali_dir = _ce(w, "corrupt")
    run.own_process = True
    return run, [str(ali_dir / "ali.1.gz"), "cannot read", "re-create it"]


# --- configs ----------------------------------------------------------------------------


@case("config-unknown-key")
def _(w: Work):
    return w.config("features.num_mel_binz=40", own_process=True), [
        "unknown setting 'features.num_mel_binz'; did you mean features.num_mel_bins?",
    ]


@case("config-value-wrong-type")
def _(w: Work):
    return w.config("features.num_mel_bins=lots"), ["features.num_mel_bins=lots: expected a whole number"]


@case("config-unknown-group-option")
def _(w: Work):
    return w.config("strategy=nosuch"), [
        "strategy=nosuch is unknown",
        "(strategy is one of: adpsgd, delay_by_one, hybrid, single, sync)",
    ]


@case("config-unknown-strategy-name")
def _(w: Work):
    return w.config("strategy.name=nosuch"), ["strategy.name='nosuch'", "choose one of"]


@case("config-unknown-features-kind")
def _(w: Work):
    return w.config("features.kind=plp"), ["features.kind='plp'", "fbank", "mfcc"]


@case("config-unknown-cmvn-mode")
def _(w: Work):
    return w.config("features.cmvn=utterance"), ["features.cmvn='utterance'", "choose one of global"]


@case("config-negative-epochs")
def _(w: Work):
    return w.config("train.epochs=-1"), ["train.epochs=-1", "at least 1"]


@case("config-lr-not-positive")
def _(w: Work):
    return w.config("optim.lr=0"), ["optim.lr"]


@case("config-unknown-model-size")
def _(w: Work):
    return w.config("model.size=huge"), ["model.size", "huge"]


# --- the hybrid pipeline (its cases on real speech: test_hmm_stages.py) --------------


@case("config-unknown-pipeline")
def _(w: Work):
    return w.config("pipeline=nonsense", own_process=True), [
        "pipeline='nonsense'",
        "choose one of ctc, hybrid",
    ]


@case("config-hybrid-with-ctc-objective")
def _(w: Work):
    return w.config("pipeline=hybrid", "objective=ctc"), [
        "pipeline=hybrid",
        "frame cross-entropy",
        "set objective=ce",
    ]


@case("config-hybrid-no-lm-weights")
def _(w: Work):
    return w.config("pipeline=hybrid", "objective=ce", "wfst.lm_weights=[]"), [
        "wfst.lm_weights=[]",
        "at least one",
    ]


@case("config-hybrid-phone-units-without-lexicon")
def _(w: Work):
    no_lexicon = ("pipeline=hybrid", "objective=ce", "tokenizer=phone", "data.lexicon=", "tokenizer.lexicon=")
    return w.config(*no_lexicon), ["tokenizer=phone needs tokenizer.lexicon"]


@case("hybrid-gmm-without-lexicon")
def _(w: Work):
    # Character units need no lexicon, the GMM stage does: it stops before writing gmm/.
    w.raw_data()
    run = w.stage(4, "pipeline=hybrid", "objective=ce", "data.lexicon=", "tokenizer.lexicon=")
    run.absent = (*run.absent, "exp/gmm")
    return run, ["pipeline=hybrid needs a pronunciation lexicon", "set data.lexicon"]


# --- checkpoints and models -------------------------------------------------------------


def _truncate(path: Path) -> Path:
    path.write_bytes(path.read_bytes()[:300])
    return path


@case("transcribe-model-corrupt")
def _(w: Work):
    w.trained()
    model = _truncate(w.exp / "model.pt")
    return Run(["transcribe", str(w.exp), str(w.audio("spk1-utt0"))], own_process=True), [
        str(model),
        "cannot load checkpoint",
        "retrain or restore it",
    ]


@case("transcribe-beam-lm-never-tuned")
def _(w: Work):
    w.trained()
    (w.exp / "decoders" / "beam_lm.json").unlink(missing_ok=True)
    return Run(["transcribe", str(w.exp), str(w.audio("spk1-utt0")), "--decode", "beam_lm"]), [
        str(w.exp / "decoders" / "beam_lm.json"),
        "no beam_lm settings",
        "decode=beam_lm first",
    ]


@case("transcribe-decoding-settings-corrupt")
def _(w: Work):
    w.trained()
    (w.exp / "decoders").mkdir()
    (w.exp / "decoders" / "beam_lm.json").write_text("{ not json")
    return Run(["transcribe", str(w.exp), str(w.audio("spk1-utt0"))]), [
        str(w.exp / "decoders" / "beam_lm.json"),
        "unreadable decoding settings",
        "rerun stage 5",
    ]


@case("transcribe-model-is-a-tensor")
def _(w: Work):
    w.trained()
    torch.save(torch.zeros(3), w.exp / "model.pt")
    return Run(["transcribe", str(w.exp), str(w.audio("spk1-utt0"))]), [str(w.exp / "model.pt")]


def _other_units(w: Work) -> None:
    """The experiment's tokenizer replaced by one with other units (a model copied in from
    another experiment meets the same)."""
    from asrkit.targets import TokenizerConfig, train_tokenizer

    shutil.rmtree(w.exp / "tokenizer")
    train_tokenizer({"u1": "ABC ABC", "u2": "CAB"}, w.exp / "tokenizer", TokenizerConfig(kind="char"))


@case("transcribe-model-of-other-units")
def _(w: Work):
    w.trained()
    _other_units(w)
    return Run(["transcribe", str(w.exp), str(w.audio("spk1-utt0"))]), [
        str(w.exp / "model.pt"),
        "trained on",
        str(w.exp / "tokenizer"),
        "experiment that trained it",
    ]


@case("transcribe-cmvn-stats-of-another-model")
def _(w: Work):
    # Seen in the field: a model beside another experiment's stats gave a numpy traceback.
    w.trained()
    stats = w.exp / "cmvn_global.ark"
    import kaldi_io

    with open(stats, "wb") as out:  # as the feature stage writes it: one matrix, no key
        kaldi_io.write_mat(out, np.ones((2, 41), dtype=np.float64))
    return Run(["transcribe", str(w.exp), str(w.audio("spk1-utt0"))]), [
        str(stats),
        "40-dim",
        str(w.exp / "model.pt"),
        "23-dim",
    ]


@case("decode-model-of-other-units")
def _(w: Work):
    w.trained()
    _other_units(w)
    return w.stage(5), [str(w.exp / "model.pt"), "trained on", "experiment that trained it"]


@case("experiment-dir-locked-by-a-live-run")
def _(w: Work):
    """Another run (here PID 1, alive on this host) holds the experiment dir."""
    w.trained(model=False)
    lock = w.exp / LOCK_NAME
    holder = {"host": socket.gethostname(), "pid": 1, "started": _start_time(1), "since": 1_790_000_000}
    lock.write_text(json.dumps(holder) + "\n")
    return w.stage(4), [str(w.exp), "in use by another run", "pid 1", "give this run another name"]


@case("decode-model-corrupt")
def _(w: Work):
    w.trained()
    model = _truncate(w.exp / "model.pt")
    return w.stage(5, own_process=True), [str(model), "cannot load checkpoint", "retrain or restore it"]


@case("decode-model-not-asrkit")
def _(w: Work):
    w.trained()
    torch.save({"weight": torch.zeros(3)}, w.exp / "model.pt")
    return w.stage(5), [str(w.exp / "model.pt"), "not an asrkit model"]


@case("decode-model-meta-incomplete")
def _(w: Work):
    w.trained()
    state = torch.load(w.exp / "model.pt", weights_only=True)
    torch.save({"model": state["model"], "meta": {}}, w.exp / "model.pt")
    return w.stage(5), [str(w.exp / "model.pt")]


@case("init-from-missing")
def _(w: Work):
    w.trained(model=False)
    gone = w.root / "gone.pt"
    return w.stage(4, f"train.init_from={gone}"), [str(gone), "not found"]


@case("init-from-corrupt")
def _(w: Work):
    w.trained(model=False)
    corrupt = _truncate(Path(shutil.copy(w.built / "exp" / "model.pt", w.root / "corrupt.pt")))
    return w.stage(4, f"train.init_from={corrupt}"), [str(corrupt), "cannot load checkpoint"]


@case("init-from-not-asrkit")
def _(w: Work):
    w.trained(model=False)
    plain = w.root / "state_dict.pt"
    torch.save({"weight": torch.zeros(3)}, plain)
    return w.stage(4, f"train.init_from={plain}"), [str(plain)]


# --- the check --------------------------------------------------------------------------


def _main(argv: list[str], capfd: pytest.CaptureFixture[str]) -> subprocess.CompletedProcess:
    """``main(argv)`` in this process; an exception escaping it fails the test."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


def _assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("asrkit: error:")]
    assert len(lines) == 1, result.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Features (23 mel bins, one ark per set) and a tiny model trained for one epoch."""
    root = tmp_path_factory.mktemp("built")
    work = Work(root, lambda: root)
    work.raw_data()
    result = run_cli(*work.stages(2, 4, "features.nj=1"))
    assert result.returncode == 0, result.stderr[-3000:]
    return root


@pytest.mark.parametrize("setup", CASES)
def test_bad_input(
    setup: Setup, tmp_path: Path, request: pytest.FixtureRequest, capfd: pytest.CaptureFixture[str]
) -> None:
    work = Work(tmp_path, lambda: request.getfixturevalue("built"))
    run, needles = setup(work)
    result = run_cli(*run.argv) if run.own_process else _main(run.argv, capfd)
    _assert_one_line_error(result, *needles)
    assert result.stdout == "", result.stdout
    left = sorted(
        str(p.relative_to(tmp_path)) for pattern in (*run.absent, "**/*.tmp") for p in tmp_path.glob(pattern)
    )
    assert not left, f"partial output left behind: {left}"
