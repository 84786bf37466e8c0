"""The hybrid network's speaker-adapted input (``align.fmllr``): each frame's fbank and its
fMLLR features side by side, as IBM's Switchboard BLSTMs join log-mel and fMLLR input
(``align.fbank=false``: the fMLLR features alone, as Kaldi's nnet1 DNNs read them).

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
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from asrkit.data.datadir import read_data_dir, read_kaldi_map, write_kaldi_map
from asrkit.data.io import atomic_writer
from asrkit.data.kaldi_ark import kaldi_io, write_ark
from asrkit.data.kaldi_table import read_matrix
from asrkit.errors import DataError
from asrkit.features.cmvn import apply_cmvn, cmvn_stats
from asrkit.features.extractors import FeatureConfig
from asrkit.gmm.adapt import FINAL_MAT, TRANSFORMS, Adaptation, TransformedFeatures, read_transforms
from asrkit.gmm.config import GmmConfig, WfstConfig
from asrkit.gmm.feats import GmmFeatures
from asrkit.gmm.ivector import IvectorExtractor, train_extractor, train_ubm, unit_stats

if TYPE_CHECKING:
    from asrkit.targets.align_config import AlignConfig

__all__ = [
    "FMLLR_DATA",
    "IVECTOR_EXTRACTOR",
    "SpeakerAdapter",
    "fmllr_data_root",
    "fmllr_dim",
    "read_ivector_extractor",
    "read_speaker_transforms",
    "ivector_units",
    "speaker_ivectors",
    "speaker_stats",
    "train_ivector_extractor",
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
    *,
    ivectors: IvectorExtractor | None = None,
    ivector_max_utts: int = 0,
    fbank: bool = True,
) -> int:
    """A data dir at ``out_dir`` whose features are ``data_dir``'s (fbank; left out with
    ``fbank=False``, the data dir then giving the utterances, speakers and frame counts) joined to the
    fMLLR features of ``gmm_data`` (its MFCC + CMVN) through ``adaptation``'s
    ``final.mat`` and each speaker's transform of ``speakers`` (and, with ``ivectors``, to
    each speaker's i-vector from its speaker-independent LDA+MLLT features, or with
    ``ivector_max_utts`` each pseudo-speaker's: :func:`ivector_units`); per-speaker
    CMVN stats of the joined features (:func:`speaker_stats`). Written whole or not at all.
    Returns the joined dimension.

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
    units = ivector_units(data.utt2spk, ivector_max_utts)
    vectors = speaker_ivectors(ivectors, fmllr.unadapted(), units) if ivectors is not None else {}
    ivector_dim = ivectors.dim if ivectors is not None else 0
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
            raw = read_matrix(scp[utt])
            adapted = fmllr(utt)
            if raw.shape[0] != adapted.shape[0]:
                raise DataError(
                    f"{utt}: {raw.shape[0]} fbank frames in {data_dir} but {adapted.shape[0]} MFCC "
                    f"frames in {gmm_data}; compute both with the same frame settings (rerun stages 2 and 4)"
                )
            spk = data.utt2spk[utt]
            parts = [raw, adapted] if fbank else [adapted]
            if ivectors is not None:
                parts.append(np.broadcast_to(vectors[units[utt]], (len(raw), ivector_dim)))
            both = np.hstack(parts).astype(np.float32)
            dim = both.shape[1]
            stats = speaker_stats([both], ivector_dim)
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
    log.info(
        "%s: %d utterances, %s%s joined (%d dims)",
        out_dir,
        len(data.utt_ids),
        "fbank and fMLLR features" if fbank else "fMLLR features (no fbank)",
        f" and {ivector_dim}-dim i-vectors" if ivector_dim else "",
        dim,
    )
    return dim


def speaker_stats(feats: Iterable[np.ndarray], ivector_dim: int = 0) -> np.ndarray:
    """A speaker's CMVN stats of its joined features, whose last ``ivector_dim`` columns
    (the speaker's i-vector, constant over its frames) get the stats of mean 0 and variance
    1: normalisation passes them through (the speaker's own mean would zero them)."""
    stats = sum(cmvn_stats(x) for x in feats)
    if ivector_dim:
        stats = np.array(stats, dtype=np.float64)
        dims = stats.shape[1] - 1
        stats[0, dims - ivector_dim : dims] = 0.0
        stats[1, dims - ivector_dim : dims] = stats[0, dims]
    return stats  # type: ignore[return-value]


# ---------------------------------------------------------------- i-vectors

#: Where, in an experiment dir, the i-vector extractor goes.
IVECTOR_EXTRACTOR = Path("ivector") / "extractor.npz"
#: At most this many frames, spread over the training set, train the UBM.
_UBM_FRAMES = 300_000


def ivector_units(utt2spk: Mapping[str, str], max_utts: int = 0) -> dict[str, str]:
    """Which i-vector each utterance gets: its speaker's (``max_utts`` 0), or its
    pseudo-speaker's, a speaker's utterances in id order cut into runs of at most
    ``max_utts`` (``<speaker>-<k>``), as Kaldi's ``copy_data_dir.sh --utts-per-spk-max``."""
    if max_utts <= 0:
        return dict(utt2spk)
    seen: dict[str, int] = {}
    units = {}
    for utt in sorted(utt2spk):
        spk = utt2spk[utt]
        k = seen.get(spk, 0)
        seen[spk] = k + 1
        units[utt] = f"{spk}-{k // max_utts}"
    return units


def speaker_ivectors(
    extractor: IvectorExtractor, feats: TransformedFeatures, utt2spk: Mapping[str, str]
) -> dict[str, np.ndarray]:
    """Each speaker's i-vector from all of its utterances' ``feats`` (speaker-independent
    LDA+MLLT features: a speaker's own audio, no transcript)."""
    by_speaker: dict[str, list[str]] = {}
    for utt in feats.utt_ids:
        by_speaker.setdefault(utt2spk[utt], []).append(utt)
    return {spk: extractor.extract(feats(u) for u in utts) for spk, utts in by_speaker.items()}


def train_ivector_extractor(
    gmm_data: Path, ali_dir: Path, out: Path, *, dim: int, gauss: int, seed: int
) -> IvectorExtractor:
    """A UBM of ``gauss`` Gaussians and a ``dim``-dim extractor on the speaker-independent
    LDA+MLLT features (``ali_dir``'s ``final.mat``) of ``gmm_data``'s utterances, each
    utterance one training unit (as Kaldi's ``train_ivector_extractor.sh``); saved at ``out``."""
    began = time.monotonic()
    adaptation = Adaptation.read(Path(ali_dir))
    if adaptation is None:
        fmllr_dim(ali_dir)  # raises the error that names what is missing
        raise AssertionError("unreachable")
    feats = adaptation.features(GmmFeatures(gmm_data, delta_order=0), speakers=False)
    lengths = read_kaldi_map(Path(gmm_data) / "utt2num_frames")
    total = sum(int(lengths.get(u, 0)) for u in feats.utt_ids)
    every = max(1, -(-total // _UBM_FRAMES))
    sample = np.concatenate([feats(u)[::every] for u in feats.utt_ids])
    ubm, ubm_history = train_ubm(sample, gauss, seed=seed)
    units = [unit_stats(ubm, [feats(u)]) for u in feats.utt_ids]
    extractor, history = train_extractor(ubm, units, dim, seed=seed)
    extractor.save(out)
    log.info(
        "%s: UBM of %d Gaussians on %d frames (log-likelihood per frame %.3f), %d-dim extractor on "
        "%d utterances (objective per utterance %.2f -> %.2f), %.0f s",
        out,
        gauss,
        len(sample),
        ubm_history[-1],
        dim,
        len(units),
        history[0],
        history[-1],
        time.monotonic() - began,
    )
    return extractor


def write_training_inputs(
    exp_dir: Path,
    data_root: Path,
    sets: dict[str, Path],
    *,
    ivectors: AlignConfig | None = None,
    seed: int = 0,
    fbank: bool = True,
) -> None:
    """The joined features of the training and dev sets: ``sets`` maps each set's name to
    its alignment dir (whose ``final.mat`` and ``trans.1`` give the fMLLR features), the
    training set first. With ``ivectors`` (``align`` settings whose ``ivector_dim`` > 0),
    the i-vector extractor is trained on the first set and every speaker gets one.
    ``fbank``: the fbank features are part of the input."""
    extractor = None
    if ivectors is not None and ivectors.ivector_dim:
        name, ali_dir = next(iter(sets.items()))
        extractor = train_ivector_extractor(
            Path(exp_dir) / "gmm" / "data" / name,
            ali_dir,
            Path(exp_dir) / IVECTOR_EXTRACTOR,
            dim=ivectors.ivector_dim,
            gauss=ivectors.ivector_gauss,
            seed=seed,
        )
    for index, (name, ali_dir) in enumerate(sets.items()):
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
            ivectors=extractor,
            # The training set's only: the dev set is scored as decoded sets are.
            ivector_max_utts=ivectors.ivector_max_utts if ivectors is not None and index == 0 else 0,
            fbank=fbank,
        )


def write_decoding_input(
    exp_dir: Path,
    data_dir: Path,
    name: str,
    system_dir: Path,
    *,
    ivectors: bool = False,
    fbank: bool = True,
) -> Path:
    """The joined features of a decoded set, its speakers' transforms from the SAT
    system's two-pass decoding of it (``<system_dir>/decode_<name>/trans.1``) (and, with
    ``ivectors``, their i-vectors by the training stage's extractor; without ``fbank``, no
    fbank features); returns the data dir written."""
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
    extractor = read_ivector_extractor(exp_dir) if ivectors else None
    write_fmllr_dir(
        data_dir,
        Path(exp_dir) / "gmm" / "data" / name,
        adaptation,
        speakers,
        out,
        ivectors=extractor,
        fbank=fbank,
    )
    return out


def read_ivector_extractor(exp_dir: Path) -> IvectorExtractor:
    path = Path(exp_dir) / IVECTOR_EXTRACTOR
    if not path.is_file():
        raise DataError(f"{path}: not found; the training stage (6) trains it with align.ivector_dim > 0")
    return IvectorExtractor.load(path)


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
        wfst: the ``wfst`` settings (the first pass's beams and point, ``fmllr_estimates``).
        mfcc: the GMM stage's MFCC settings.
        ivectors: the i-vector extractor of a model trained with them (``align.ivector_dim``):
            the speaker's i-vector joins the features.
    """

    def __init__(
        self,
        system_dir: Path,
        *,
        gmm: GmmConfig,
        wfst: WfstConfig,
        mfcc: FeatureConfig,
        ivectors: IvectorExtractor | None = None,
    ) -> None:
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
        self.adaptation, self.ivectors = adaptation, ivectors
        self.gmm, self.mfcc = gmm, dataclasses.replace(mfcc, resample=True)
        self.first_pass = (float(wfst.first_pass[0]), float(wfst.first_pass[1]))
        self.fmllr_estimates = wfst.fmllr_estimates
        self.search = wfst_search(
            load_graph_dir(self.system_dir / "graph"),
            self.system.trans_model,
            wfst,
            acoustic_scale=gmm.acoustic_scale,
        )

    @property
    def ivector_dim(self) -> int:
        return self.ivectors.dim if self.ivectors is not None else 0

    def joined(
        self,
        recordings: Sequence[tuple[str, np.ndarray, int, str]],
        fbank: FeatureConfig,
        *,
        with_fbank: bool = True,
    ) -> dict[str, np.ndarray]:
        """``(utt, samples, rate, where)`` of one speaker -> utt -> fbank and fMLLR
        features (and the speaker's i-vector) side by side (not normalised); without
        ``with_fbank``, the fMLLR features (and i-vector) alone."""
        from asrkit.features.extractors import extract
        from asrkit.gmm.adapt import TransformedFeatures, adapt_test_speakers

        speaker = "speaker"
        mfcc = {utt: extract(s, r, self.mfcc, utt=utt, where=w) for utt, s, r, w in recordings}
        si = TransformedFeatures(
            _SpeakerMfcc(mfcc, speaker),  # type: ignore[arg-type]
            self.adaptation.transform,
            context=self.adaptation.context,
        )
        alimdl = self.adaptation.alimdl
        assert alimdl is not None
        speakers = adapt_test_speakers(
            self.system,
            alimdl,
            si,
            self.search,
            self.first_pass,
            self.gmm,
            estimates=self.fmllr_estimates,
            label=f"first pass ({self.system_dir.name}, one speaker)",
        ).speakers
        adapted = TransformedFeatures(si.base, si.transform, context=si.context, speakers=speakers)
        vector = self.ivectors.extract(si(u) for u in si.utt_ids) if self.ivectors is not None else None
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
            parts = [raw, fmllr] if with_fbank else [fmllr]
            if vector is not None:
                parts.append(np.broadcast_to(vector, (len(raw), len(vector))))
            out[utt] = np.hstack(parts).astype(np.float32)
        return out
