"""The decoding graph ``HCLG.fst``, as Kaldi's ``utils/format_lm.sh`` and ``utils/mkgraph.sh``
build it.

- :func:`make_g`: ``G.fst`` from an ARPA LM through k2-fsa's ``kaldilm`` (Kaldi's
  ``arpa2fst --disambig-symbol=#0 --read-symbol-table=words.txt``): ``#0`` on the input side
  of the backoff arcs, ``<s>``/``</s>`` turned into epsilons, n-grams with words outside
  ``words.txt`` skipped (with one warning that counts them) like Kaldi's ``arpa2fst``.
- :func:`make_hclg`: ``mkgraph.sh``'s chain of OpenFst/Kaldi operations:

  1. ``LG = det*(L_disambig ∘ G)`` in the log semiring, minimized (``fstminimizeencoded``);
  2. ``CLG``: the context transducer composed on the left (``fstcomposecontext``), which
     also yields the ``ilabels`` table of context windows;
  3. ``Ha`` from ``ilabels``, the tree and the transition model (``make-h-transducer``),
     without self-loops, with transition-ids for the disambiguation symbols;
  4. ``HCLGa = det*(Ha ∘ CLG)``, the disambiguation transition-ids replaced by epsilon
     (``fstrmsymbols``), epsilons removed, minimized;
  5. ``HCLG = add-self-loops(HCLGa)`` with ``self_loop_scale``, ilabel-sorted.

  Not done: Kaldi's ``fstpushspecial`` on LG (the bindings lack it; it only moves weight
  for the decoder's pruning, the path costs are the same) and its stochasticity checks.
- :func:`make_graph`: both, written as Kaldi's graph dir by :func:`write_graph_dir`
  (``HCLG.fst``, ``words.txt``, ``phones.txt``, ``phones/``, ``disambig_tid.int``,
  ``num_pdfs``); :func:`load_graph_dir` reads one back (also Kaldi's own, whose ``HCLG.fst``
  is a ConstFst).

Input labels of ``HCLG`` are transition-ids (``1..num_transition_ids``), output labels word
ids of ``words.txt``; weights are ``-log`` probabilities: LM, silence and pronunciation
probabilities, transition probabilities scaled as in Kaldi (``transition_scale`` on the
non-self-loop part, ``self_loop_scale`` on self-loops and on the probability of leaving).
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# kaldifst and kaldi_hmm_gmm must load before kaldilm in any process: importing them after
# kaldilm hangs in the extension's initialization, which is why make_g runs kaldilm in a
# child process.
import kaldi_hmm_gmm as khg
import kaldifst
import numpy as np

from asrkit.data.io import atomic_write, new_dir_mode
from asrkit.errors import DataError, UserError
from asrkit.gmm.lang import Lang, read_symbols
from asrkit.gmm.model_io import KaldiModel
from asrkit.gmm.tree import Tree

log = logging.getLogger(__name__)

#: Words of an ARPA LM that ``arpa2fst`` turns into epsilons or the start state.
SENTENCE_MARKS = ("<s>", "</s>")

_FIX_GRAPH = (
    "run the hybrid recipe's stage 5 (gmm_decode) again, or set wfst.graph to a graph dir "
    "with HCLG.fst and words.txt"
)

_ARPA2FST = """
import sys
import kaldilm
arpa, fst, words, max_order = sys.argv[1:]
kaldilm.arpa2fst(input_arpa=arpa, output_fst=fst, disambig_symbol="#0",
                 read_symbol_table=words, max_arpa_warnings=0, max_order=int(max_order))
"""


def fst_size(fst: Any) -> tuple[int, int]:
    """``(states, arcs)`` of an FST (a ``kaldifst`` StdVectorFst or Lattice)."""
    return fst.num_states, sum(fst.num_arcs(s) for s in range(fst.num_states))


def _size_text(fst: Any) -> str:
    states, arcs = fst_size(fst)
    return f"{states} states, {arcs} arcs"


# --- G -------------------------------------------------------------------------------------------


def _scan_arpa(path: Path, words: dict[str, int]) -> tuple[dict[int, int], dict[str, int], int]:
    """Per order the n-gram count of an ARPA file, per word not in ``words`` the n-grams that
    use it, and how many n-grams ``arpa2fst`` will skip for such words.

    Raises:
        DataError: an unreadable file, a malformed n-gram line, an LM using Kaldi's reserved
            symbols as words.
    """
    counts: dict[int, int] = {}
    oov: dict[str, int] = {}
    skipped = 0
    order = 0
    try:
        with path.open(encoding="utf-8") as handle:
            for lineno, raw in enumerate(handle, start=1):
                line = raw.strip()
                if line.startswith("\\"):
                    header = re.fullmatch(r"\\(\d+)-grams:", line)
                    order = int(header.group(1)) if header else 0
                    continue
                if order == 0 or not line:
                    continue
                fields = line.split()
                if len(fields) < order + 1:
                    raise DataError(
                        f"{path}:{lineno}: a {order}-gram needs a log-probability and {order} words, "
                        f"got {line!r}; fix or regenerate the ARPA file"
                    )
                counts[order] = counts.get(order, 0) + 1
                ngram = fields[1 : order + 1]
                reserved = [w for w in ngram if w in ("<eps>", "#0")]
                if reserved:
                    raise DataError(
                        f"{path}:{lineno}: the LM uses '{reserved[0]}' as a word, a symbol Kaldi reserves; "
                        "remove it from the LM's vocabulary"
                    )
                missing = {w for w in ngram if w not in words and w not in SENTENCE_MARKS}
                skipped += bool(missing)
                for word in missing:
                    oov[word] = oov.get(word, 0) + 1
    except OSError as err:
        raise DataError(f"{path}: cannot read the ARPA LM ({err.strerror}); check the path") from None
    except UnicodeDecodeError:
        raise DataError(
            f"{path}: not UTF-8 text; give the LM in ARPA text format (not a binary LM)"
        ) from None
    if not counts:
        raise DataError(f"{path}: no n-grams (no '\\1-grams:' section); give an LM in ARPA format")
    return counts, oov, skipped


def make_g(arpa_path: str | os.PathLike, lang: Lang, *, max_order: int = -1) -> kaldifst.StdVectorFst:
    """``G.fst`` of an ARPA LM over the words of ``lang`` (Kaldi's ``format_lm.sh``).

    N-grams that contain a word not in ``lang``'s ``words.txt`` (an LM's ``<unk>``, or words
    the lexicon lacks) or its unknown word (``oov.txt``) are skipped, as Kaldi's ``arpa2fst``
    skips them, with one warning that counts them and names the most frequent words.

    Args:
        arpa_path: the ARPA file (plain text).
        lang: the lang dir whose ``words.txt`` numbers the words.
        max_order: the highest n-gram order to use; -1 for all.

    Returns:
        G: an acceptor over word ids, ``#0`` on backoff arcs (output epsilon), ilabel-sorted.

    Raises:
        DataError: an unreadable or malformed ARPA file, an LM that uses ``<eps>``/``#0`` as
            words, or an LM that shares no word with the lexicon.
    """
    arpa = Path(arpa_path)
    start = time.perf_counter()
    # The lang's unknown word (oov.txt) is for aligning transcripts; G leaves it out, so a
    # decoder never outputs <unk> through its spoken-noise phone, which has no training data
    # when every training word is in the lexicon (its prior-scaled score would win).
    words = {w: i for w, i in lang.words.items() if w != lang.oov}
    counts, oov, skipped = _scan_arpa(arpa, words)
    if oov:
        top = sorted(oov.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        log.warning(
            "%s: %d n-gram(s) skipped: %d word(s) not in %s (%s%s), as Kaldi's arpa2fst skips them",
            arpa,
            skipped,
            len(oov),
            lang.path / "words.txt",
            ", ".join(f"{w} x{n}" for w, n in top),
            ", ..." if len(oov) > len(top) else "",
        )
    with tempfile.TemporaryDirectory(prefix="asrkit-g-") as tmp:
        out = Path(tmp) / "G.fst"
        table = Path(tmp) / "words.txt"
        table.write_text("".join(f"{w} {i}\n" for w, i in sorted(words.items(), key=lambda kv: kv[1])))
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _ARPA2FST,
                str(arpa),
                str(out),
                str(table),
                str(max_order),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
            raise DataError(
                f"{arpa}: kaldilm's arpa2fst failed ({lines[-1] if lines else f'exit {done.returncode}'}); "
                "check that it is a valid ARPA LM"
            )
        g = kaldifst.StdVectorFst.read(str(out))
    kaldifst.arcsort(g, sort_type="ilabel")
    check_g(g, lang, where=str(arpa))
    log.info(
        "G from %s (%s n-grams): %s in %.1fs",
        arpa,
        "+".join(str(counts[k]) for k in sorted(counts)),
        _size_text(g),
        time.perf_counter() - start,
    )
    return g


def check_g(g: kaldifst.StdVectorFst, lang: Lang, *, where: str = "G") -> None:
    """Check that ``g`` is a G for ``lang``: an acceptor over the words of ``words.txt`` (no
    ``<s>``/``</s>`` left), ``#0`` only on the input of backoff arcs, at least one word arc
    and a final state.

    Raises:
        DataError: naming ``where`` and the first offending arc.
    """
    if g.start < 0 or g.num_states == 0:
        raise DataError(f"{where}: G is empty (no start state); rebuild it from the ARPA LM (make_g)")
    words = set(lang.words.values()) - {lang.words.get(s, -1) for s in SENTENCE_MARKS}
    backoff = lang.words.get("#0", -1)
    names = lang.word_names
    num_word_arcs = 0
    has_final = False
    for state in range(g.num_states):
        if math.isfinite(g.final(state).value):
            has_final = True
        for arc in kaldifst.ArcIterator(g, state):
            label = arc.ilabel
            if label == backoff and arc.olabel == 0:
                continue
            if label != arc.olabel or label not in words or label == backoff:
                shown = f"{names.get(label, label)}:{names.get(arc.olabel, arc.olabel)}"
                raise DataError(
                    f"{where}: G has arc {shown} from state {state}, not a word of "
                    f"{lang.path / 'words.txt'} on both sides; build G with this lang's words.txt (make_g)"
                )
            if label != 0:
                num_word_arcs += 1
    if num_word_arcs == 0:
        raise DataError(
            f"{where}: G has no word arcs: the LM and the lexicon ({lang.path / 'words.txt'}) share "
            "no words; build the LM on the lexicon's words (or add the LM's words to the lexicon)"
        )
    if not has_final:
        raise DataError(f"{where}: G has no final state (no '</s>' probability); rebuild it from the ARPA LM")


# --- HCLG ----------------------------------------------------------------------------------------


def _context_dependency(ctx_dep: Any) -> Any:
    return ctx_dep.context_dependency() if isinstance(ctx_dep, Tree) else ctx_dep


def _transition_model(trans_model: Any) -> khg.TransitionModel:
    return trans_model.transition_model() if isinstance(trans_model, KaldiModel) else trans_model


def _check_model_covers_lang(lang: Lang, trans_model: khg.TransitionModel) -> None:
    missing = sorted(set(lang.real_phones) - set(trans_model.phones))
    if missing:
        names = lang.phone_names
        raise DataError(
            f"{lang.path}: phone(s) {', '.join(names[p] for p in missing[:5])} of phones.txt have no HMM in "
            "the model's topology; build the graph with the lang dir the model was trained with"
        )


def _determinize(fst: kaldifst.StdVectorFst, what: str) -> None:
    if kaldifst.determinize_star(fst, use_log=True):
        raise DataError(f"{what}: determinization stopped early (state limit); the graph is too large")


def _remove_symbols(fst: kaldifst.StdVectorFst, symbols: Iterable[int]) -> int:
    """Kaldi's ``fstrmsymbols``: replace the input labels in ``symbols`` by epsilon, in place.

    Returns:
        The number of arcs relabelled.
    """
    drop = set(symbols)
    changed = 0
    for state in range(fst.num_states):
        arcs = list(kaldifst.ArcIterator(fst, state))
        if not any(arc.ilabel in drop for arc in arcs):
            continue
        fst.delete_arcs(state, len(arcs))
        for arc in arcs:
            if arc.ilabel in drop:
                changed += 1
                arc = kaldifst.StdArc(0, arc.olabel, arc.weight, arc.nextstate)
            fst.add_arc(state, arc)
    return changed


def _build_hclg(
    lang: Lang,
    ctx_dep: Any,
    trans_model: Any,
    g: kaldifst.StdVectorFst,
    *,
    self_loop_scale: float,
    transition_scale: float,
    what: str = "",
) -> tuple[kaldifst.StdVectorFst, list[int]]:
    """:func:`make_hclg`, also returning the disambiguation transition-ids (of ``Ha``);
    ``what`` (e.g. the graph dir) starts each step's log line, so that the graphs of several
    systems, whose LG is the same, are told apart in a log."""
    ctx_dep = _context_dependency(ctx_dep)
    trans_model = _transition_model(trans_model)
    _check_model_covers_lang(lang, trans_model)
    started = time.perf_counter()

    prefix = f"{what}: " if what else ""

    def step(name: str, fst: Any, since: float) -> float:
        now = time.perf_counter()
        log.info("%s%s: %s (%.2fs)", prefix, name, _size_text(fst), now - since)
        return now

    t = started
    lexicon = lang.lexicon_fst(disambig=True)
    kaldifst.arcsort(lexicon, sort_type="olabel")
    grammar = kaldifst.StdVectorFst(g)
    kaldifst.arcsort(grammar, sort_type="ilabel")
    lg = kaldifst.StdVectorFst(kaldifst.compose(lexicon, grammar))
    if lg.num_states == 0:
        raise DataError(
            f"{lang.path}: L_disambig ∘ G is empty: no word sequence of G has a pronunciation in the "
            "lexicon (G built with another words.txt, or G accepts nothing); build G from this lang "
            "(make_g) with an LM over the lexicon's words"
        )
    _determinize(lg, "LG")
    kaldifst.minimize_encoded(lg)
    t = step("LG", lg, t)

    width, central = ctx_dep.context_width, ctx_dep.central_position
    clg, ilabels = kaldifst.compose_context(lang.disambig, width, central, lg)
    kaldifst.arcsort(clg, sort_type="ilabel")
    t = step(f"CLG (N={width}, P={central}, {len(ilabels)} context labels)", clg, t)

    config = khg.HTransducerConfig()
    config.transition_scale = transition_scale
    ha, disambig_tids = khg.get_h_transducer(ilabels, ctx_dep, trans_model, config)
    t = step("Ha", ha, t)

    hclga = kaldifst.StdVectorFst(kaldifst.compose(ha, clg))
    _determinize(hclga, "HCLGa")
    relabelled = _remove_symbols(hclga, disambig_tids)
    kaldifst.rmepsilon(hclga)
    kaldifst.minimize_encoded(hclga)
    t = step(f"HCLGa ({relabelled} disambiguation arcs made epsilon)", hclga, t)

    hclg = khg.add_self_loops(
        self_loop_scale=self_loop_scale, disambig_syms=[], reorder=True, trans_model=trans_model, ifst=hclga
    )
    kaldifst.arcsort(hclg, sort_type="ilabel")
    if hclg.num_states == 0 or hclg.start < 0:
        raise DataError(
            f"{lang.path}: HCLG is empty: no path of the LM survives the lexicon, context and HMMs; "
            "check that G was built from this lang and the model from its topology"
        )
    step("HCLG", hclg, t)
    log.info("%sHCLG built in %.1fs", prefix, time.perf_counter() - started)
    return hclg, list(disambig_tids)


def make_hclg(
    lang: Lang,
    ctx_dep: Any,
    trans_model: Any,
    g: kaldifst.StdVectorFst,
    *,
    self_loop_scale: float = 0.1,
    transition_scale: float = 1.0,
) -> kaldifst.StdVectorFst:
    """The decoding graph ``HCLG`` (Kaldi's ``mkgraph.sh``; the steps are in the module
    docstring).

    Args:
        lang: the lang dir (``L_disambig.fst``, the phone disambiguation symbols).
        ctx_dep: the tree: a ``kaldi_hmm_gmm.ContextDependency`` (e.g. from
            :func:`~asrkit.gmm.tree.read_tree` or ``khg.monophone_context_dependency``) or a
            :class:`~asrkit.gmm.tree.Tree`.
        trans_model: the ``kaldi_hmm_gmm.TransitionModel`` (or a
            :class:`~asrkit.gmm.model_io.KaldiModel`) built with that tree and lang's topology.
        g: the grammar over the words of ``lang`` (:func:`make_g`).
        self_loop_scale: scale of the self-loop log-probabilities (Kaldi's default 0.1;
            1.0 for chain models).
        transition_scale: scale of the other transition log-probabilities.

    Returns:
        HCLG: transition-ids in, word ids out, ilabel-sorted.

    Raises:
        DataError: the model lacks HMMs for some lang phones, or the graph is empty (G and
            L share no word sequence).
    """
    hclg, _ = _build_hclg(
        lang, ctx_dep, trans_model, g, self_loop_scale=self_loop_scale, transition_scale=transition_scale
    )
    return hclg


# --- graph dirs ----------------------------------------------------------------------------------


@dataclass
class GraphDir:
    """A graph dir in memory (Kaldi's ``exp/*/graph``).

    Attributes:
        path: the directory.
        hclg: the decoding graph (transition-ids in, word ids out).
        words: word -> id (``words.txt``).
        phones: phone -> id (``phones.txt``).
        disambig_tids: the transition-ids ``Ha`` gave the disambiguation symbols (removed from
            HCLG; ``disambig_tid.int``).
        num_pdfs: pdfs of the model the graph was built for (``num_pdfs``), -1 if unknown.
    """

    path: Path
    hclg: kaldifst.StdVectorFst
    words: dict[str, int]
    phones: dict[str, int]
    disambig_tids: list[int]
    num_pdfs: int = -1

    @property
    def word_names(self) -> dict[int, str]:
        return {i: w for w, i in self.words.items()}


def write_graph_dir(
    graph_dir: str | os.PathLike,
    lang: Lang,
    hclg: kaldifst.StdVectorFst,
    *,
    disambig_tids: Sequence[int] = (),
    num_pdfs: int = -1,
) -> GraphDir:
    """Write a Kaldi graph dir: ``HCLG.fst`` (OpenFst binary), ``words.txt``, ``phones.txt``,
    ``phones/`` (the lang's), ``disambig_tid.int`` and ``num_pdfs`` (when known).

    The dir is assembled beside ``graph_dir`` and renamed into place, so a reader sees the old
    complete dir or the new one.
    """
    graph_dir = Path(graph_dir)
    graph_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{graph_dir.name}.", dir=graph_dir.parent))
    try:
        tmp.chmod(new_dir_mode())  # mkdtemp's is private (0700); the graph dir is shared
        # OpenFst reports a failed write (a full disk, a file-size limit) only by returning
        # False; a short file must not become the graph.
        if not hclg.write(str(tmp / "HCLG.fst")):
            raise UserError(
                f"{graph_dir / 'HCLG.fst'}: writing the graph failed (a full disk, a size limit "
                "or permissions?); nothing was replaced: free space or raise the limit, then rerun the stage"
            )
        for name in ("words.txt", "phones.txt"):
            shutil.copyfile(lang.path / name, tmp / name)
        if (lang.path / "phones").is_dir():
            shutil.copytree(lang.path / "phones", tmp / "phones")
        atomic_write(tmp / "disambig_tid.int", "".join(f"{t}\n" for t in disambig_tids))
        if num_pdfs >= 0:
            atomic_write(tmp / "num_pdfs", f"{num_pdfs}\n")
        old = graph_dir.with_name(f".{graph_dir.name}.old.{os.getpid()}")
        if graph_dir.exists():
            graph_dir.rename(old)
        tmp.rename(graph_dir)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("wrote %s (HCLG: %s)", graph_dir, _size_text(hclg))
    return GraphDir(graph_dir, hclg, dict(lang.words), dict(lang.phones), list(disambig_tids), num_pdfs)


_FST_MAGIC = 2125659606  # OpenFst's binary header magic number
_HAS_SYMBOLS, _IS_ALIGNED = 0x3, 0x4  # OpenFst header flags


def _read_fst(path: Path) -> kaldifst.StdVectorFst:
    """A binary OpenFst file as a StdVectorFst: a vector FST, or the const FST Kaldi's
    ``mkgraph.sh`` writes (which kaldifst cannot read, so it is parsed here)."""
    if not path.is_file():
        raise DataError(f"{path}: not found; {_FIX_GRAPH}")
    data = path.read_bytes()
    fst_type = ""
    if len(data) >= 8 and struct.unpack_from("<i", data)[0] == _FST_MAGIC:
        size = struct.unpack_from("<I", data, 4)[0]
        fst_type = data[8 : 8 + size].decode("ascii", "replace") if size < 64 else ""
    fst = kaldifst.StdVectorFst.read(str(path)) if fst_type == "vector" else None
    if fst_type == "const":
        try:
            fst = _parse_const_fst(data, path)
        except (struct.error, ValueError):
            fst = None  # truncated
    if fst is None:
        raise DataError(
            f"{path}: not an OpenFst vector or const FST of standard arcs (type {fst_type or 'unknown'!r}); "
            f"{_FIX_GRAPH}"
        )
    return fst


def _parse_const_fst(data: bytes, path: Path) -> kaldifst.StdVectorFst | None:
    """OpenFst's ``ConstFst<StdArc>`` binary layout: header, states (final weight, first arc,
    arc count, epsilon counts), arcs (ilabel, olabel, weight, next state)."""
    pos = 4
    strings = []
    for _ in range(2):  # FST type, arc type
        size = struct.unpack_from("<I", data, pos)[0]
        strings.append(data[pos + 4 : pos + 4 + size].decode("ascii", "replace"))
        pos += 4 + size
    _version, flags, _props, start, num_states, num_arcs = struct.unpack_from("<iiQqqq", data, pos)
    pos += 40
    if strings[1] != "standard" or flags & _HAS_SYMBOLS:
        return None

    def align(offset: int) -> int:
        return offset + (-offset % 16) if flags & _IS_ALIGNED else offset

    pos = align(pos)
    states = np.frombuffer(
        data,
        dtype=[("final", "<f4"), ("first", "<u4"), ("n", "<u4"), ("ie", "<u4"), ("oe", "<u4")],
        count=num_states,
        offset=pos,
    )
    pos = align(pos + states.nbytes)
    arcs = np.frombuffer(
        data, dtype=[("i", "<i4"), ("o", "<i4"), ("w", "<f4"), ("next", "<i4")], count=num_arcs, offset=pos
    )
    fst = kaldifst.StdVectorFst()
    for _ in range(num_states):
        fst.add_state()
    if start >= 0:
        fst.start = int(start)
    for state, (final, first, count, _, _) in enumerate(states.tolist()):
        if math.isfinite(final):
            fst.set_final(state, final)
        for ilabel, olabel, weight, nxt in arcs[first : first + count].tolist():
            fst.add_arc(state, kaldifst.StdArc(ilabel, olabel, weight, nxt))
    log.info("%s: read a const FST (%d states, %d arcs)", path, num_states, num_arcs)
    return fst


def load_graph_dir(path: str | os.PathLike) -> GraphDir:
    """Read a graph dir written by :func:`write_graph_dir` or Kaldi's ``mkgraph.sh``."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path}: no graph dir there; {_FIX_GRAPH}")
    hclg = _read_fst(path / "HCLG.fst")
    words = read_symbols(path / "words.txt")
    phones = read_symbols(path / "phones.txt") if (path / "phones.txt").exists() else {}
    tids: list[int] = []
    if (path / "disambig_tid.int").exists():
        text = (path / "disambig_tid.int").read_text()
        try:
            tids = [int(x) for x in text.split()]
        except ValueError:
            raise DataError(f"{path / 'disambig_tid.int'}: expected integers; {_FIX_GRAPH}") from None
    num_pdfs = -1
    if (path / "num_pdfs").exists():
        text = (path / "num_pdfs").read_text().strip()
        if not text.isdigit():
            raise DataError(f"{path / 'num_pdfs'}: expected an integer, got {text!r}; {_FIX_GRAPH}")
        num_pdfs = int(text)
    return GraphDir(path, hclg, words, phones, tids, num_pdfs)


def make_graph(
    lang: Lang,
    ctx_dep: Any,
    trans_model: Any,
    lm: str | os.PathLike | kaldifst.StdVectorFst,
    graph_dir: str | os.PathLike,
    *,
    self_loop_scale: float = 0.1,
    transition_scale: float = 1.0,
) -> GraphDir:
    """Kaldi's ``mkgraph.sh``: G (from an ARPA path, or given), HCLG, and the graph dir.

    Args:
        lang / ctx_dep / trans_model / self_loop_scale / transition_scale: as :func:`make_hclg`.
        lm: an ARPA file (see :func:`make_g`) or a ready G.
        graph_dir: where the graph dir goes (replaced as a whole).
    """
    g = lm if isinstance(lm, kaldifst.StdVectorFst) else make_g(lm, lang)
    trans_model = _transition_model(trans_model)
    hclg, tids = _build_hclg(
        lang,
        ctx_dep,
        trans_model,
        g,
        self_loop_scale=self_loop_scale,
        transition_scale=transition_scale,
        what=str(graph_dir),
    )
    return write_graph_dir(graph_dir, lang, hclg, disambig_tids=tids, num_pdfs=trans_model.num_pdfs)
