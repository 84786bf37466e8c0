"""A trained experiment as a recognizer: model, features, CMVN and tokenizer.

Everything comes from the experiment directory — ``model.pt`` (weights plus
the ``meta`` that records the feature settings, CMVN mode and model shape),
``cmvn_global.ark`` and ``tokenizer/`` — so decoding works without the recipe
config that trained it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from asrkit.choices import CMVN_MODES
from asrkit.data.audio import iter_utterance_audio
from asrkit.decoding.beam import BOUNDARY
from asrkit.decoding.greedy import greedy_ctc
from asrkit.errors import ConfigError, DataError
from asrkit.features.cmvn import cmvn_stats, read_cmvn
from asrkit.features.extractors import FeatureConfig, extract
from asrkit.loader.batch import CmvnNormalizer, Utterance, plan_buckets
from asrkit.loader.opening import open_data_dir
from asrkit.loader.sources import InMemorySource, UtteranceSource, as_source
from asrkit.models.checkpoint import load_model_bundle
from asrkit.progress import Progress
from asrkit.targets.forced_align import ctc_forced_align
from asrkit.targets.tokenizer import Tokenizer
from asrkit.threads import ThreadGovernor

log = logging.getLogger(__name__)

#: Input frames one forward pass takes at most (30 s at 10 ms). A longer utterance is cut
#: into pieces at its quietest frame in the last quarter of each window (a 3-minute file in
#: one pass took 1.6 GB, growing with its length); the pieces' outputs are joined, so the
#: search sees the whole utterance and memory is bounded by a piece.
MAX_CHUNK_FRAMES = 3000


def cut_points(feats: np.ndarray, *, most: int = MAX_CHUNK_FRAMES, multiple: int = 1) -> list[int]:
    """Boundaries ``[0, ..., T]`` of pieces of ``feats`` ``(T, D)`` of at most ``most``
    frames, each but the last a multiple of ``multiple`` (the model's subsampling, so the
    pieces' outputs join into the whole's), cut where the frame mean (the log-energy, in
    normalised filterbanks) is lowest in the last quarter of each window."""
    total = int(feats.shape[0])
    most = max(multiple, most - most % multiple)
    bounds, start = [0], 0
    energy = feats.mean(axis=1) if total > most else None
    while total - start > most:
        assert energy is not None
        low = start + most * 3 // 4
        cut = low + int(np.argmin(energy[low : start + most]))
        cut -= (cut - start) % multiple
        if cut <= start:
            cut = start + most
        bounds.append(cut)
        start = cut
    bounds.append(total)
    return bounds


class Recognizer:
    """Greedy recognition with a trained experiment (the CTC head, or the frame head of a
    CE model whose classes are CTC tokens).

    Args:
        exp_dir: the experiment directory.
        model: the bundle file inside it.
        device: where the model runs.
        max_frames: cap on padded frames per batch.
    """

    def __init__(
        self,
        exp_dir: str | Path,
        *,
        model: str = "model.pt",
        device: str | torch.device = "cpu",
        max_frames: int = 40000,
        max_chunk_frames: int = MAX_CHUNK_FRAMES,
    ) -> None:
        self.exp_dir = Path(exp_dir)
        self.max_chunk_frames = max_chunk_frames
        self.device = torch.device(device)
        self.model_file = model
        self.model, self.meta = load_model_bundle(self.exp_dir / model, device=self.device)
        self.features = FeatureConfig(**self.meta["features"])
        self.tokenizer = Tokenizer(self.exp_dir / self.meta["tokenizer"])
        self.tokenizer.check_model(self.meta, int(self.model.num_tokens), model=self.exp_dir / model)
        if self.meta["cmvn"] not in CMVN_MODES:
            raise DataError(
                f"{self.exp_dir / model}: records cmvn={self.meta['cmvn']!r}, not one of "
                f"{', '.join(CMVN_MODES)}; the file is damaged or not an asrkit model — retrain (stage 4)"
            )
        stats = None
        if self.meta["cmvn"] == "global":
            stats_file = self.exp_dir / "cmvn_global.ark"
            if not stats_file.is_file():
                raise DataError(
                    f"{stats_file}: not found; the model was trained with global CMVN "
                    "and decodes with the training set's stats — copy the training "
                    "set's cmvn_global.ark here, or retrain (stage 4)"
                )
            stats = read_cmvn(stats_file)
            dim = int(self.model.input_dim)
            if stats.shape[-1] - 1 != dim:  # Kaldi's stats: (2, D + 1), the count last
                raise DataError(
                    f"{stats_file}: stats of {stats.shape[-1] - 1}-dim features, but "
                    f"{self.exp_dir / model} reads {dim}-dim ones; the stats belong to another "
                    "experiment — copy this model's training set's cmvn_global.ark here, or retrain (stage 4)"
                )
        self.normalize = CmvnNormalizer(
            self.meta["cmvn"], global_stats=stats, norm_vars=self.features.norm_vars
        )
        self.max_frames = max_frames

    def audio_features(self, samples: np.ndarray, rate: int, *, utt: str, where: str) -> np.ndarray:
        """Normalised features of int16-range ``samples`` at any ``rate`` (resampled)."""
        cfg = dataclasses.replace(self.features, resample=True)
        return self.normalize(extract(samples, rate, cfg, utt=utt, where=where))

    def audio_source(self, samples: np.ndarray, rate: int, *, utt: str, where: str) -> InMemorySource:
        """One recording as utterance ``utt`` ready for :meth:`outputs` (``where`` names it
        in errors): what a decoder's ``prepare_audio`` reads."""
        feats = self.audio_features(samples, rate, utt=where, where=where)
        return InMemorySource([Utterance(utt, feats, np.zeros(0, dtype=np.int64))])

    def speaker_source(self, recordings: Sequence[tuple[str, np.ndarray, int, str]]) -> InMemorySource:
        """One speaker's recordings, ``(utt, samples, rate, where)`` each, ready for
        :meth:`outputs`: with per-speaker CMVN, normalised with the statistics of all of
        them (as a data dir's ``cmvn.scp`` has a speaker's)."""
        cfg = dataclasses.replace(self.features, resample=True)
        raw = [
            (utt, extract(samples, rate, cfg, utt=where, where=where))
            for utt, samples, rate, where in recordings
        ]
        stats = sum(cmvn_stats(x) for _, x in raw) if raw else None
        return InMemorySource(
            [Utterance(utt, self.normalize(x, stats), np.zeros(0, dtype=np.int64)) for utt, x in raw]  # type: ignore[arg-type]
        )

    @property
    def decode_head(self) -> str | None:
        """The output that decodes to tokens: ``ctc``, ``frame`` (a CE model trained on a
        CTC model's forced alignments) or None (CE on Kaldi pdf-ids: no word output here)."""
        return self.meta.get("decode_head", "ctc")

    @torch.no_grad()
    def outputs(
        self, data: UtteranceSource | Sequence[Utterance], head: str
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """``(utterance, (T', V) scores)`` of the model's ``head`` output (``ctc``
        log-probabilities or ``frame`` logits) on the CPU, batched by length by the
        loader's planner and read batch by batch (a streamed set is never held whole).

        On the CPU the intra-op threads follow the cores other processes leave free, as
        training's do (:class:`~asrkit.threads.ThreadGovernor`; the outputs do
        not depend on the count): beside a busy process on two cores, two spinning
        OpenMP threads made a hybrid's acoustic scores about 10x slower."""
        source = as_source(data)
        reader = source.reader()
        lengths = np.asarray(source.lengths)
        short = np.flatnonzero(lengths <= self.max_chunk_frames)
        threads = torch.get_num_threads()
        governor = (
            ThreadGovernor(threads, interval_s=0.5) if self.device.type == "cpu" and threads > 1 else None
        )
        try:
            for idx in plan_buckets(lengths[short], max_frames=self.max_frames, max_batch=64):
                if governor is not None:
                    governor.poll()
                batch = reader.read_batch(short[idx]).to(self.device)
                result = self._forward(batch.feats, batch.lengths, head)
                for b, utt in enumerate(batch.utts):
                    yield utt, result[head][b, : int(result["lengths"][b])].cpu()
            for i in np.flatnonzero(lengths > self.max_chunk_frames).tolist():
                if governor is not None:
                    governor.poll()
                (whole,) = reader.read([i])
                yield whole.utt, self._chunked(whole.feats, head)
        finally:
            reader.close()
            if governor is not None:
                torch.set_num_threads(threads)

    def _forward(self, feats: torch.Tensor, lengths: torch.Tensor, head: str) -> dict[str, torch.Tensor]:
        result = self.model(feats, lengths)
        if head not in result:
            raise ConfigError(f"{self.exp_dir}: the model has no {head!r} output")
        return result

    def _chunked(self, feats: np.ndarray, head: str) -> torch.Tensor:
        """``head``'s output for one long utterance, piece by piece (:func:`cut_points`)."""
        bounds = cut_points(
            feats, most=self.max_chunk_frames, multiple=int(getattr(self.model, "subsample", 1))
        )
        pieces = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            piece = torch.from_numpy(np.ascontiguousarray(feats[a:b]))[None].to(self.device)
            result = self._forward(piece, torch.tensor([b - a]), head)
            pieces.append(result[head][0, : int(result["lengths"][0])].cpu())
        return torch.cat(pieces)

    def posteriors(
        self, utts: UtteranceSource | Sequence[Utterance], *, progress: Progress | None = None
    ) -> list[tuple[str, torch.Tensor]]:
        """``(utterance, (T', V) log-probabilities)`` of the output that decodes to tokens;
        ``progress`` counts the utterances as they come out of the network."""
        head = self.decode_head
        if head is None:
            raise ConfigError(
                f"{self.exp_dir}: this CE model's classes are Kaldi pdf-ids, which "
                "do not map to words here; write log-likelihoods (stage 7) and "
                "decode them with Kaldi's latgen-faster-mapped"
            )
        outputs = self.outputs(utts, head)
        return [
            (utt, scores.log_softmax(dim=-1) if head == "frame" else scores)
            for utt, scores in (outputs if progress is None else progress.each(outputs))
        ]

    def greedy(self, log_probs: torch.Tensor) -> str:
        """The best-path transcript of one utterance's ``(T', V)`` log-probabilities."""
        return self.tokenizer.decode(greedy_ctc(log_probs[None], torch.tensor([log_probs.shape[0]]))[0])

    @property
    def frame_seconds(self) -> float:
        """Seconds per model output frame (the feature hop times the model's subsampling)."""
        return self.features.frame_shift_ms / 1000.0 * int(self.model.args.get("subsample", 1))

    def word_times(self, log_probs: torch.Tensor, text: str) -> list[tuple[str, float, float]] | None:
        """``(word, start s, duration s)`` of each word of ``text`` (one utterance's
        transcript) from the CTC forced alignment of its units through ``log_probs``
        ``(T', V)``; None when the utterance has too few frames to align it."""
        words = text.split()
        pieces = [self.tokenizer.encode(w) for w in words]
        path = ctc_forced_align(log_probs, [t for p in pieces for t in p])
        if path is None:
            return None
        # The frames of each emitted unit, in order (a new unit starts where the label
        # changes to a non-blank, or repeats after a blank).
        spans: list[list[int]] = []
        previous = 0
        for frame, label in enumerate(path.tolist()):
            if label and label != previous:
                spans.append([frame, frame])
            elif label:
                spans[-1][1] = frame
            previous = label
        boundary = self.tokenizer.units().index(BOUNDARY) if BOUNDARY in self.tokenizer.units() else -1
        out, k, step = [], 0, self.frame_seconds
        for word, ids in zip(words, pieces, strict=True):
            own = spans[k : k + len(ids)]
            k += len(ids)
            # A stand-alone boundary unit marks where the word starts, not its sound.
            sounded = [span for span, unit in zip(own, ids, strict=True) if unit != boundary] or own
            start, end = sounded[0][0], sounded[-1][1] + 1
            out.append((word, round(start * step, 3), round((end - start) * step, 3)))
        return out

    def recognize(
        self,
        utts: UtteranceSource | Sequence[Utterance],
        search: Callable[[torch.Tensor], str] | None = None,
    ) -> dict[str, str]:
        """Transcripts of ``utts`` (features already normalised), batched by length;
        ``search`` turns one utterance's log-probabilities into text (default greedy)."""
        search = search or self.greedy
        return {utt: search(log_probs) for utt, log_probs in self.posteriors(utts)}

    def open_set(self, data_dir: str | Path) -> UtteranceSource:
        """A data dir's utterances as the loader opens them (``feats.scp``, read when
        asked for), or, without ``feats.scp``, computed from its audio into memory."""
        data_dir = Path(data_dir)
        if (data_dir / "feats.scp").is_file():
            return open_data_dir(data_dir, self.normalize, input_dim=self.model.input_dim)
        log.info("%s has no feats.scp; computing features from wav.scp", data_dir)
        utts = []
        # Each recording read once (a segmented dir's recordings are cut into utterances).
        for utt, samples, rate, source in iter_utterance_audio(data_dir):
            feats = self.audio_features(samples, rate, utt=utt, where=source)
            utts.append(Utterance(utt, feats, np.zeros(0, dtype=np.int64)))
        return InMemorySource(utts)


def check_exp_dir(exp_dir: str | Path, model: str = "model.pt") -> None:
    path = Path(exp_dir) / model
    if not path.is_file():
        raise DataError(
            f"{path}: no trained model; run the training stage (stage 4) or pass an "
            "experiment directory that holds model.pt"
        )
