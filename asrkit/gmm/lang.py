"""The "lang" dir of a hybrid system, as Kaldi's ``utils/prepare_lang.sh`` writes it.

From a pronunciation lexicon it writes, into one directory:

- ``phones.txt``: ``<eps>`` 0, the silence phone, the other phones, then the
  disambiguation symbols ``#0``, ``#1``, ... (``phones/disambig.int`` lists their ids);
- ``words.txt``: ``<eps>`` 0, the words, then ``#0``, ``<s>``, ``</s>`` (Kaldi's order);
- ``topo``: Kaldi's text HMM topology (3 left-to-right states per phone, 5 for silence
  with the extra arcs of Kaldi's silence model);
- ``L.fst`` (for training graphs) and ``L_disambig.fst`` (for HCLG): the lexicon as an
  OpenFst transducer (phones in, words out) with optional silence between words, written
  in OpenFst's binary format so Kaldi's and OpenFst's tools read it;
- ``lexicon.txt``, ``lexiconp.txt``, ``lexiconp_disambig.txt``, ``phones/silence.csl``,
  ``phones/nonsilence.csl``, ``oov.txt``, ``phones/roots.txt`` and
  ``phones/extra_questions.txt`` (the tree builder's inputs).

A lexicon may carry pronunciation probabilities (:mod:`asrkit.gmm.pronprobs`, Kaldi's
``lexiconp.txt``): each pronunciation's ``-log p`` is then a cost on its first arc in L.

Phones are not word-position dependent (Kaldi's ``--position-dependent-phones false``):
AN4-sized corpora have too little data to split each phone four ways.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import kaldifst

from asrkit.data.io import atomic_write, note_read
from asrkit.errors import DataError

EPS = "<eps>"
#: Kaldi's reserved word symbols; a lexicon may not use them as words.
RESERVED_WORDS = (EPS, "#0", "<s>", "</s>")
#: The word transcripts' unknown words become (``oov.txt``), and its phone (Kaldi's ``SPN``).
UNK_WORD = "<unk>"
UNK_PHONE = "SPN"


def _topology_entry(phones: Sequence[int], num_states: int, *, silence: bool) -> str:
    """One ``<TopologyEntry>`` of Kaldi's text topology for ``phones``."""
    lines = ["<TopologyEntry>", "<ForPhones>", " ".join(map(str, phones)), "</ForPhones>"]
    final = num_states
    if not silence or num_states < 3:
        # Left to right: stay (0.75) or move on (0.25).
        for state in range(num_states):
            lines.append(
                f"<State> {state} <PdfClass> {state} <Transition> {state} 0.75 "
                f"<Transition> {state + 1} 0.25 </State>"
            )
    else:
        # Kaldi's silence model: the first state may jump to any of the middle ones, the
        # middle ones connect to each other and to the last, which leaves to the final state.
        last = num_states - 1
        middle = range(1, last)
        prob = 1.0 / (len(middle) + 1)
        first = " ".join(f"<Transition> {s} {prob:g}" for s in range(0, last))
        lines.append(f"<State> 0 <PdfClass> 0 {first} </State>")
        for state in middle:
            arcs = " ".join(f"<Transition> {s} {prob:g}" for s in range(1, last + 1))
            lines.append(f"<State> {state} <PdfClass> {state} {arcs} </State>")
        lines.append(
            f"<State> {last} <PdfClass> {last} <Transition> {last} 0.75 <Transition> {final} 0.25 </State>"
        )
    lines.append(f"<State> {final} </State>")
    lines.append("</TopologyEntry>")
    return "\n".join(lines)


def topology_text(
    silence: Sequence[int], nonsilence: Sequence[int], *, num_sil_states: int = 5, num_nonsil_states: int = 3
) -> str:
    """Kaldi's text topology (the ``topo`` file) for the given phone ids."""
    return "\n".join(
        [
            "<Topology>",
            _topology_entry(sorted(nonsilence), num_nonsil_states, silence=False),
            _topology_entry(sorted(silence), num_sil_states, silence=True),
            "</Topology>",
            "",
        ]
    )


@dataclass
class Lang:
    """A lang dir in memory (see the module docstring).

    Attributes:
        path: the directory.
        phones / words: symbol -> id (``phones.txt`` / ``words.txt``).
        silence: ids of the silence phones (the first is the optional inter-word silence).
        disambig: ids of the phone disambiguation symbols ``#0``, ``#1``, ...
        oov: the word transcripts' unknown words map to (``oov.txt``), ``""`` for none.
    """

    path: Path
    phones: dict[str, int]
    words: dict[str, int]
    silence: list[int]
    disambig: list[int]
    oov: str = ""

    @property
    def real_phones(self) -> list[int]:
        """Phone ids without ``<eps>`` and the disambiguation symbols."""
        skip = set(self.disambig) | {0}
        return sorted(i for i in self.phones.values() if i not in skip)

    @property
    def nonsilence(self) -> list[int]:
        return [p for p in self.real_phones if p not in self.silence]

    @property
    def phone_names(self) -> dict[int, str]:
        return {i: p for p, i in self.phones.items()}

    @property
    def word_names(self) -> dict[int, str]:
        return {i: w for w, i in self.words.items()}

    def topology(self):  # -> kaldi_hmm_gmm.HmmTopology
        import kaldi_hmm_gmm as khg

        topo = khg.HmmTopology()
        topo.read((self.path / "topo").read_text())
        return topo

    def lexicon_fst(self, *, disambig: bool = False) -> kaldifst.StdVectorFst:
        path = self.path / ("L_disambig.fst" if disambig else "L.fst")
        note_read(path)  # read by OpenFst's C++
        return kaldifst.StdVectorFst.read(str(path))

    def word_ids(
        self, transcript: str, *, utt: str = "?", where: str = "text", unknown_ok: bool = True
    ) -> list[int]:
        """A transcript's words as ids; unknown words become the OOV word (with
        ``unknown_ok`` and a lang that has one), or an error naming the word."""
        ids = []
        for word in transcript.split():
            if word not in self.words:
                if not (self.oov and unknown_ok):
                    raise DataError(
                        f"{where}: utterance {utt}: word '{word}' is not in the lexicon "
                        f"({self.path / 'words.txt'}); add its pronunciation to the lexicon"
                    )
                word = self.oov
            ids.append(self.words[word])
        return ids


def read_symbols(path: str | Path) -> dict[str, int]:
    """A Kaldi/OpenFst symbol table (``symbol id`` per line)."""
    table: dict[str, int] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise DataError(
            f"{path}: cannot read the symbol table ({err.strerror}); rerun the lang stage"
        ) from None
    for lineno, line in enumerate(lines, start=1):
        fields = line.split()
        if len(fields) != 2 or not fields[1].isdigit():
            raise DataError(f"{path}:{lineno}: expected 'symbol id', got {line!r}; rerun the lang stage")
        table[fields[0]] = int(fields[1])
    return table


def _write_symbols(path: Path, table: Mapping[str, int]) -> None:
    atomic_write(path, "".join(f"{s} {i}\n" for s, i in sorted(table.items(), key=lambda kv: kv[1])))


def load_lang(path: str | Path) -> Lang:
    """Read a lang dir written by :func:`prepare_lang` (or Kaldi's ``prepare_lang.sh`` with
    position-independent phones)."""
    path = Path(path)
    phones = read_symbols(path / "phones.txt")
    words = read_symbols(path / "words.txt")

    def ints(name: str) -> list[int]:
        try:
            text = (path / "phones" / name).read_text()
        except OSError:
            raise DataError(f"{path / 'phones' / name}: not found; rerun the lang stage") from None
        return [int(x) for x in text.replace(":", " ").split()]

    oov_file = path / "oov.txt"
    oov = oov_file.read_text().strip() if oov_file.exists() else ""
    return Lang(path, phones, words, ints("silence.csl"), ints("disambig.int"), oov)


def _disambiguated(prons: list[tuple[str, tuple[str, ...]]]) -> list[tuple[str, tuple[str, ...], int]]:
    """Kaldi's ``add_lex_disambig``: a pronunciation that equals another, or is a proper
    prefix of one, gets a disambiguation symbol ``#k`` (k >= 1) so L can be determinized.

    Returns ``(word, phones, k)`` per pronunciation, ``k = 0`` for none.
    """
    count: dict[tuple[str, ...], int] = {}
    prefixes: set[tuple[str, ...]] = set()
    for _, phones in prons:
        count[phones] = count.get(phones, 0) + 1
        for n in range(1, len(phones)):
            prefixes.add(phones[:n])
    used: dict[tuple[str, ...], int] = {}
    out = []
    for word, phones in prons:
        if count[phones] > 1 or phones in prefixes:
            used[phones] = used.get(phones, 0) + 1
            out.append((word, phones, used[phones]))
        else:
            out.append((word, phones, 0))
    return out


def _pron_cost(prob: float) -> float:
    """A pronunciation's cost in L: ``-log p``, and exactly 0.0 (not -0.0) at 1."""
    return -math.log(prob) if prob < 1.0 else 0.0


def _lexicon_fst(
    entries: list[tuple[int, list[int], float]],
    *,
    silence: int,
    sil_prob: float,
    disambig_loop: tuple[int, int] | None = None,
) -> kaldifst.StdVectorFst:
    """L as Kaldi's ``make_lexicon_fst`` shapes it: a loop state where words start and end,
    and a silence state reached with probability ``sil_prob`` after any word (and at the
    start); ``entries`` are ``(word id, phone ids, pronunciation cost)``, the word and the
    cost (``-log p``) on the first arc."""
    fst = kaldifst.StdVectorFst()
    start, loop, sil = fst.add_state(), fst.add_state(), fst.add_state()
    fst.start = start
    no_sil_cost = -math.log(1.0 - sil_prob)
    sil_cost = -math.log(sil_prob)
    fst.add_arc(start, kaldifst.StdArc(0, 0, no_sil_cost, loop))
    fst.add_arc(start, kaldifst.StdArc(0, 0, sil_cost, sil))
    fst.add_arc(sil, kaldifst.StdArc(silence, 0, 0.0, loop))
    for word, phones, cost in entries:
        state = loop
        for k, phone in enumerate(phones[:-1]):
            nxt = fst.add_state()
            fst.add_arc(state, kaldifst.StdArc(phone, 0 if k else word, 0.0 if k else cost, nxt))
            state = nxt
        label, first = (word, cost) if len(phones) == 1 else (0, 0.0)
        fst.add_arc(state, kaldifst.StdArc(phones[-1], label, first + no_sil_cost, loop))
        fst.add_arc(state, kaldifst.StdArc(phones[-1], label, first + sil_cost, sil))
    fst.set_final(loop, 0.0)
    if disambig_loop is not None:
        # #0 passes through L where G backs off (Kaldi's fstaddselfloops).
        phone_id, word_id = disambig_loop
        fst.add_arc(loop, kaldifst.StdArc(phone_id, word_id, 0.0, loop))
    kaldifst.arcsort(fst, sort_type="olabel")
    return fst


def prepare_lang(
    lexicon: Mapping[str, Sequence[Sequence[str]]],
    out_dir: str | Path,
    *,
    silence_phone: str = "SIL",
    sil_prob: float = 0.5,
    oov_word: str = "",
    num_sil_states: int = 5,
    num_nonsil_states: int = 3,
    pron_probs: Mapping[tuple[str, tuple[str, ...]], float] | None = None,
) -> Lang:
    """Write a lang dir for ``lexicon`` (word -> pronunciations) into ``out_dir``.

    Args:
        lexicon: word -> list of phone sequences (e.g. from
            :func:`asrkit.targets.phones.read_pronunciations`). The silence phone need not
            appear in it; a word pronounced as silence alone (``<sil>``) is allowed.
        out_dir: the lang dir (replaced as a whole: written beside it, then renamed).
        silence_phone: the optional inter-word silence; the only silence phone.
        sil_prob: probability of silence after a word (Kaldi's default 0.5).
        oov_word: a lexicon word that stands for words not in the lexicon (Kaldi's
            ``<unk>``), or ``""``: then an unknown transcript word is an error.
        num_sil_states / num_nonsil_states: HMM states per silence / other phone.
        pron_probs: ``(word, phones) -> p`` in (0, 1] (Kaldi's max-normalised pronunciation
            probabilities: a word's likeliest pronunciation has 1); a pronunciation it
            lacks has 1. None: every pronunciation 1, as a lexicon without them.

    Raises:
        DataError: an empty lexicon, a reserved word, a word without phones, a bad
            ``oov_word`` or a pronunciation probability outside (0, 1].
    """
    out_dir = Path(out_dir)
    if not 0.0 < sil_prob < 1.0:
        raise DataError(f"sil_prob={sil_prob}: must be strictly between 0 and 1")
    entries: list[tuple[str, tuple[str, ...]]] = []
    for word in sorted(lexicon):
        if word in RESERVED_WORDS or word.startswith("#"):
            raise DataError(f"lexicon: '{word}' is reserved by Kaldi's lang format; rename the word")
        for pron in lexicon[word]:
            seq = tuple(pron)
            if not seq:
                raise DataError(f"lexicon: word '{word}' has an empty pronunciation; give its phones")
            entries.append((word, seq))
    if not entries:
        raise DataError("lexicon: no words; a lang dir needs a pronunciation lexicon")
    probs = {entry: float((pron_probs or {}).get(entry, 1.0)) for entry in entries}
    bad_probs = [(word, pron, v) for (word, pron), v in probs.items() if not 0.0 < v <= 1.0]
    if bad_probs:
        bad_word, bad_pron, bad_value = bad_probs[0]
        raise DataError(
            f"lexicon: pronunciation probability {bad_value} of '{bad_word}' ({' '.join(bad_pron)}): "
            "must be in (0, 1] (max-normalised, as Kaldi's lexiconp.txt)"
        )
    if oov_word and oov_word not in lexicon:
        raise DataError(f"oov word '{oov_word}' is not in the lexicon; add it with a pronunciation")
    others = sorted({p for _, pron in entries for p in pron} - {silence_phone})
    bad = [p for p in others if p.startswith("#") or p == EPS]
    if bad:
        raise DataError(f"lexicon: phone '{bad[0]}' is reserved (disambiguation/epsilon); rename it")
    disambiguated = _disambiguated(entries)
    num_disambig = max(k for _, _, k in disambiguated) + 1  # #0 is G's backoff symbol
    ids = {EPS: 0, silence_phone: 1}
    for p in others:
        ids[p] = len(ids)
    disambig_ids = []
    for k in range(num_disambig):
        ids[f"#{k}"] = len(ids)
        disambig_ids.append(ids[f"#{k}"])
    words = {EPS: 0}
    for word in sorted(lexicon):
        words[word] = len(words)
    for symbol in ("#0", "<s>", "</s>"):
        words[symbol] = len(words)

    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "phones").mkdir(parents=True)
    _write_symbols(tmp / "phones.txt", ids)
    _write_symbols(tmp / "words.txt", words)
    atomic_write(
        tmp / "topo",
        topology_text(
            [1],
            [ids[p] for p in others],
            num_sil_states=num_sil_states,
            num_nonsil_states=num_nonsil_states,
        ),
    )
    atomic_write(tmp / "lexicon.txt", "".join(f"{w} {' '.join(p)}\n" for w, p in entries))
    atomic_write(tmp / "lexiconp.txt", "".join(f"{w} {probs[w, p]:g} {' '.join(p)}\n" for w, p in entries))
    atomic_write(
        tmp / "lexiconp_disambig.txt",
        "".join(f"{w} {probs[w, p]:g} {' '.join(p)}{f' #{k}' if k else ''}\n" for w, p, k in disambiguated),
    )
    atomic_write(tmp / "oov.txt", f"{oov_word}\n" if oov_word else "")
    atomic_write(tmp / "phones" / "silence.csl", "1\n")
    atomic_write(tmp / "phones" / "nonsilence.csl", ":".join(str(ids[p]) for p in others) + "\n")
    atomic_write(tmp / "phones" / "disambig.int", "".join(f"{i}\n" for i in disambig_ids))
    # Tree inputs: every phone its own root (all HMM states share it, so the tree may ask
    # about the state), silence never split by context (Kaldi: "shared not-split").
    roots = [f"shared not-split {ids[silence_phone]}"] + [f"shared split {ids[p]}" for p in others]
    atomic_write(tmp / "phones" / "roots.txt", "".join(f"{r}\n" for r in roots))
    atomic_write(
        tmp / "phones" / "extra_questions.txt",
        f"{ids[silence_phone]}\n{' '.join(str(ids[p]) for p in others)}\n",
    )

    plain = [(words[w], [ids[p] for p in pron], _pron_cost(probs[w, pron])) for w, pron in entries]
    _lexicon_fst(plain, silence=1, sil_prob=sil_prob).write(str(tmp / "L.fst"))
    marked = [
        (words[w], [ids[p] for p in pron] + ([ids[f"#{k}"]] if k else []), _pron_cost(probs[w, pron]))
        for w, pron, k in disambiguated
    ]
    _lexicon_fst(marked, silence=1, sil_prob=sil_prob, disambig_loop=(ids["#0"], words["#0"])).write(
        str(tmp / "L_disambig.fst")
    )
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return load_lang(out_dir)
