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

The file starts with ``\\0B``. Text-mode models (``gmm-copy --binary=false``) are read too.

Transition-ids are Kaldi's numbering: each transition-state (one tuple) owns one id per
transition out of its HMM state, numbered from 1 in tuple order; an id whose transition returns
to its own state is a self-loop and emits the tuple's self-loop pdf, any other the forward pdf.

Public API:
    - :func:`write_model`, :func:`read_model`, :class:`KaldiModel` — ``final.mdl`` as a file.
    - :func:`write_transition_model`, :func:`write_topology`, :func:`write_am_diag_gmm` and the
      basic writers :func:`write_token`, :func:`write_int32`, :func:`write_float32`,
      :func:`write_int32_vector`, :func:`write_float_vector`, :func:`write_float_matrix`.
    - :func:`transition_id_to_pdf`, :func:`transition_id_to_phone` — lookup tables indexed by
      transition-id.
"""

from __future__ import annotations

import contextlib
import io
import re
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import _kaldi_hmm_gmm  # TransitionModelTuple is not re-exported by kaldi_hmm_gmm
import kaldi_hmm_gmm as khg
import numpy as np

from asrkit.data.io import atomic_writer
from asrkit.data.kaldi_ark import kaldi_io
from asrkit.data.kaldi_table import TableReader
from asrkit.errors import DataError

_FIX = (
    "the file is damaged or not a Kaldi model; copy it again from the experiment dir that "
    "trained it (or re-run that training step)"
)
#: Kaldi's WriteBasicType<int32> record: the size byte 4, then the value.
_INT32 = np.dtype([("size", "u1"), ("value", "<i4")])
#: Binary float objects: the stored element type, per number of dimensions and token.
_FLOAT_OBJECTS = {1: {"FV": "<f4", "DV": "<f8"}, 2: {"FM": "<f4", "DM": "<f8"}}
_LONGEST_TOKEN = 64


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
        out.write(b"\0B")
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
    out.write(_int32_records((tuples[:, :3] if hmm else tuples).reshape(-1)))
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


def write_token(out: IO[bytes], token: str) -> None:
    """A token such as ``<Topology>``: its text and one space."""
    if not token or any(char.isspace() for char in token):
        raise ValueError(f"a Kaldi token must be non-empty and hold no whitespace, got {token!r}")
    out.write(token.encode() + b" ")


def write_int32(out: IO[bytes], value: int) -> None:
    """Kaldi's ``WriteBasicType<int32>``: the size byte 4, then four little-endian bytes."""
    out.write(_int32_records([value]))


def write_float32(out: IO[bytes], value: float) -> None:
    """Kaldi's ``WriteBasicType<float>``: the size byte 4, then a little-endian float32."""
    out.write(b"\x04" + struct.pack("<f", value))


def write_int32_vector(out: IO[bytes], values: Sequence[int] | np.ndarray) -> None:
    """Kaldi's ``WriteIntegerVector<int32>``: the size byte 4, the int32 count, the raw int32s."""
    data = np.asarray(values, dtype="<i4")
    out.write(b"\x04" + struct.pack("<i", data.size) + data.tobytes())


def write_float_vector(out: IO[bytes], values: Sequence[float] | np.ndarray) -> None:
    """Kaldi's binary ``Vector<float>::Write``: ``FV``, the size, the float32s."""
    out.write(_object_bytes(kaldi_io.write_vec_flt, np.asarray(values, dtype=np.float32).reshape(-1)))


def write_float_matrix(out: IO[bytes], values: np.ndarray) -> None:
    """Kaldi's binary ``Matrix<float>::Write``: ``FM``, rows, columns, the float32s row by row."""
    out.write(_object_bytes(kaldi_io.write_mat, np.asarray(values, dtype=np.float32)))


class _Buffer(io.BytesIO):
    mode = "wb"  # kaldi-io's writers check the mode of the stream they are given


def _object_bytes(write: Callable[[IO[bytes], np.ndarray], None], value: np.ndarray) -> bytes:
    """What kaldi-io's object writer writes, less the ``\\0B`` it puts first: inside a model
    the objects follow each other with no binary marker."""
    buffer = _Buffer()
    write(buffer, value)
    return buffer.getvalue()[2:]


def _int32_records(values: Sequence[int] | np.ndarray) -> bytes:
    records = np.empty(len(values), dtype=_INT32)
    records["size"] = 4
    records["value"] = values
    return records.tobytes()


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
        if head == b"\0B":
            reader = _BinaryReader(stream, str(path))
        else:
            reader = _TextReader((head + stream.read()).decode("utf-8", errors="replace"), str(path))
        with reader.low_level_errors():
            return _read_model(reader, str(path), with_gmm=with_gmm)


class _Reader(Protocol):
    """The reads the model parser needs, from a binary stream or from text."""

    def fail(self, problem: str, *, fix: str = ...) -> DataError: ...

    def low_level_errors(self) -> contextlib.AbstractContextManager[None]: ...

    def word(self) -> str: ...

    def peek_word(self) -> str | None: ...

    def int32s(self, count: int) -> np.ndarray: ...

    def floats(self, *, dims: int) -> np.ndarray: ...

    def topology(self) -> str: ...


def _read_model(reader: _Reader, where: str, *, with_gmm: bool) -> KaldiModel:
    _expect(reader, "<TransitionModel>")
    topology = _parse_topology(reader.topology(), where=where)
    kind = reader.word()
    if kind not in ("<Triples>", "<Tuples>"):
        raise reader.fail(f"expected <Triples> or <Tuples> after the topology, found {kind[:40]!r}", fix=_FIX)
    count = _int32(reader)
    if count <= 0:
        raise reader.fail(f"{count} transition-states; a transition model has at least one", fix=_FIX)
    width = 3 if kind == "<Triples>" else 4
    values = reader.int32s(count * width).reshape(count, width)
    tuples = values if width == 4 else np.column_stack([values, values[:, 2]])
    _expect(reader, "</" + kind[1:])
    _expect(reader, "<LogProbs>")
    log_probs = reader.floats(dims=1)
    _expect(reader, "</LogProbs>")
    _expect(reader, "</TransitionModel>")
    model = KaldiModel(topology, tuples.astype(np.int32), log_probs, path=where)
    table = _transitions(model.tuples, topology, where=where)
    if len(log_probs) != len(table.state):
        raise reader.fail(
            f"{len(log_probs)} transition log-probs for {len(table.state) - 1} transition-ids "
            "(expected one more, entry 0 is unused)",
            fix=_FIX,
        )
    follows = reader.peek_word()
    if follows != "<DIMENSION>":
        model.followed_by = follows or ""
    elif with_gmm:
        model.am_gmm = _read_am_gmm(reader, num_pdfs=model.num_pdfs)
    return model


def _read_am_gmm(reader: _Reader, *, num_pdfs: int) -> khg.AmDiagGmm:
    _expect(reader, "<DIMENSION>")
    dim = _int32(reader)
    _expect(reader, "<NUMPDFS>")
    count = _int32(reader)
    if dim <= 0 or count != num_pdfs:
        raise reader.fail(
            f"the GMM part has dimension {dim} and {count} pdfs, the transition model {num_pdfs} pdfs",
            fix=_FIX,
        )
    state: list[np.ndarray] = []
    for pdf in range(count):
        opening = reader.word()
        if opening not in ("<DiagGMM>", "<DiagGMMBegin>"):
            raise reader.fail(f"pdf {pdf}: expected <DiagGMM>, found {opening[:40]!r}", fix=_FIX)
        token = reader.word()
        if token == "<GCONSTS>":  # optional; recomputed from the parameters, as Kaldi does
            reader.floats(dims=1)
            token = reader.word()
        if token != "<WEIGHTS>":
            raise reader.fail(f"pdf {pdf}: expected <WEIGHTS>, found {token[:40]!r}", fix=_FIX)
        weights = reader.floats(dims=1)
        _expect(reader, "<MEANS_INVVARS>")
        means_invvars = reader.floats(dims=2)
        _expect(reader, "<INV_VARS>")
        inv_vars = reader.floats(dims=2)
        closing = reader.word()
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


def _expect(reader: _Reader, token: str) -> None:
    found = reader.word()
    if found != token:
        raise reader.fail(f"expected {token}, found {found[:40]!r}", fix=_FIX)


def _int32(reader: _Reader) -> int:
    return int(reader.int32s(1)[0])


class _BinaryReader(TableReader):
    """Kaldi's binary basic types from a stream (after the file's ``\\0B``)."""

    def fail(self, problem: str, *, utt: str | None = None, fix: str = _FIX) -> DataError:
        return super().fail(problem, utt=utt, fix=fix)

    def word(self) -> str:
        char = self.stream.read(1)
        while char and char in b" \t\r\n":
            char = self.stream.read(1)
        token = bytearray()
        while char and char != b" ":
            token += char
            if len(token) > _LONGEST_TOKEN:
                raise self.fail(f"no token in the {_LONGEST_TOKEN} bytes where one was expected")
            char = self.stream.read(1)
        if not char:
            raise self.fail("truncated: the file ends where a token was expected")
        return token.decode("latin-1")

    def peek_word(self) -> str | None:
        start = self.stream.tell()
        ahead = self.stream.read(_LONGEST_TOKEN + 8).lstrip(b" \t\r\n")
        self.stream.seek(start)
        token, space, _ = ahead.partition(b" ")
        if ahead and not space and len(ahead) <= _LONGEST_TOKEN:
            raise self.fail("truncated: the file ends inside a token")
        return token.decode("latin-1") if ahead else None

    def int32s(self, count: int) -> np.ndarray:
        records = np.frombuffer(self.exact(5 * count, utt=None, what=f"{count} int32 values"), dtype=_INT32)
        if (records["size"] != 4).any():
            raise self.fail("an integer is not stored as an int32 (its size byte is not 4)")
        return records["value"].astype(np.int64)

    def float_value(self) -> float:
        size = self.exact(1, utt=None, what="a float")[0]
        if size not in (4, 8):
            raise self.fail(f"a float has size byte {size}, expected 4 or 8")
        data = self.exact(size, utt=None, what="a float")
        return float(np.frombuffer(data, dtype="<f4" if size == 4 else "<f8")[0])

    def int_vector(self) -> np.ndarray:
        head = self.exact(5, utt=None, what="an integer vector's size")
        (count,) = struct.unpack_from("<i", head, 1)
        if head[0] != 4 or count < 0:
            raise self.fail(f"bad integer vector header (element size {head[0]}, count {count})")
        return np.frombuffer(self.exact(4 * count, utt=None, what=f"{count} int32s"), dtype="<i4").astype(
            np.int64
        )

    def floats(self, *, dims: int) -> np.ndarray:
        token = self.word()
        stored = _FLOAT_OBJECTS[dims].get(token)
        if stored is None:
            expected = " or ".join(_FLOAT_OBJECTS[dims])
            raise self.fail(
                f"expected a float {'vector' if dims == 1 else 'matrix'} ({expected}), found {token[:40]!r}"
            )
        shape = tuple(int(n) for n in self.int32s(dims))
        if min(shape) < 0:
            raise self.fail(f"negative size {shape}")
        size = int(np.prod(shape)) * np.dtype(stored).itemsize
        data = self.exact(size, utt=None, what=f"a {'x'.join(map(str, shape))} {token}")
        return np.frombuffer(data, dtype=stored).reshape(shape).astype(np.float32)

    def topology(self) -> str:
        """The binary topology, returned in Kaldi's text form (which the bindings parse)."""
        _expect(self, "<Topology>")
        phones, phone2idx = self.int_vector(), self.int_vector()
        count = _int32(self)
        hmm = count != -1
        if not hmm:  # the marker of the form with self-loop pdf classes
            count = _int32(self)
        entries: list[list[_State]] = []
        for _ in range(max(count, 0)):
            states = []
            for _ in range(_int32(self)):
                forward = _int32(self)
                self_loop = forward if hmm else _int32(self)
                arcs = tuple((_int32(self), self.float_value()) for _ in range(_int32(self)))
                states.append(_State(forward, self_loop, arcs))
            entries.append(states)
        _expect(self, "</Topology>")
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

    def word(self) -> str:
        if self.next >= len(self.spans):
            raise self.fail("truncated: the file ends where a token was expected")
        start, end = self.spans[self.next]
        self.next += 1
        return self.text[start:end]

    def peek_word(self) -> str | None:
        if self.next >= len(self.spans):
            return None
        start, end = self.spans[self.next]
        return self.text[start:end]

    def int32s(self, count: int) -> np.ndarray:
        words = [self.word() for _ in range(count)]
        try:
            return np.array([int(word) for word in words], dtype=np.int64)
        except ValueError:
            bad = next(word for word in words if not word.lstrip("-").isdigit())
            raise self.fail(f"expected an integer, found {bad[:40]!r}") from None

    def floats(self, *, dims: int) -> np.ndarray:
        _expect(self, "[")
        opened = self.next - 1
        while self.word() != "]":
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
        _expect(self, "<Topology>")
        while self.word() != "</Topology>":
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
