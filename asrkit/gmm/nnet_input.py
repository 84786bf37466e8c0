"""The hybrid network's speaker-adapted input (``align.fmllr``): each frame's fbank and its
fMLLR features side by side, as IBM's Switchboard BLSTMs join log-mel and fMLLR input.

The fMLLR features are the SAT system's: spliced MFCC + CMVN through its LDA+MLLT
``final.mat``, then the speaker's own transform (``trans.1``). The training and dev
speakers' transforms are the alignment dirs' (estimated from their transcripts, as
Kaldi's ``align_fmllr.sh`` does); a decoded set's are its two-pass decoding's
(``gmm/<system>/decode_<set>/trans.1``: from first-pass hypotheses, never a reference).
:func:`write_fmllr_dir` writes a data dir of the joined features (with per-speaker CMVN
stats of its own): ``<exp>/data_fmllr/<set>`` for training and validation,
``<exp>/data_fmllr/decode_<set>/<set>`` for decoding.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from asrkit.data.datadir import read_data_dir, read_kaldi_map, write_kaldi_map
from asrkit.data.io import atomic_writer
from asrkit.data.kaldi_ark import kaldi_io, write_ark
from asrkit.data.kaldi_table import read_matrix
from asrkit.errors import DataError
from asrkit.features.cmvn import apply_cmvn, cmvn_stats
from asrkit.features.extractors import FeatureConfig
from asrkit.gmm.adapt import FINAL_MAT, TRANSFORMS, Adaptation, read_transforms
from asrkit.gmm.config import GmmConfig, WfstConfig
from asrkit.gmm.feats import GmmFeatures

__all__ = [
    "FMLLR_DATA",
    "SpeakerAdapter",
    "fmllr_data_root",
    "fmllr_dim",
    "read_speaker_transforms",
    "write_fmllr_dir",
]

log = logging.getLogger(__name__)

#: Where, in an experiment dir, the joined features' data dirs go.
FMLLR_DATA = "data_fmllr"
#: A data dir's own files the joined dir keeps (the features and their stats are its own).
_OWN = {"feats.scp", "cmvn.scp", "cmvn_global.ark", "feats.yaml"}


def fmllr_data_root(exp_dir: Path) -> Path:
    return Path(exp_dir) / FMLLR_DATA


def fmllr_dim(ali_dir: Path) -> int:
    """The fMLLR features' dimension: the rows of the alignment dir's ``final.mat``."""
    adaptation = Adaptation.read(Path(ali_dir))
    if adaptation is None:
        raise DataError(
            f"{ali_dir}: no {FINAL_MAT}; align.fmllr needs alignments of a SAT system "
            "(gmm.tri_kinds ending in lda_mllt, sat)"
        )
    return int(adaptation.transform.shape[0])


def read_speaker_transforms(folder: Path, *, fix: str) -> dict[str, np.ndarray]:
    """The speakers' fMLLR transforms of a dir's ``trans.*`` archives."""
    speakers = read_transforms(Path(folder))
    if not speakers:
        raise DataError(f"{Path(folder) / TRANSFORMS}: not found; {fix}")
    return speakers


def write_fmllr_dir(
    data_dir: Path,
    gmm_data: Path,
    adaptation: Adaptation,
    speakers: dict[str, np.ndarray],
    out_dir: Path,
) -> int:
    """A data dir at ``out_dir`` whose features are ``data_dir``'s (fbank) joined to the
    fMLLR features of ``gmm_data`` (its MFCC + CMVN) through ``adaptation``'s
    ``final.mat`` and each speaker's transform of ``speakers``; per-speaker CMVN stats of
    the joined features. Written whole or not at all. Returns the joined dimension.

    Raises:
        DataError: an utterance without GMM features, or whose two feature streams have
            different frame counts (named, with both dirs).
    """
    data = read_data_dir(data_dir, require_text=False)
    scp = read_kaldi_map(Path(data_dir) / "feats.scp")
    base = GmmFeatures(gmm_data, delta_order=0)
    missing = sorted({data.utt2spk[u] for u in data.utt_ids} - set(speakers))
    if missing:
        # Too little speech to estimate from (gmm-est-fmllr's min count): LDA+MLLT alone.
        log.warning(
            "%s: %d speaker(s) have no fMLLR transform (too little speech; first: %s): their "
            "features are the LDA+MLLT ones untransformed",
            out_dir,
            len(missing),
            ", ".join(missing[:3]),
        )
    fmllr = Adaptation(adaptation.transform, adaptation.context, speakers).features(base)
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    spk_stats: dict[str, np.ndarray] = {}
    dim = 0

    def joined():
        nonlocal dim
        for utt in data.utt_ids:
            if utt not in base.scp:
                raise DataError(f"{gmm_data}/feats.scp: no MFCC for {utt}; rerun stage 4 (gmm)")
            fbank = read_matrix(scp[utt])
            adapted = fmllr(utt)
            if fbank.shape[0] != adapted.shape[0]:
                raise DataError(
                    f"{utt}: {fbank.shape[0]} fbank frames in {data_dir} but {adapted.shape[0]} MFCC "
                    f"frames in {gmm_data}; compute both with the same frame settings (rerun stages 2 and 4)"
                )
            both = np.hstack([fbank, adapted]).astype(np.float32)
            dim = both.shape[1]
            spk = data.utt2spk[utt]
            stats = cmvn_stats(both)
            spk_stats[spk] = stats if spk not in spk_stats else spk_stats[spk] + stats
            yield utt, both

    try:
        feats_scp = write_ark(tmp / "feats.ark", joined())
        cmvn_scp = write_ark(tmp / "cmvn.ark", sorted(spk_stats.items()))
        for path in Path(data_dir).iterdir():
            if path.is_file() and path.name not in _OWN:
                shutil.copyfile(path, tmp / path.name)
        # The scp entries name the temporary dir's archives: point them at the final one.
        for name, entries in (("feats.scp", feats_scp), ("cmvn.scp", cmvn_scp)):
            write_kaldi_map(
                tmp / name,
                {k: v.replace(str(tmp.resolve()), str(out_dir.resolve()), 1) for k, v in entries.items()},
            )
        with atomic_writer(tmp / "cmvn_global.ark", "wb") as ark:
            kaldi_io.write_mat(ark, sum(spk_stats.values()))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("%s: %d utterances, fbank and fMLLR features joined (%d dims)", out_dir, len(data.utt_ids), dim)
    return dim


def write_training_inputs(exp_dir: Path, data_root: Path, sets: dict[str, Path]) -> None:
    """The joined features of the training and dev sets: ``sets`` maps each set's name to
    its alignment dir (whose ``final.mat`` and ``trans.1`` give the fMLLR features)."""
    for name, ali_dir in sets.items():
        adaptation = Adaptation.read(ali_dir)
        if adaptation is None:
            fmllr_dim(ali_dir)  # raises the error that names what is missing
            continue
        speakers = read_speaker_transforms(
            ali_dir, fix="align.fmllr needs a SAT system's alignments (stage 4)"
        )
        write_fmllr_dir(
            data_root / name,
            Path(exp_dir) / "gmm" / "data" / name,
            adaptation,
            speakers,
            fmllr_data_root(exp_dir) / name,
        )


def write_decoding_input(exp_dir: Path, data_dir: Path, name: str, system_dir: Path) -> Path:
    """The joined features of a decoded set, its speakers' transforms from the SAT
    system's two-pass decoding of it (``<system_dir>/decode_<name>/trans.1``); returns the
    data dir written."""
    adaptation = Adaptation.read(system_dir)
    if adaptation is None:
        fmllr_dim(system_dir)
        raise AssertionError("unreachable")
    speakers = read_speaker_transforms(
        system_dir / f"decode_{name}",
        fix=f"stage 5 (gmm_decode) estimates set {name}'s speakers' transforms; run it first",
    )
    # Apart from the training stage's dev dir (whose transforms came from its transcripts).
    out = fmllr_data_root(exp_dir) / f"decode_{name}" / name
    write_fmllr_dir(data_dir, Path(exp_dir) / "gmm" / "data" / name, adaptation, speakers, out)
    return out


# ---------------------------------------------------------------- one speaker's audio


class _SpeakerMfcc:
    """One speaker's recordings as a GMM data dir reads: MFCC, the speaker's mean
    subtracted (what :class:`~asrkit.gmm.feats.GmmFeatures` gives a data dir's utterances)."""

    def __init__(self, feats: dict[str, np.ndarray], speaker: str) -> None:
        from types import SimpleNamespace

        stats = sum(cmvn_stats(x) for x in feats.values())
        self._feats = {utt: apply_cmvn(x, stats, norm_vars=False) for utt, x in feats.items()}  # type: ignore[arg-type]
        self.data = SimpleNamespace(utt2spk={utt: speaker for utt in feats})
        self.data_dir = Path(speaker)

    @property
    def utt_ids(self) -> list[str]:
        return list(self._feats)

    def __call__(self, utt: str) -> np.ndarray:
        return self._feats[utt]


class SpeakerAdapter:
    """The joined input of one speaker's recordings, as :func:`write_fmllr_dir` and the
    two-pass decoding of stage 5 make it for a data dir: MFCC (the GMM stage's settings)
    with the speaker's mean subtracted, the SAT system's speaker-independent first pass
    (``final.alimdl`` through the system's HCLG at ``first_pass``), the speaker's fMLLR
    transform from those hypotheses and the audio alone, the adapted features joined to
    each recording's fbank. What ``asrkit transcribe`` decodes an ``align.fmllr`` model with.

    Args:
        system_dir: the SAT system (``final.mdl``, ``final.alimdl``, ``final.mat``, ``tree``,
            ``graph/``) in a GMM dir whose ``lang/`` it was trained with.
        gmm: the ``gmm`` settings (alignment beams, fMLLR silence weight).
        wfst: the ``wfst`` settings (the first pass's beams and point).
        mfcc: the GMM stage's MFCC settings.
    """

    def __init__(self, system_dir: Path, *, gmm: GmmConfig, wfst: WfstConfig, mfcc: FeatureConfig) -> None:
        from asrkit.decoding.wfst import wfst_search
        from asrkit.gmm.graph import load_graph_dir
        from asrkit.gmm.lang import load_lang
        from asrkit.gmm.train import GmmSystem

        self.system_dir = Path(system_dir)
        lang = load_lang(self.system_dir.parent / "lang")
        self.system = GmmSystem.load(self.system_dir, lang)
        adaptation = Adaptation.read(self.system_dir, lang)
        if adaptation is None or adaptation.alimdl is None:
            raise DataError(
                f"{self.system_dir}: not a SAT system (no final.mat or final.alimdl); an align.fmllr "
                "model's recordings are adapted by the SAT system its alignments came from"
            )
        self.adaptation = adaptation
        self.gmm, self.mfcc = gmm, dataclasses.replace(mfcc, resample=True)
        self.first_pass = (float(wfst.first_pass[0]), float(wfst.first_pass[1]))
        self.search = wfst_search(
            load_graph_dir(self.system_dir / "graph"),
            self.system.trans_model,
            wfst,
            acoustic_scale=gmm.acoustic_scale,
        )

    def joined(
        self, recordings: Sequence[tuple[str, np.ndarray, int, str]], fbank: FeatureConfig
    ) -> dict[str, np.ndarray]:
        """``(utt, samples, rate, where)`` of one speaker -> utt -> fbank and fMLLR
        features side by side (not normalised)."""
        from asrkit.features.extractors import extract
        from asrkit.gmm.adapt import TransformedFeatures, transforms_from_hypotheses

        speaker = "speaker"
        mfcc = {utt: extract(s, r, self.mfcc, utt=utt, where=w) for utt, s, r, w in recordings}
        si = TransformedFeatures(
            _SpeakerMfcc(mfcc, speaker),  # type: ignore[arg-type]
            self.adaptation.transform,
            context=self.adaptation.context,
        )
        alimdl = self.adaptation.alimdl
        assert alimdl is not None
        scores = {utt: alimdl.log_likelihoods(si(utt)) for utt in si.utt_ids}
        swept = self.search.sweep(scores, [self.first_pass[0]], word_penalties=[self.first_pass[1]], nj=1)
        first = {utt: " ".join(words[self.first_pass]) for utt, words in swept.items()}
        speakers = transforms_from_hypotheses(
            self.system, alimdl, si, first, self.gmm, silence_weight=self.gmm.fmllr_silence_weight
        )
        adapted = TransformedFeatures(si.base, si.transform, context=si.context, speakers=speakers)
        out = {}
        fbank = dataclasses.replace(fbank, resample=True)
        for utt, samples, rate, where in recordings:
            raw = extract(samples, rate, fbank, utt=utt, where=where)
            fmllr = adapted(utt)
            if len(raw) != len(fmllr):
                raise DataError(
                    f"{where}: {len(raw)} fbank frames but {len(fmllr)} MFCC frames; the model's "
                    "features and the GMM stage's must share their frame settings"
                )
            out[utt] = np.hstack([raw, fmllr]).astype(np.float32)
        return out
