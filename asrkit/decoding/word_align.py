"""Word times of a hypothesis through an HMM system, for CTM output (what Kaldi's
``steps/get_ctm.sh`` gets from ``lattice-align-words-lexicon``).

The hypothesis's training graph (its words through the lexicon with optional silence,
the tree's context, the HMMs: :class:`~asrkit.gmm.train.GraphCompiler`) is Viterbi-aligned
to the decoder's own acoustic scores (``gmm-align-compiled`` / ``align-compiled-mapped``).
The alignment's transition-ids give a phone per frame and where each phone starts (the
first frame in its HMM's first state); the phones are then split into the words'
pronunciations in order, the silence between words left out. A word's time is its first
phone's first frame, its duration the frames up to its last phone's end.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from asrkit.errors import DataError

if TYPE_CHECKING:
    import kaldi_hmm_gmm as khg

    from asrkit.gmm.lang import Lang

log = logging.getLogger(__name__)

__all__ = ["WordAligner", "read_pronunciations", "spell_words", "split_words"]

#: ``(word, start s, duration s)`` per word, as :meth:`~asrkit.decoding.decoder.Decoder.word_times`.
WordTimes = list[tuple[str, float, float]]


def read_pronunciations(path: str | Path) -> dict[str, list[tuple[str, ...]]]:
    """A lexicon (``word phone ...`` per line, Kaldi's ``lexicon.txt``) as word -> its
    pronunciations, in file order."""
    prons: dict[str, list[tuple[str, ...]]] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise DataError(f"{path}: cannot read the lexicon ({err.strerror}); rerun the lang stage") from None
    for lineno, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 2:
            raise DataError(f"{path}:{lineno}: word {fields[0]!r} has no phones; rerun the lang stage")
        prons.setdefault(fields[0], []).append(tuple(fields[1:]))
    return prons


def split_words(
    words: Sequence[str],
    phones: Sequence[tuple[str, int, int]],
    prons: dict[str, list[tuple[str, ...]]],
    *,
    silence: frozenset[str],
    oov: str = "",
) -> list[tuple[str, int, int]] | None:
    """``phones`` (``(name, first frame, last frame)`` in time order) split into ``words``:
    ``(word, first frame, last frame)`` each, or None if they do not spell the words.

    Each word takes the first of its pronunciations (longest first) that the next phones
    spell; a silence phone that does not start one is left out as the silence between
    words. A word the lexicon lacks is spelled as ``oov`` (as the graph aligned it)."""
    spelled = spell_words(words, phones, prons, silence=silence, oov=oov)
    return None if spelled is None else [(word, first, last) for word, _, first, last in spelled]


def spell_words(
    words: Sequence[str],
    phones: Sequence[tuple[str, int, int]],
    prons: dict[str, list[tuple[str, ...]]],
    *,
    silence: frozenset[str],
    oov: str = "",
) -> list[tuple[str, tuple[str, ...], int, int]] | None:
    """As :func:`split_words`, with the pronunciation each word took: ``(word, phones,
    first frame, last frame)`` each (what Kaldi's ``ali-to-prons`` gives), or None."""
    out: list[tuple[str, tuple[str, ...], int, int]] = []
    i = 0
    for word in words:
        candidates = sorted(prons.get(word) or prons.get(oov) or [], key=len, reverse=True)
        while True:
            names = tuple(p[0] for p in phones[i : i + max((len(c) for c in candidates), default=0)])
            pron = next((c for c in candidates if names[: len(c)] == c), None)
            if pron is not None:
                out.append((word, pron, phones[i][1], phones[i + len(pron) - 1][2]))
                i += len(pron)
                break
            if i < len(phones) and phones[i][0] in silence:
                i += 1
                continue
            return None
    if any(p[0] not in silence for p in phones[i:]):
        return None
    return out


class WordAligner:
    """Aligns hypotheses to acoustic scores through ``lang``, ``ctx_dep`` and
    ``trans_model`` (those of the graph that decoded them).

    Args:
        acoustic_scale: the decoder's (scores are multiplied by it, as in decoding).
        frame_shift: seconds per frame of the scores.
        beam / retry_beam: the alignment's beams (Kaldi's ``align_si.sh``: 10, 40).
        transition_scale / self_loop_scale: how the HMMs' transition probabilities count
            (Kaldi's alignment defaults: 1.0 and 0.1).
    """

    def __init__(
        self,
        lang: Lang,
        ctx_dep: khg.ContextDependency,
        trans_model: khg.TransitionModel,
        *,
        acoustic_scale: float,
        frame_shift: float = 0.01,
        beam: float = 10.0,
        retry_beam: float = 40.0,
        transition_scale: float = 1.0,
        self_loop_scale: float = 0.1,
    ) -> None:
        from asrkit.gmm.model_io import transition_id_to_pdf, transition_id_to_phone
        from asrkit.gmm.train import GraphCompiler

        # The compiler holds C++ references to the tree and the transitions: keep them alive.
        self.lang, self.ctx_dep, self.trans_model = lang, ctx_dep, trans_model
        self.compiler = GraphCompiler.from_parts(lang, ctx_dep, trans_model)
        self.acoustic_scale, self.frame_shift = acoustic_scale, frame_shift
        self.beam, self.retry_beam = beam, retry_beam
        self.transition_scale, self.self_loop_scale = transition_scale, self_loop_scale
        self.tid2pdf = transition_id_to_pdf(trans_model)
        self.tid2phone = transition_id_to_phone(trans_model)
        # Where a phone starts: the first frame in its first HMM state, a transition out of
        # that state, not its self-loop (with reordered transitions, as these graphs have,
        # a state's first frame takes its forward transition and the self-loops follow;
        # so the transition into the HMM's final state is not the phone's last frame).
        states = trans_model.id2state
        tuples = trans_model.tuples
        self.starts_phone = np.array(
            [False]
            + [
                tuples[states[t] - 1].__getstate__()[1] == 0 and not trans_model.is_self_loop(t)
                for t in range(1, trans_model.num_transition_ids + 1)
            ]
        )
        names = lang.phone_names
        self.phone_name = {i: names[i] for i in names}
        self.silence = frozenset(names[i] for i in lang.silence)
        self.prons = read_pronunciations(lang.path / "lexicon.txt")

    @classmethod
    def from_dirs(cls, lang_dir: str | Path, system_dir: str | Path, **kwargs: float) -> WordAligner:
        """The lang dir and a system (or alignment) dir's ``final.mdl`` and ``tree``."""
        from asrkit.gmm.lang import load_lang
        from asrkit.gmm.model_io import read_model
        from asrkit.gmm.tree import read_tree

        system_dir = Path(system_dir)
        for name in ("final.mdl", "tree"):
            if not (system_dir / name).is_file():
                raise DataError(
                    f"{system_dir / name}: not found; word times need the system's model and tree"
                )
        trans = read_model(system_dir / "final.mdl", with_gmm=False).transition_model()
        return cls(load_lang(lang_dir), read_tree(system_dir / "tree"), trans, **kwargs)

    def word_times(self, loglikes: np.ndarray, text: str, *, utt: str = "?") -> WordTimes | None:
        """``(word, start s, duration s)`` of ``text``'s words in the scores ``loglikes``
        ``(T, pdfs)``, or None when the words cannot be aligned to them (too few frames)."""
        import kaldi_hmm_gmm as khg

        from asrkit.gmm.train import align_compiled

        words = text.split()
        if not words:
            return []
        graph = self.compiler.compile({utt: text}, where="word times", unknown_ok=True, quiet=True)[utt]
        scores = np.ascontiguousarray(
            (self.acoustic_scale * np.asarray(loglikes, np.float32))[:, self.tid2pdf[1:]]
        )
        done, _, _, _, ali = align_compiled(
            graph,
            self.trans_model,
            khg.DecodableCtc(scores),
            utt=utt,
            beam=self.beam,
            retry_beam=self.retry_beam,
            acoustic_scale=self.acoustic_scale,
            transition_scale=self.transition_scale,
            self_loop_scale=self.self_loop_scale,
        )
        if not done or len(ali) != len(scores):
            return None
        spans = split_words(
            words, self.phone_spans(np.asarray(ali)), self.prons, silence=self.silence, oov=self.lang.oov
        )
        if spans is None:
            log.warning(
                "utterance %s: its alignment does not spell %r through the lexicon; no word times", utt, text
            )
            return None
        step = self.frame_shift
        return [
            (word, round(first * step, 2), round((last - first + 1) * step, 2)) for word, first, last in spans
        ]

    def phone_spans(self, alignment: np.ndarray) -> list[tuple[str, int, int]]:
        """``(phone, first frame, last frame)`` of each phone of a transition-id alignment."""
        starts = np.flatnonzero(self.starts_phone[alignment]).tolist()
        if not starts or starts[0] != 0:
            starts = [0, *starts]
        ends = [*starts[1:], len(alignment)]
        return [
            (self.phone_name[int(self.tid2phone[alignment[first]])], first, end - 1)
            for first, end in zip(starts, ends, strict=True)
        ]
