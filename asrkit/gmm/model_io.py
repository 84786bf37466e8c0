"""Kaldi's ``final.mdl`` in Kaldi's binary format, and transition-ids mapped to pdf-ids and phones.

A Kaldi model file is a ``TransitionModel`` followed by the acoustic model: an ``AmDiagGmm`` for
GMM systems (``mono``, ``tri1``, ...), a network (``<Nnet3> ...``) for hybrid nets. k2-fsa's
``kaldi_hmm_gmm`` binds Kaldi's classes but not their file I/O, so the bytes are written and
read here, in the layout of Kaldi's ``Write(os, binary=true)`` methods:

basic types (Kaldi's ``io-funcs``)
    a token is its text and one space (``<Topology> ``); an int32 is the size byte ``\\4`` and
    four little-endian bytes; a float is ``\\4`` and a float32 (``\\8`` and a float64 are read
    too); an integer vector (``WriteIntegerVector``) is ``\\4``, the int32 count and the raw
    int32s — no size byte per element, unlike the int-vector table entries of alignments.
    A ``Vector<float>`` is ``FV``, the ``\\4``-prefixed int32 size and the raw float32s; a
    ``Matrix<float>`` is ``FM``, rows, columns and the float32s row by row.

``HmmTopology``
    ``<Topology>``, the phones, each phone's entry index (-1 for none) — both integer
    vectors —, an int32 -1 only when some state's self-loop pdf class differs from its forward
    pdf class, the number of entries, and per entry its number of states; per state the
    forward pdf class [, the self-loop pdf class], the number of transitions and each
    transition's destination state (int32) and probability (float); ``</Topology>``.

``TransitionModel``
    ``<TransitionModel>``, the topology, ``<Triples>`` (``<Tuples>`` with self-loop pdf
    classes), the number of transition-states and each one's phone, HMM state and forward pdf
    [, self-loop pdf] as int32s, ``</Triples>``, ``<LogProbs>``, an ``FV`` of
    ``num_transition_ids + 1`` log probabilities (entry 0 unused), ``</LogProbs>``,
    ``</TransitionModel>``.

``AmDiagGmm``
    ``<DIMENSION>`` int32, ``<NUMPDFS>`` int32, then per pdf ``<DiagGMM>``, ``<GCONSTS>`` FV,
    ``<WEIGHTS>`` FV, ``<MEANS_INVVARS>`` FM, ``<INV_VARS>`` FM, ``</DiagGMM>``. Kaldi recomputes
    the gconsts when it reads a GMM, and so does :func:`read_model`.

The basic types are written and read by :mod:`asrkit.data.kaldi_binary`.

The file starts with ``\\0B``. Text-mode models (``gmm-copy --binary=false``) are read too.

Transition-ids are Kaldi's numbering: each transition-state (one tuple) owns one id per
transition out of its HMM state, numbered from 1 in tuple order; an id whose transition returns
to its own state is a self-loop and emits the tuple's self-loop pdf, any other the forward pdf.

Public API:
    - :func:`write_model`, :func:`read_model`, :class:`KaldiModel` — ``final.mdl`` as a file.
    - :func:`write_transition_model`, :func:`write_topology`, :func:`write_am_diag_gmm` and the
      basic writers :func:`write_token`, :func:`write_int32`, :func:`write_float32`,
      :func:`write_int32_vector`, :func:`write_float_vector`, :func:`write_float_matrix` (those of
      :mod:`asrkit.data.kaldi_binary`, re-exported).
    - :func:`transition_id_to_pdf`, :func:`transition_id_to_phone` — lookup tables indexed by
      transition-id.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import _kaldi_hmm_gmm  # TransitionModelTuple is not re-exported by kaldi_hmm_gmm
import kaldi_hmm_gmm as khg
import numpy as np

from asrkit.data.io import atomic_writer
from asrkit.data.kaldi_binary import (
    BINARY_MARKER,
    BinaryReader,
    pack_int32s,
    write_float32,
    write_float_matrix,
    write_float_vector,
    write_int32,
    write_int32_vector,
    write_token,
)
from asrkit.errors import DataError

_FIX = (
    "the file is damaged or not a Kaldi model; copy it again from the experiment dir that "
    "trained it (or re-run that training step)"
)


# --- the model ---------------------------------------------------------------------------------


@dataclass
class KaldiModel:
    """A Kaldi model file as read by :func:`read_model`.

    Attributes:
        topology: the HMM topology (its Kaldi text form is :attr:`topology_text`).
        tuples: ``(num_transition_states, 4)`` int32: phone, HMM state, forward pdf and
            self-loop pdf of each transition-state, in the file's (transition-id) order.
        log_probs: ``(num_transition_ids + 1,)`` float32 transition log probabilities; entry 0
            is unused.
        am_gmm: the GMMs, one per pdf; None when the file holds no GMM after the transition
            model (a neural net's model, or :func:`read_model` was asked to skip them).
        path: the file it was read from (for messages).
        followed_by: the first token after the transition model when it is not a GMM
            (``<Nnet3>`` for an nnet3 model); empty at the end of the file.
    """

    topology: khg.HmmTopology
    tuples: np.ndarray
    log_probs: np.ndarray
    am_gmm: khg.AmDiagGmm | None = None
    path: str = ""
    followed_by: str = ""

    @property
    def num_pdfs(self) -> int:
        """Pdfs the transition model refers to (Kaldi's ``NumPdfs``)."""
        return int(self.tuples[:, 2:].max()) + 1 if len(self.tuples) else 0

    @property
    def num_transition_ids(self) -> int:
        return len(self.log_probs) - 1

    @property
    def phones(self) -> list[int]:
        """The phones the topology covers, ascending."""
        return list(self.topology.phones)

    @property
    def topology_text(self) -> str:
        """The topology in Kaldi's text form (as in a lang dir's ``topo``)."""
        return str(self.topology)

    def transition_model(self) -> khg.TransitionModel:
        """The bindings' TransitionModel of these tuples, topology and log probabilities."""
        table = _transitions(self.tuples, self.topology, where=self.path or "the model")
        loops = np.flatnonzero(table.loop_id)
        non_self_loop = np.zeros(len(self.tuples) + 1, dtype=np.float32)
        # As Kaldi's ComputeDerivedOfProbs: log(1 - self-loop prob), floored at 1e-10.
        stay = np.exp(self.log_probs[table.loop_id[loops]].astype(np.float32))
        non_self_loop[loops + 1] = np.log(np.maximum(np.float32(1.0) - stay, np.float32(1e-10)))
        pdfs = _pdf_table(self.tuples, table)
        state = (
            [_kaldi_hmm_gmm.TransitionModelTuple(*row) for row in self.tuples.tolist()],
            self.topology,
            table.state2id.tolist(),
            table.state.tolist(),
            pdfs.tolist(),
            self.num_pdfs,
            self.log_probs.astype(np.float32).tolist(),
            non_self_loop.tolist(),
        )
        trans_model = khg.TransitionModel.__new__(khg.TransitionModel)
        trans_model.__setstate__(state)
        return trans_model


def transition_id_to_pdf(model: KaldiModel | khg.TransitionModel) -> np.ndarray:
    """The pdf of every transition-id, as Kaldi's ``TransitionIdToPdfArray``.

    Returns:
        ``(num_transition_ids + 1,)`` int32; entry 0 (no transition-id) is 0.
    """
    tuples, topology, where = _tuples_and_topology(model)
    return _pdf_table(tuples, _transitions(tuples, topology, where=where))


def transition_id_to_phone(model: KaldiModel | khg.TransitionModel) -> np.ndarray:
    """The phone of every transition-id (what ``ali-to-phones --per-frame`` reports).

    Returns:
        ``(num_transition_ids + 1,)`` int32; entry 0 (no transition-id) is 0, Kaldi's epsilon.
    """
    tuples, topology, where = _tuples_and_topology(model)
    table = _transitions(tuples, topology, where=where)
    return np.concatenate([[0], tuples[:, 0]]).astype(np.int32)[table.state]


# --- writing -------------------------------------------------------------------------------------


def write_model(
    path: str | Path, trans_model: khg.TransitionModel, *, am_gmm: khg.AmDiagGmm | None = None
) -> None:
    """Write ``final.mdl`` as Kaldi's ``gmm-init-mono`` / ``gmm-est`` do (``\\0B``, the transition
    model, the GMMs), atomically: a temporary file renamed over ``path``.

    Args:
        path: the model file.
        trans_model: the transition model.
        am_gmm: one GMM per pdf; None writes the transition model alone (the first part of a
            hybrid network's model, for tools that read only that part).

    Raises:
        ValueError: ``am_gmm`` has a different number of pdfs than ``trans_model``.
    """
    if am_gmm is not None and am_gmm.num_pdfs != trans_model.num_pdfs:
        raise ValueError(
            f"{path}: the GMM has {am_gmm.num_pdfs} pdfs but the transition model "
            f"{trans_model.num_pdfs}; pass the GMM trained with this tree"
        )
    with atomic_writer(path, "wb") as out:
        out.write(BINARY_MARKER)
        write_transition_model(out, trans_model)
        if am_gmm is not None:
            write_am_diag_gmm(out, am_gmm)


def write_transition_model(out: IO[bytes], trans_model: khg.TransitionModel) -> None:
    """Kaldi's binary ``TransitionModel::Write`` (layout in the module docstring)."""
    tuples, topology, _ = _tuples_and_topology(trans_model)
    hmm = _is_hmm(_topology_entries(topology)[2])
    name = "Triples" if hmm else "Tuples"
    write_token(out, "<TransitionModel>")
    write_topology(out, topology)
    write_token(out, f"<{name}>")
    write_int32(out, len(tuples))
    out.write(pack_int32s((tuples[:, :3] if hmm else tuples).reshape(-1)))
    write_token(out, f"</{name}>")
    write_token(out, "<LogProbs>")
    write_float_vector(out, trans_model.log_probs)
    write_token(out, "</LogProbs>")
    write_token(out, "</TransitionModel>")


def write_topology(out: IO[bytes], topology: khg.HmmTopology) -> None:
    """Kaldi's binary ``HmmTopology::Write``: the self-loop pdf classes are written (behind a -1
    marker) only when some state's differs from its forward pdf class."""
    phones, phone2idx, entries = _topology_entries(topology)
    hmm = _is_hmm(entries)
    write_token(out, "<Topology>")
    write_int32_vector(out, phones)
    write_int32_vector(out, phone2idx)
    if not hmm:
        write_int32(out, -1)
    write_int32(out, len(entries))
    for entry in entries:
        write_int32(out, len(entry))
        for state in entry:
            write_int32(out, state.forward_pdf_class)
            if not hmm:
                write_int32(out, state.self_loop_pdf_class)
            write_int32(out, len(state.transitions))
            for destination, probability in state.transitions:
                write_int32(out, destination)
                write_float32(out, probability)
    write_token(out, "</Topology>")


def write_am_diag_gmm(out: IO[bytes], am_gmm: khg.AmDiagGmm) -> None:
    """Kaldi's binary ``AmDiagGmm::Write``; stale gconsts are recomputed on a copy first."""
    write_token(out, "<DIMENSION>")
    write_int32(out, am_gmm.dim)
    write_token(out, "<NUMPDFS>")
    write_int32(out, am_gmm.num_pdfs)
    for pdf in range(am_gmm.num_pdfs):
        gmm = am_gmm.get_pdf(pdf)
        if not gmm.valid_gconsts:
            gmm = khg.DiagGmm(gmm)
            gmm.compute_gconsts()
        write_token(out, "<DiagGMM>")
        write_token(out, "<GCONSTS>")
        write_float_vector(out, gmm.gconsts)
        write_token(out, "<WEIGHTS>")
        write_float_vector(out, gmm.weights)
        write_token(out, "<MEANS_INVVARS>")
        write_float_matrix(out, gmm.means_invvars)
        write_token(out, "<INV_VARS>")
        write_float_matrix(out, gmm.inv_vars)
        write_token(out, "</DiagGMM>")


# --- reading -------------------------------------------------------------------------------------


def read_model(path: str | Path, *, with_gmm: bool = True) -> KaldiModel:
    """Read a Kaldi model file (binary or text): its transition model, and its GMMs if it has some.

    Args:
        path: ``final.mdl`` (any Kaldi model whose first part is a TransitionModel).
        with_gmm: read the GMMs that follow; False stops after the transition model (all that
            transition-id conversion needs).

    Returns:
        The model; ``am_gmm`` is None when no GMM follows (an nnet model: reading stops there,
        :attr:`KaldiModel.followed_by` names what follows) or ``with_gmm`` is False.

    Raises:
        DataError: missing, truncated or garbled file, an invalid topology, tuples that do not
            fit it, or a GMM whose shapes disagree — naming ``path`` and the fix.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"{path}: model file not found; point at the experiment dir's final.mdl (train the GMM "
            "system first, or copy the model there)"
        )
    with open(path, "rb") as stream:
        head = stream.read(2)
        reader: _Reader
        if head == BINARY_MARKER:
            reader = _BinaryReader(stream, str(path), fix=_FIX)
        else:
            reader = _TextReader((head + stream.read()).decode("utf-8", errors="replace"), str(path))
        with reader.low_level_errors():
            return _read_model(reader, str(path), with_gmm=with_gmm)


class _Reader(Protocol):
    """The reads the model parser needs, from a binary stream or from text."""

    def fail(self, problem: str, *, fix: str = ...) -> DataError: ...

    def low_level_errors(self) -> contextlib.AbstractContextManager[None]: ...

    def token(self) -> str: ...

    def peek_token(self) -> str | None: ...

    def expect(self, token: str) -> None: ...

    def int32(self) -> int: ...

    def int32s(self, count: int) -> np.ndarray: ...

    def floats(self, *, dims: int) -> np.ndarray: ...

    def topology(self) -> str: ...


def _read_model(reader: _Reader, where: str, *, with_gmm: bool) -> KaldiModel:
    reader.expect("<TransitionModel>")
    topology = _parse_topology(reader.topology(), where=where)
    kind = reader.token()
    if kind not in ("<Triples>", "<Tuples>"):
        raise reader.fail(f"expected <Triples> or <Tuples> after the topology, found {kind[:40]!r}", fix=_FIX)
    count = reader.int32()
    if count <= 0:
        raise reader.fail(f"{count} transition-states; a transition model has at least one", fix=_FIX)
    width = 3 if kind == "<Triples>" else 4
    values = reader.int32s(count * width).reshape(count, width)
    tuples = values if width == 4 else np.column_stack([values, values[:, 2]])
    reader.expect("</" + kind[1:])
    reader.expect("<LogProbs>")
    log_probs = reader.floats(dims=1)
    reader.expect("</LogProbs>")
    reader.expect("</TransitionModel>")
    model = KaldiModel(topology, tuples.astype(np.int32), log_probs, path=where)
    table = _transitions(model.tuples, topology, where=where)
    if len(log_probs) != len(table.state):
        raise reader.fail(
            f"{len(log_probs)} transition log-probs for {len(table.state) - 1} transition-ids "
            "(expected one more, entry 0 is unused)",
            fix=_FIX,
        )
    follows = reader.peek_token()
    if follows != "<DIMENSION>":
        model.followed_by = follows or ""
    elif with_gmm:
        model.am_gmm = _read_am_gmm(reader, num_pdfs=model.num_pdfs)
    return model


def _read_am_gmm(reader: _Reader, *, num_pdfs: int) -> khg.AmDiagGmm:
    reader.expect("<DIMENSION>")
    dim = reader.int32()
    reader.expect("<NUMPDFS>")
    count = reader.int32()
    if dim <= 0 or count != num_pdfs:
        raise reader.fail(
            f"the GMM part has dimension {dim} and {count} pdfs, the transition model {num_pdfs} pdfs",
            fix=_FIX,
        )
    state: list[np.ndarray] = []
    for pdf in range(count):
        opening = reader.token()
        if opening not in ("<DiagGMM>", "<DiagGMMBegin>"):
            raise reader.fail(f"pdf {pdf}: expected <DiagGMM>, found {opening[:40]!r}", fix=_FIX)
        token = reader.token()
        if token == "<GCONSTS>":  # optional; recomputed from the parameters, as Kaldi does
            reader.floats(dims=1)
            token = reader.token()
        if token != "<WEIGHTS>":
            raise reader.fail(f"pdf {pdf}: expected <WEIGHTS>, found {token[:40]!r}", fix=_FIX)
        weights = reader.floats(dims=1)
        reader.expect("<MEANS_INVVARS>")
        means_invvars = reader.floats(dims=2)
        reader.expect("<INV_VARS>")
        inv_vars = reader.floats(dims=2)
        closing = reader.token()
        if closing not in ("</DiagGMM>", "<DiagGMMEnd>"):
            raise reader.fail(f"pdf {pdf}: expected </DiagGMM>, found {closing[:40]!r}", fix=_FIX)
        shape = (len(weights), dim)
        if len(weights) == 0 or means_invvars.shape != shape or inv_vars.shape != shape:
            raise reader.fail(
                f"pdf {pdf}: {len(weights)} weights, means {means_invvars.shape}, inverse "
                f"variances {inv_vars.shape}; expected {shape[0]} components of dimension {dim}",
                fix=_FIX,
            )
        if not (np.isfinite(inv_vars).all() and (inv_vars > 0).all() and np.isfinite(means_invvars).all()):
            raise reader.fail(f"pdf {pdf}: non-finite means or non-positive variances", fix=_FIX)
        state += [weights, inv_vars, means_invvars]
    am_gmm = khg.AmDiagGmm.__new__(khg.AmDiagGmm)
    am_gmm.__setstate__(tuple(state))
    return am_gmm


class _BinaryReader(BinaryReader):
    """A binary model's reads: :class:`~asrkit.data.kaldi_binary.BinaryReader`'s basic types,
    float objects as float32, and the topology."""

    def floats(self, *, dims: int) -> np.ndarray:
        values = self.float_vector() if dims == 1 else self.float_matrix()
        return values.astype(np.float32, copy=False)

    def topology(self) -> str:
        """The binary topology, returned in Kaldi's text form (which the bindings parse)."""
        self.expect("<Topology>")
        phones, phone2idx = self.int32_vector(), self.int32_vector()
        count = self.int32()
        hmm = count != -1
        if not hmm:  # the marker of the form with self-loop pdf classes
            count = self.int32()
        entries: list[list[_State]] = []
        for _ in range(max(count, 0)):
            states = []
            for _ in range(self.int32()):
                forward = self.int32()
                self_loop = forward if hmm else self.int32()
                arcs = tuple((self.int32(), self.float_value()) for _ in range(self.int32()))
                states.append(_State(forward, self_loop, arcs))
            entries.append(states)
        self.expect("</Topology>")
        covered = [phone for phone, index in enumerate(phone2idx.tolist()) if 0 <= index < len(entries)]
        if count <= 0 or covered != phones.tolist():
            raise self.fail(
                f"the topology's phone list {phones.tolist()[:10]} does not match its "
                f"{count} entries and phone index {phone2idx.tolist()[:10]}"
            )
        return _topology_text(phone2idx.tolist(), entries)


class _TextReader:
    """The same reads from a text-mode model (``gmm-copy --binary=false``)."""

    def __init__(self, text: str, where: str) -> None:
        self.text = text
        self.where = where
        self.spans = [match.span() for match in re.finditer(r"\S+", text)]
        self.next = 0

    def fail(self, problem: str, *, fix: str = _FIX) -> DataError:
        return DataError(f"{self.where}: {problem}; {fix}")

    @contextlib.contextmanager
    def low_level_errors(self) -> Iterator[None]:
        yield

    def token(self) -> str:
        if self.next >= len(self.spans):
            raise self.fail("truncated: the file ends where a token was expected")
        start, end = self.spans[self.next]
        self.next += 1
        return self.text[start:end]

    def peek_token(self) -> str | None:
        if self.next >= len(self.spans):
            return None
        start, end = self.spans[self.next]
        return self.text[start:end]

    def expect(self, token: str) -> None:
        found = self.token()
        if found != token:
            raise self.fail(f"expected {token}, found {found[:40]!r}")

    def int32(self) -> int:
        return int(self.int32s(1)[0])

    def int32s(self, count: int) -> np.ndarray:
        words = [self.token() for _ in range(count)]
        try:
            return np.array([int(word) for word in words], dtype=np.int64)
        except ValueError:
            bad = next(word for word in words if not word.lstrip("-").isdigit())
            raise self.fail(f"expected an integer, found {bad[:40]!r}") from None

    def floats(self, *, dims: int) -> np.ndarray:
        self.expect("[")
        opened = self.next - 1
        while self.token() != "]":
            pass
        # Kaldi writes a text matrix one row per line between the brackets.
        body = self.text[self.spans[opened][1] : self.spans[self.next - 1][0]]
        try:
            rows = [[float(value) for value in line.split()] for line in body.splitlines() if line.strip()]
        except ValueError as err:
            raise self.fail(
                f"a text {'vector' if dims == 1 else 'matrix'} holds a non-number ({err})"
            ) from None
        if dims == 1:
            return np.array([value for row in rows for value in row], dtype=np.float32)
        if len({len(row) for row in rows}) > 1:
            raise self.fail("a text matrix has rows of different lengths")
        return np.array(rows, dtype=np.float32).reshape(len(rows), len(rows[0]) if rows else 0)

    def topology(self) -> str:
        start = self.spans[self.next][0] if self.next < len(self.spans) else len(self.text)
        self.expect("<Topology>")
        while self.token() != "</Topology>":
            pass
        return self.text[start : self.spans[self.next - 1][1]]


# --- topology and transition-ids ---------------------------------------------------------------


@dataclass(frozen=True)
class _State:
    """One HMM state of a topology entry (Kaldi's ``HmmTopology::HmmState``)."""

    forward_pdf_class: int
    self_loop_pdf_class: int
    transitions: tuple[tuple[int, float], ...]


def _topology_entries(topology: khg.HmmTopology) -> tuple[list[int], list[int], list[list[_State]]]:
    """``(phones, phone2idx, entries)`` of the bindings' topology as plain Python values."""
    phones, phone2idx, entries = topology.__getstate__()
    plain = [
        [
            _State(int(fwd), int(loop), tuple((int(d), float(p)) for d, p in arcs))
            for fwd, loop, arcs in states
        ]
        for states in ([state.__getstate__() for state in entry] for entry in entries)
    ]
    return list(phones), list(phone2idx), plain


def _is_hmm(entries: list[list[_State]]) -> bool:
    """Kaldi's ``IsHmm``: no state has a self-loop pdf class of its own."""
    return all(state.forward_pdf_class == state.self_loop_pdf_class for entry in entries for state in entry)


def _topology_text(phone2idx: list[int], entries: list[list[_State]]) -> str:
    """A topology in Kaldi's text form; probabilities are written exactly (shortest repr of the float32)."""
    hmm = _is_hmm(entries)
    lines = ["<Topology>"]
    for index, entry in enumerate(entries):
        phones = " ".join(str(phone) for phone, at in enumerate(phone2idx) if at == index)
        lines += ["<TopologyEntry>", "<ForPhones>", phones, "</ForPhones>"]
        for number, state in enumerate(entry):
            if state.forward_pdf_class < 0:
                pdf = ""
            elif hmm:
                pdf = f" <PdfClass> {state.forward_pdf_class}"
            else:
                pdf = (
                    f" <ForwardPdfClass> {state.forward_pdf_class}"
                    f" <SelfLoopPdfClass> {state.self_loop_pdf_class}"
                )
            arcs = "".join(f" <Transition> {dst} {prob!r}" for dst, prob in state.transitions)
            lines.append(f"<State> {number}{pdf}{arcs} </State>")
        lines.append("</TopologyEntry>")
    lines.append("</Topology>")
    return "\n".join(lines) + "\n"


def _parse_topology(text: str, *, where: str) -> khg.HmmTopology:
    topology = khg.HmmTopology()
    try:
        topology.read(text)
    except RuntimeError as err:
        reason = [line.strip() for line in str(err).splitlines() if line.strip()][-1:] or ["unreadable"]
        raise DataError(f"{where}: invalid HMM topology ({reason[0]}); {_FIX}") from None
    return topology


def _tuples_and_topology(model: KaldiModel | khg.TransitionModel) -> tuple[np.ndarray, khg.HmmTopology, str]:
    if isinstance(model, KaldiModel):
        return model.tuples, model.topology, model.path or "the model"
    tuples, topology, *_ = model.__getstate__()
    rows = np.array([t.__getstate__() for t in tuples], dtype=np.int32).reshape(-1, 4)
    return rows, topology, "the transition model"


@dataclass(frozen=True)
class _Transitions:
    """Kaldi's derived transition-id tables of a tuple list.

    Attributes:
        state2id: ``(num_tuples + 2,)`` first transition-id of each transition-state (one-based;
            entry 0 unused, the last is ``num_transition_ids + 1``).
        state: ``(num_transition_ids + 1,)`` transition-state of each id (0 for id 0).
        self_loop: ``(num_transition_ids + 1,)`` whether each id is a self-loop.
        loop_id: ``(num_tuples,)`` each transition-state's self-loop transition-id, 0 for none.
    """

    state2id: np.ndarray
    state: np.ndarray
    self_loop: np.ndarray
    loop_id: np.ndarray


def _transitions(tuples: np.ndarray, topology: khg.HmmTopology, *, where: str) -> _Transitions:
    """Number the transitions of every tuple, checking that each tuple fits the topology."""
    _, phone2idx, entries = _topology_entries(topology)
    shape = (len(phone2idx), max(len(entry) for entry in entries))
    out_count = np.zeros(shape, dtype=np.int64)
    loop_index = np.full(shape, -1, dtype=np.int64)
    emitting = np.zeros(shape, dtype=bool)
    for phone, index in enumerate(phone2idx):
        for number, hmm in enumerate(entries[index] if index >= 0 else []):
            out_count[phone, number] = len(hmm.transitions)
            emitting[phone, number] = hmm.forward_pdf_class >= 0
            loop_index[phone, number] = next(
                (k for k, (dst, _) in enumerate(hmm.transitions) if dst == number), -1
            )
    phone, hmm_state, forward, self_loop = (column.astype(np.int64) for column in tuples.T)
    fits = (phone >= 0) & (phone < shape[0]) & (hmm_state >= 0) & (hmm_state < shape[1])
    fits[fits] = emitting[phone[fits], hmm_state[fits]]
    fits &= (forward >= 0) & (self_loop >= 0)
    if not fits.all():
        bad = int(np.flatnonzero(~fits)[0])
        raise DataError(
            f"{where}: transition-state {bad + 1} (phone {phone[bad]}, HMM state {hmm_state[bad]}, "
            f"pdfs {forward[bad]}/{self_loop[bad]}) is not an emitting state of the model's "
            f"topology; {_FIX}"
        )
    counts = out_count[phone, hmm_state]
    state2id = np.zeros(len(tuples) + 2, dtype=np.int64)
    state2id[1:] = 1 + np.concatenate([[0], np.cumsum(counts)])
    state = np.concatenate([[0], np.repeat(np.arange(1, len(tuples) + 1), counts)])
    index = np.arange(len(state)) - state2id[state]
    loops = loop_index[phone, hmm_state]
    is_loop = np.concatenate([[False], index[1:] == loops[state[1:] - 1]])
    loop_id = np.where(loops >= 0, state2id[1:-1] + loops, 0)
    return _Transitions(state2id, state, is_loop, loop_id)


def _pdf_table(tuples: np.ndarray, table: _Transitions) -> np.ndarray:
    forward = np.concatenate([[0], tuples[:, 2]])
    self_loop = np.concatenate([[0], tuples[:, 3]])
    return np.where(table.self_loop, self_loop[table.state], forward[table.state]).astype(np.int32)


__all__ = [
    "KaldiModel",
    "read_model",
    "transition_id_to_pdf",
    "transition_id_to_phone",
    "write_am_diag_gmm",
    "write_float32",
    "write_float_matrix",
    "write_float_vector",
    "write_int32",
    "write_int32_vector",
    "write_model",
    "write_token",
    "write_topology",
    "write_transition_model",
]
