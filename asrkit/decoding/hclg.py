"""Decoding through an HCLG graph: a GMM system's log-likelihoods (``gmm``), or a hybrid
(NN-HMM) network's log posteriors minus the tied states' log priors (``hybrid``: Kaldi's
"scaled likelihoods"; the priors are counted from the training alignments), or several
such networks on the same input and tied states, their log posteriors averaged frame by
frame (``combined``: a hybrid experiment's ensemble, stage 8). Each utterance's lattice
is rescored at every (LM weight, word penalty) point asked for
(:meth:`~asrkit.decoding.wfst.WfstDecoder.sweep`), so tuning decodes each set once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asrkit.decoding.decoder import Decoder, DecodingRecord, Point, Prepared, register_kind
from asrkit.errors import ConfigError, DataError
from asrkit.loader.sources import UtteranceSource
from asrkit.progress import Progress

if TYPE_CHECKING:
    from asrkit.decoding.recognizer import Recognizer
    from asrkit.decoding.wfst import WfstDecoder
    from asrkit.decoding.word_align import WordAligner
    from asrkit.gmm.config import GmmConfig
    from asrkit.gmm.nnet_input import SpeakerAdapter
    from asrkit.gmm.train import GmmSystem

__all__ = [
    "PRIOR_COUNTS",
    "GmmDecoder",
    "HclgDecoder",
    "HybridDecoder",
    "HybridScorer",
    "read_counts",
]

#: The pdf counts of the training alignments, written in a hybrid experiment dir.
PRIOR_COUNTS = "ali_train_pdf.counts"
#: The search settings a record keeps (:class:`~asrkit.decoding.wfst.WfstDecoder`'s).
SEARCH = ("acoustic_scale", "beam", "lattice_beam", "max_active")


def read_counts(path: str | Path) -> np.ndarray:
    """A Kaldi counts vector file (``[ c0 c1 ... ]``) as float64."""
    text = Path(path).read_text().replace("[", " ").replace("]", " ")
    return np.array([float(x) for x in text.split()], dtype=np.float64)


class HybridScorer:
    """Frame logits ``(T', C)`` -> decoder log-likelihoods ``(T, C)``: log-softmax, minus
    the log priors, repeated back to the alignments' frame rate when the model
    subsamples by ``subsample``."""

    def __init__(
        self,
        log_priors: np.ndarray,
        *,
        subsample: int = 1,
        prior_floor: float = 1e-10,
        prior_scale: float = 1.0,
    ) -> None:
        self.log_priors = log_priors
        self.subsample = subsample
        self.prior_floor, self.prior_scale = prior_floor, prior_scale

    def __call__(self, logits: torch.Tensor, num_frames: int) -> np.ndarray:
        return self.likelihoods(logits.float().log_softmax(dim=-1).numpy(), num_frames)

    def likelihoods(self, post: np.ndarray, num_frames: int) -> np.ndarray:
        """Log posteriors ``(T', C)`` (one network's, or an ensemble's average) -> the
        decoder's log-likelihoods ``(T, C)``."""
        from asrkit.decoding.wfst import pdf_log_likelihoods

        if self.subsample > 1:
            post = np.repeat(post, self.subsample, axis=0)[:num_frames]
        return pdf_log_likelihoods(
            post, self.log_priors, prior_floor=self.prior_floor, prior_scale=self.prior_scale
        )


class HclgDecoder(Decoder):
    """Acoustic log-likelihoods ``(T, pdfs)`` through an HCLG graph.

    Args:
        search: the graph's decoder (beams, acoustic scale).
        grid: (LM weight, word penalty) points.
        graph: the graph dir, for the record.
        transitions: the ``final.mdl`` the graph's transition ids belong to, for the record.
        nj: jobs each set's lattices are searched in.

    Attributes:
        journal: set name -> where that set's sweep keeps the utterances it finished
            (:class:`~asrkit.decoding.wfst.SweepJournal`), so a decoding stopped part-way
            goes on where it was; ``None`` (the default) keeps none.
    """

    weight_names = ("lm_weight", "word_penalty")

    def __init__(
        self,
        search: WfstDecoder,
        grid: Sequence[Point],
        *,
        graph: str | Path,
        transitions: str | Path,
        nj: int = 1,
    ) -> None:
        super().__init__(grid)
        self.search, self.nj = search, nj
        self.graph, self.transitions = Path(graph), Path(transitions)
        self.journal: Callable[[str], Path] | None = None

    def hypotheses(self, prepared: Prepared, points: Sequence[Point]) -> dict[Point, dict[str, str]]:
        began = time.monotonic()
        lm_weights = sorted({w for w, _ in points})
        penalties = sorted({p for _, p in points})
        journal = None
        if self.journal is not None and prepared.name:
            from asrkit.decoding.wfst import SweepJournal

            journal = SweepJournal(self.journal(prepared.name), self._graph_identity())
        swept = self.search.sweep(
            prepared.scores,
            lm_weights,
            word_penalties=penalties,
            nj=self.nj,
            label=self.progress_label("decoding", prepared.name, len(points)),
            journal=journal,
        )
        out: dict[Point, dict[str, str]] = {point: {} for point in points}
        for utt, words in swept.items():
            for point in points:
                out[point][utt] = " ".join(words[point])
        prepared.seconds += time.monotonic() - began
        return out

    def _graph_identity(self) -> dict[str, Any]:
        """The graph and transition model files searched with: paths, sizes, times."""
        identity: dict[str, Any] = {}
        for name, path in (("graph", self.graph / "HCLG.fst"), ("transitions", self.transitions)):
            try:
                stat = path.stat()
                identity[name] = [str(path.resolve()), stat.st_size, stat.st_mtime_ns]
            except OSError:
                identity[name] = [str(path)]
        return identity

    def _word_aligner(self) -> WordAligner | None:
        """The aligner of this decoder's system, or None when it cannot have one."""
        return None

    @property
    def has_word_times(self) -> bool:
        return self._word_aligner() is not None

    def word_times(self, prepared: Prepared, utt: str, text: str) -> list[tuple[str, float, float]] | None:
        """``(word, start s, duration s)`` of ``text`` (a hypothesis of ``utt``): the words'
        training graph aligned to the decoder's own scores (:mod:`~asrkit.decoding.word_align`)."""
        aligner = self._word_aligner()
        if aligner is None:
            return super().word_times(prepared, utt, text)
        aligner.frame_shift = float(prepared.extra.get("frame_shift", aligner.frame_shift))
        return aligner.word_times(prepared.scores[utt], text, utt=utt)

    def _settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "graph": str(self.graph.resolve()),
            "transitions": str(self.transitions.resolve()),
        }
        settings.update({name: getattr(self.search, name) for name in SEARCH})
        return settings


class GmmDecoder(HclgDecoder):
    """A GMM system's log-likelihoods of its features (a GMM data dir per set, as the
    hybrid recipe's stage 4 makes them in ``gmm/data/<set>``): MFCC + CMVN + deltas, or,
    for a system with a ``final.mat`` (LDA+MLLT), spliced MFCC + CMVN through it. A SAT
    system (with ``final.alimdl``) decodes in two passes, as Kaldi's ``decode_fmllr.sh``:
    its speaker-independent model decodes at ``first_pass``, each speaker's fMLLR transform
    is estimated from those hypotheses and the speaker's own audio (never a reference), and
    the SAT model decodes the adapted features. The speakers' transforms and the first
    pass's hypotheses are kept in ``Prepared.extra`` (``speakers``, ``first_pass``).

    Args:
        system_dir: the system's exp dir (its ``final.mat``, ``final.alimdl``).
        first_pass: (LM weight, word penalty) of a SAT system's first pass.
        fmllr_estimates: how often the test speakers' transforms are estimated (1: from
            the first pass; 2: again from the adapted pass's hypotheses, as Kaldi's final
            fMLLR; :func:`~asrkit.gmm.adapt.adapt_test_speakers`).
        adapt: the ``gmm`` settings the test speakers' alignments and transforms use.
        The rest: as :class:`HclgDecoder`.
    """

    kind = "gmm"

    def __init__(
        self,
        system: GmmSystem,
        search: WfstDecoder,
        grid: Sequence[Point],
        *,
        name: str,
        features_root: str | Path,
        sample_rate: int,
        graph: str | Path,
        transitions: str | Path,
        system_dir: str | Path | None = None,
        first_pass: Point = (12.0, 0.0),
        fmllr_estimates: int = 1,
        adapt: GmmConfig | None = None,
        nj: int = 1,
    ) -> None:
        from asrkit.gmm.adapt import Adaptation
        from asrkit.gmm.config import GmmConfig

        super().__init__(search, grid, graph=graph, transitions=transitions, nj=nj)
        self.system, self.name = system, name
        self.features_root, self._rate = Path(features_root), sample_rate
        self.adaptation = Adaptation.read(Path(system_dir), system.lang) if system_dir is not None else None
        self.first_pass = (float(first_pass[0]), float(first_pass[1]))
        self.fmllr_estimates = fmllr_estimates
        self.adapt = adapt or GmmConfig()
        self._aligner: WordAligner | None = None

    def _word_aligner(self) -> WordAligner | None:
        if self._aligner is None:
            from asrkit.decoding.word_align import WordAligner

            system = self.system
            self._aligner = WordAligner(
                system.lang, system.ctx_dep, system.trans_model, acoustic_scale=self.search.acoustic_scale
            )
        return self._aligner

    @property
    def label(self) -> str:
        return self.name

    @property
    def sample_rate(self) -> int:
        return self._rate

    @property
    def two_pass(self) -> bool:
        return self.adaptation is not None and self.adaptation.alimdl is not None

    def prepare(self, data_dir: str | Path) -> Prepared:
        from asrkit.gmm.adapt import TransformedFeatures, adapt_test_speakers
        from asrkit.gmm.feats import GmmFeatures

        name = Path(data_dir).name
        gmm_data = self.features_root / name
        if not (gmm_data / "feats.scp").is_file():
            raise DataError(
                f"{gmm_data}: no GMM features for decode set {name}; the GMM systems decode the "
                "recipe's own sets (data.dev_set, data.test_sets)"
            )
        began = time.monotonic()
        extra: dict[str, Any] = {}
        if self.adaptation is None:
            feats: Any = GmmFeatures(gmm_data)
        else:
            feats = self.adaptation.features(GmmFeatures(gmm_data, delta_order=0), speakers=False)
        if self.two_pass:
            assert self.adaptation is not None and self.adaptation.alimdl is not None
            adapted = adapt_test_speakers(
                self.system,
                self.adaptation.alimdl,
                feats,
                self.search,
                self.first_pass,
                self.adapt,
                estimates=self.fmllr_estimates,
                nj=self.nj,
                label=self.progress_label("first pass", name),
                where=f"{gmm_data} (first-pass hypotheses)",
            )
            extra.update(
                first_pass=adapted.first_pass,
                speakers=adapted.speakers,
                first_pass_seconds=time.monotonic() - began,
            )
            feats = TransformedFeatures(
                feats.base, feats.transform, context=feats.context, speakers=adapted.speakers
            )
        with Progress(self.progress_label("acoustic scores", name), total=len(feats.utt_ids)) as p:
            scores = {utt: self.system.log_likelihoods(feats(utt)) for utt in p.each(feats.utt_ids)}
        frames = sum(s.shape[0] for s in scores.values())
        if (gmm_data / "frame_shift").is_file():
            extra["frame_shift"] = float((gmm_data / "frame_shift").read_text())
        return Prepared(scores, frames=frames, seconds=time.monotonic() - began, extra=extra, name=name)

    def prepare_audio(self, samples: np.ndarray, rate: int, *, utt: str, where: str) -> Prepared:
        raise ConfigError(
            f"{where}: a GMM system decodes the recipe's data dirs (stage 5); transcribe audio "
            "with a hybrid or CTC experiment"
        )

    def record(self, point: Point, *, tuned_on: str) -> DecodingRecord:
        settings = self._settings()
        if self.two_pass:
            settings["first_pass"] = list(self.first_pass)
            settings["fmllr_estimates"] = self.fmllr_estimates
        return DecodingRecord(kind="gmm", weights=list(point), tuned_on=tuned_on, settings=settings)


#: What a network's input and outputs are, as its bundle's meta records them: ensemble
#: members must agree on each with the experiment's network (with the default when absent).
MEMBER_INPUT = {"features": None, "cmvn": None, "fmllr": False, "fbank": True, "ivector_dim": 0}


class HybridDecoder(HclgDecoder):
    """A frame (CE) network's scaled likelihoods (:class:`HybridScorer`) through HCLG;
    with ``members``, an ensemble's: the log posteriors of the recognizer's network and of
    every member's, averaged frame by frame, minus the log priors (the decoder's kind is
    then ``combined``). Members read the recognizer's input (features, CMVN, the joined
    fMLLR + i-vector input) and output the same tied states.

    Args:
        recognizer: the experiment's network, features and CMVN.
        scorer: log posteriors -> log-likelihoods (the priors).
        counts: the pdf counts the priors come from, for the record.
        members: more networks (other experiments' dirs) to average with the recognizer's.
        The rest: as :class:`HclgDecoder`.

    Raises:
        ConfigError: a member reads another input or has other output classes.
    """

    kind = "hybrid"

    def __init__(
        self,
        recognizer: Recognizer,
        scorer: HybridScorer,
        search: WfstDecoder,
        grid: Sequence[Point],
        *,
        counts: str | Path,
        graph: str | Path,
        transitions: str | Path,
        adapter: SpeakerAdapter | None = None,
        lang: str | Path | None = None,
        nj: int = 1,
        members: Sequence[Recognizer] = (),
    ) -> None:
        super().__init__(search, grid, graph=graph, transitions=transitions, nj=nj)
        self.recognizer, self.scorer, self.counts = recognizer, scorer, Path(counts)
        self.members = list(members)
        for member in self.members:
            _check_member(recognizer, member)
        if self.members:
            self.kind = "combined"
        self.adapter = adapter
        self.lang = Path(lang) if lang is not None else None
        self._aligner: WordAligner | None = None

    def _word_aligner(self) -> WordAligner | None:
        """From the lang dir and the tree beside ``transitions`` (an alignment or system
        dir's); None for a record made before decoders kept their lang."""
        if self._aligner is None and self.lang is not None:
            from asrkit.decoding.word_align import WordAligner

            self._aligner = WordAligner.from_dirs(
                self.lang,
                self.transitions.parent,
                acoustic_scale=self.search.acoustic_scale,
                frame_shift=self.recognizer.features.frame_shift_ms / 1000.0,
            )
        return self._aligner

    @property
    def sample_rate(self) -> int:
        return self.recognizer.features.sample_rate

    def prepare(self, data_dir: str | Path) -> Prepared:
        return self._prepared(self.recognizer.open_set(data_dir), name=Path(data_dir).name)

    def prepare_audio(self, samples: np.ndarray, rate: int, *, utt: str, where: str) -> Prepared:
        if self.recognizer.meta.get("fmllr"):
            return self.prepare_speaker([(utt, samples, rate, where)])
        return self._prepared(self.recognizer.audio_source(samples, rate, utt=utt, where=where))

    def prepare_speaker(self, recordings: Sequence[tuple[str, np.ndarray, int, str]]) -> Prepared:
        """One speaker's recordings. A model on fbank + fMLLR input (``align.fmllr``): the
        SAT system's first pass over all of them gives the speaker's transform
        (:class:`~asrkit.gmm.nnet_input.SpeakerAdapter`), and the joined features are
        normalised with the speaker's statistics over all of them."""
        if not self.recognizer.meta.get("fmllr"):
            return self._prepared(self.recognizer.speaker_source(recordings))
        if self.adapter is None:
            raise ConfigError(
                f"{self.recognizer.model_file} reads fbank joined with fMLLR features (align.fmllr) "
                "but this decoder has no SAT system to adapt with; decode with the record stage 7 wrote"
            )
        from asrkit.gmm.nnet_input import speaker_stats
        from asrkit.loader.batch import Utterance
        from asrkit.loader.sources import InMemorySource

        joined = self.adapter.joined(
            recordings, self.recognizer.features, with_fbank=self.recognizer.meta.get("fbank", True)
        )
        stats = speaker_stats(joined.values(), self.adapter.ivector_dim)
        normalize = self.recognizer.normalize
        utts = [Utterance(utt, normalize(x, stats), np.zeros(0, dtype=np.int64)) for utt, x in joined.items()]
        return self._prepared(InMemorySource(utts))

    def _prepared(self, utts: UtteranceSource, *, name: str = "") -> Prepared:
        lengths = dict(zip(utts.ids, np.asarray(utts.lengths).tolist(), strict=True))
        began = time.monotonic()
        with (
            torch.inference_mode(),
            Progress(self.progress_label("acoustic scores", name), total=len(lengths)) as progress,
        ):
            outputs = progress.each(self.recognizer.outputs(utts, "frame"))
            if not self.members:
                scores = {utt: self.scorer(out, lengths[utt]) for utt, out in outputs}
            else:
                # Every network batches the same utterances the same way: read in step.
                others = [member.outputs(utts, "frame") for member in self.members]
                scores = {}
                for utt, out in outputs:
                    post = out.float().log_softmax(dim=-1)
                    for member, stream in zip(self.members, others, strict=True):
                        theirs, their_out = next(stream)
                        if theirs != utt or their_out.shape != out.shape:
                            raise DataError(
                                f"{member.exp_dir / member.model_file} scored {theirs} "
                                f"{tuple(their_out.shape)} where {self.recognizer.model_file} "
                                f"scored {utt} {tuple(out.shape)}; its subsampling differs"
                            )
                        post += their_out.float().log_softmax(dim=-1)
                    post /= 1 + len(self.members)
                    scores[utt] = self.scorer.likelihoods(post.numpy(), lengths[utt])
        return Prepared(scores, frames=sum(lengths.values()), seconds=time.monotonic() - began, name=name)

    def record(self, point: Point, *, tuned_on: str) -> DecodingRecord:
        settings = self._settings()
        settings.update(
            counts=str(self.counts),
            prior_floor=self.scorer.prior_floor,
            prior_scale=self.scorer.prior_scale,
        )
        if self.lang is not None:
            settings["lang"] = str(self.lang.resolve())
        if self.adapter is not None:
            settings["fmllr_system"] = str(self.adapter.system_dir.resolve())
            if self.adapter.ivectors is not None:
                settings["ivectors"] = True
        if self.members:
            home = self.recognizer.exp_dir.resolve()
            settings["members"] = [
                {"dir": os.path.relpath(m.exp_dir.resolve(), home), "model": m.model_file}
                for m in self.members
            ]
        return DecodingRecord(
            kind=self.kind,
            weights=list(point),
            tuned_on=tuned_on,
            model=self.recognizer.model_file,
            settings=settings,
        )


def _input_setting(meta: dict[str, Any], key: str, default: Any) -> Any:
    """A network's ``key`` input setting as its model.pt records it, less the settings that
    change how the input is made and not what it is (``features.nj``:
    :data:`~asrkit.config.NOT_OUTPUT_SETTINGS`)."""
    from asrkit.config import NOT_OUTPUT_SETTINGS

    value = meta.get(key, default)
    if not isinstance(value, dict):
        return value
    ignored = {name for section, _, name in (s.partition(".") for s in NOT_OUTPUT_SETTINGS) if section == key}
    return {name: v for name, v in value.items() if name not in ignored}


def _check_member(recognizer: Recognizer, member: Recognizer) -> None:
    ours, theirs = recognizer.exp_dir / recognizer.model_file, member.exp_dir / member.model_file
    for key, default in MEMBER_INPUT.items():
        mine, yours = _input_setting(recognizer.meta, key, default), _input_setting(member.meta, key, default)
        if mine != yours:
            raise ConfigError(
                f"{theirs}: its {key} ({yours!r}) is not {ours}'s ({mine!r}); an ensemble's networks "
                "read the same input (train the member with the experiment's settings and "
                "align.inputs_from)"
            )
    for what in ("num_classes", "subsample"):
        mine, yours = getattr(recognizer.model, what, 1), getattr(member.model, what, 1)
        if mine != yours:
            raise ConfigError(
                f"{theirs}: {what}={yours}, but {ours} has {what}={mine}; an ensemble's networks "
                "score the same tied states at the same frame rate (train it on the same alignments)"
            )


@register_kind("hybrid")
def _hybrid_from_record(exp_dir: Path, record: DecodingRecord, *, model: str, device: str) -> HybridDecoder:
    """The hybrid decoder a record names (stage 7's, or stage 8's ensemble: ``combined``
    with ``members``)."""
    from asrkit.decoding.recognizer import Recognizer
    from asrkit.decoding.wfst import WfstDecoder
    from asrkit.gmm.graph import load_graph_dir
    from asrkit.gmm.model_io import read_model
    from asrkit.targets.forced_align import log_priors

    def here(path: str) -> Path:
        return Path(path) if Path(path).is_absolute() else exp_dir / path

    s = record.settings
    recognizer = Recognizer(exp_dir, model=model, device=device)
    transitions = here(s["transitions"])
    search = WfstDecoder.from_graph_dir(
        load_graph_dir(here(s["graph"])),
        read_model(transitions, with_gmm=False),
        **{name: s[name] for name in SEARCH},
    )
    scorer = HybridScorer(
        log_priors(read_counts(here(s.get("counts", PRIOR_COUNTS)))),
        subsample=int(getattr(recognizer.model, "subsample", 1)),
        prior_floor=s["prior_floor"],
        prior_scale=s["prior_scale"],
    )
    adapter = None
    if "fmllr_system" in s:
        from asrkit.config import load_saved
        from asrkit.gmm.feats import gmm_mfcc
        from asrkit.gmm.nnet_input import SpeakerAdapter, read_ivector_extractor

        cfg = load_saved(exp_dir / "config.yaml")
        adapter = SpeakerAdapter(
            here(s["fmllr_system"]),
            gmm=cfg.gmm,
            wfst=cfg.wfst,
            mfcc=gmm_mfcc(cfg.features),
            ivectors=read_ivector_extractor(exp_dir) if s.get("ivectors") else None,
        )
    members = [Recognizer(here(m["dir"]), model=m["model"], device=device) for m in s.get("members", [])]
    return HybridDecoder(
        recognizer,
        scorer,
        search,
        [record.point],
        counts=here(s.get("counts", PRIOR_COUNTS)),
        graph=here(s["graph"]),
        transitions=transitions,
        adapter=adapter,
        lang=here(s["lang"]) if "lang" in s else None,
        members=members,
    )


hybrid_from_record = _hybrid_from_record


@register_kind("gmm")
def _gmm_from_record(exp_dir: Path, record: DecodingRecord, *, model: str, device: str) -> Decoder:
    raise ConfigError(
        f"{exp_dir}: GMM systems decode the recipe's data dirs (stage 5), not audio files; "
        "transcribe with a hybrid or CTC experiment"
    )
