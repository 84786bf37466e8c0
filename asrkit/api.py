"""asrkit from Python: recognise speech with a trained (or exported) experiment.

    from asrkit import Recognizer
    rec = Recognizer.load("exp/an4_hybrid_sat")      # or a dir `asrkit export` wrote
    rec.transcribe("a.wav")                           # -> "YES"
    rec.transcribe(samples, sample_rate=16000)        # a numpy array
    rec.transcribe_many(["a.wav", "b.wav"], speaker=True)   # one speaker's files

It runs the decoder the recipe tuned on its dev set, as ``asrkit transcribe`` does: CTC
(greedy, beam, beam + lexicon + LM, a combination) or hybrid (the frame model through
HCLG; on speaker-adapted input, the GMM system's first pass gives each speaker's fMLLR
transform). Each file (or array) is its own speaker unless ``speaker=True`` says the
files are one speaker's.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from asrkit.errors import DataError

Audio = str | Path | np.ndarray


def _first_channel(path: Path, channels: int) -> None:
    warnings.warn(f"{path}: {channels} channels; transcribing the first", stacklevel=4)


class Recognizer:
    """A trained experiment's decoder (:meth:`load`)."""

    def __init__(self, decoder: Any, path: Path) -> None:
        self.decoder, self.path = decoder, path

    @classmethod
    def load(cls, path: str | Path, *, decode: str = "auto", device: str = "cpu") -> Recognizer:
        """The decoder of the experiment (or export) at ``path``; ``decode`` as
        ``transcribe --decode`` (``auto``: combined, hybrid, beam_lm, beam, whichever
        the recipe tuned first; greedy when none was)."""
        from asrkit.decoding.decoder import load_decoder
        from asrkit.decoding.recognizer import check_exp_dir

        check_exp_dir(path)
        return cls(load_decoder(path, decode, device=device), Path(path))

    @property
    def sample_rate(self) -> int:
        """The rate the model's features are computed at (other rates are resampled)."""
        return int(self.decoder.sample_rate)

    @property
    def kind(self) -> str:
        return str(self.decoder.kind)

    def transcribe(self, audio: Audio, *, sample_rate: int | None = None) -> str:
        """The transcript of one audio file (wav/flac/sphere/.raw, a multi-channel file
        read as its first channel) or one array of samples: int16 values, or floats in
        [-1, 1] as soundfile, librosa and torchaudio give them (``sample_rate`` then
        required)."""
        return self.transcribe_many([audio], sample_rate=sample_rate)[0]

    def transcribe_many(
        self, audios: Sequence[Audio], *, sample_rate: int | None = None, speaker: bool = False
    ) -> list[str]:
        """Transcripts of several files or arrays, in order; ``speaker``: they are one
        speaker's (normalised and adapted together), else each is its own."""
        recordings = [
            (f"{i:08d}", *self._samples(audio, sample_rate), _name(audio, i))
            for i, audio in enumerate(audios)
        ]
        groups = [recordings] if speaker else [[one] for one in recordings]
        texts: dict[str, str] = {}
        for group in groups:
            texts.update(self.decoder.transcripts(self.decoder.prepare_speaker(group)))
        return [texts[utt] for utt, *_ in recordings]

    def _samples(self, audio: Audio, rate: int | None) -> tuple[np.ndarray, int]:
        if isinstance(audio, (str, Path)):
            from asrkit.data.audio import load_audio_file

            return load_audio_file(audio, on_multichannel=_first_channel)
        array = np.asarray(audio)
        if rate is None:
            raise DataError("an array of samples needs its rate: transcribe(samples, sample_rate=16000)")
        if array.ndim != 1:
            raise DataError(
                f"samples of shape {array.shape}: give one channel as a 1-d array (samples[:, 0])"
            )
        if np.issubdtype(array.dtype, np.integer):
            return array.astype(np.float32), int(rate)
        peak = float(np.abs(array).max()) if array.size else 0.0
        if peak > 2.0:
            raise DataError(
                f"float samples up to {peak:.0f}: give floats in [-1, 1] (as soundfile reads them) "
                "or int16 values as an integer array"
            )
        return (array * 32768.0).astype(np.float32), int(rate)


def _name(audio: Audio, i: int) -> str:
    return str(audio) if isinstance(audio, (str, Path)) else f"array {i}"
