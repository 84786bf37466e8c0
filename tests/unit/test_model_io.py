"""Kaldi's ``final.mdl`` written and read from Python, and transition-id alignments as targets.

The models are built by the bindings of Kaldi's own code (``kaldi_hmm_gmm``: a topology, a
monophone tree, the TransitionModel it implies, seeded GMMs), so the tuples, transition-id
numbering and log probabilities are Kaldi's. The byte layout is asserted against a literal
written out by hand from Kaldi's ``Write`` methods; the text-mode reader is fed the
bindings' own text writer (``str(TransitionModel)``).
"""

from __future__ import annotations

import struct
from pathlib import Path

import kaldi_hmm_gmm as khg
import numpy as np
import pytest

from asrkit.cli.main import main
from asrkit.data.kaldi_ark import write_ark
from asrkit.errors import ConfigError, DataError
from asrkit.gmm.model_io import (
    KaldiModel,
    read_model,
    transition_id_to_pdf,
    transition_id_to_phone,
    write_model,
)
from asrkit.targets import AlignmentCheckConfig, check_alignments, read_alignments, read_frame_counts
from tests.kaldi_fixtures import write_gz

#: Phones 1-3: Kaldi's 3-state left-to-right HMM; phone 4: one emitting state of its own.
THREE_STATE = """<Topology>
<TopologyEntry>
<ForPhones>
1 2 3
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.75 <Transition> 1 0.25 </State>
<State> 1 <PdfClass> 1 <Transition> 1 0.75 <Transition> 2 0.25 </State>
<State> 2 <PdfClass> 2 <Transition> 2 0.75 <Transition> 3 0.25 </State>
<State> 3 </State>
</TopologyEntry>
<TopologyEntry>
<ForPhones>
4
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.6 <Transition> 1 0.4 </State>
<State> 1 </State>
</TopologyEntry>
</Topology>
"""
#: The chain topology: one state whose self-loop has a pdf class of its own (written as <Tuples>).
CHAIN = """<Topology>
<TopologyEntry>
<ForPhones>
1 2 3
</ForPhones>
<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 <Transition> 1 0.5 </State>
<State> 1 </State>
</TopologyEntry>
</Topology>
"""
DIM = 4


def _trans_model(topo_text: str) -> khg.TransitionModel:
    topo = khg.HmmTopology()
    topo.read(topo_text)
    tree = khg.monophone_context_dependency(list(topo.phones), topo.get_phone_to_num_pdf_classes())
    return khg.TransitionModel(tree, topo)


def _am_gmm(num_pdfs: int, *, seed: int, components: int = 2) -> khg.AmDiagGmm:
    rng = np.random.default_rng(seed)
    am_gmm = khg.AmDiagGmm()
    for _ in range(num_pdfs):
        gmm = khg.DiagGmm(components, DIM)
        weights = rng.uniform(0.2, 1.0, size=components)
        gmm.set_weights((weights / weights.sum()).astype(np.float32))
        gmm.set_invvars(rng.uniform(0.5, 2.0, size=(components, DIM)).astype(np.float32))
        gmm.set_means(rng.normal(0, 3, size=(components, DIM)).astype(np.float32))
        assert gmm.compute_gconsts() == 0
        am_gmm.add_pdf(gmm)
    return am_gmm


def _tuples(trans_model: khg.TransitionModel) -> list[tuple[int, ...]]:
    return [t.__getstate__() for t in trans_model.__getstate__()[0]]


def _gmm_arrays(am_gmm: khg.AmDiagGmm, pdf: int) -> list[np.ndarray]:
    gmm = am_gmm.get_pdf(pdf)
    return [gmm.weights, gmm.means_invvars, gmm.inv_vars, gmm.gconsts]


def _int(value: int) -> bytes:
    return b"\x04" + struct.pack("<i", value)


def _int_vector(values: list[int]) -> bytes:
    return b"\x04" + struct.pack(f"<i{len(values)}i", len(values), *values)


def _float(value: float) -> bytes:
    return b"\x04" + struct.pack("<f", value)


# --- round trips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("topo_text", [THREE_STATE, CHAIN], ids=["three_state", "chain"])
def test_write_read_round_trip(tmp_path: Path, topo_text: str) -> None:
    trans_model = _trans_model(topo_text)
    am_gmm = _am_gmm(trans_model.num_pdfs, seed=0)
    write_model(tmp_path / "final.mdl", trans_model, am_gmm=am_gmm)
    model = read_model(tmp_path / "final.mdl")

    assert [tuple(row) for row in model.tuples.tolist()] == _tuples(trans_model)
    assert model.log_probs.dtype == np.float32
    assert np.array_equal(model.log_probs, np.array(trans_model.log_probs, dtype=np.float32))
    assert model.topology_text == str(trans_model.topo)
    assert (model.num_pdfs, model.num_transition_ids) == (
        trans_model.num_pdfs,
        trans_model.num_transition_ids,
    )
    assert model.phones == list(trans_model.topo.phones) and model.followed_by == ""
    assert model.am_gmm is not None
    assert (model.am_gmm.num_pdfs, model.am_gmm.dim) == (am_gmm.num_pdfs, DIM)
    for pdf in range(am_gmm.num_pdfs):
        for got, expected in zip(_gmm_arrays(model.am_gmm, pdf), _gmm_arrays(am_gmm, pdf), strict=True):
            assert np.array_equal(got, expected)

    # Writing what was read gives the same bytes.
    write_model(tmp_path / "again.mdl", model.transition_model(), am_gmm=model.am_gmm)
    assert (tmp_path / "again.mdl").read_bytes() == (tmp_path / "final.mdl").read_bytes()


@pytest.mark.parametrize("topo_text", [THREE_STATE, CHAIN], ids=["three_state", "chain"])
def test_rebuilt_transition_model_equals_the_bindings(tmp_path: Path, topo_text: str) -> None:
    trans_model = _trans_model(topo_text)
    write_model(tmp_path / "final.mdl", trans_model)
    rebuilt = read_model(tmp_path / "final.mdl").transition_model()
    ours, theirs = rebuilt.__getstate__(), trans_model.__getstate__()
    assert _tuples(rebuilt) == _tuples(trans_model)
    assert ours[2:6] == theirs[2:6]  # state2id, id2state, id2pdf, num_pdfs
    assert ours[6] == theirs[6]  # log probs, exactly
    assert np.allclose(ours[7], theirs[7], atol=1e-6)  # non-self-loop log probs
    for tid in range(1, trans_model.num_transition_ids + 1):
        assert rebuilt.is_self_loop(tid) == trans_model.is_self_loop(tid)
        assert rebuilt.transition_id_to_phone(tid) == trans_model.transition_id_to_phone(tid)


@pytest.mark.parametrize("topo_text", [THREE_STATE, CHAIN], ids=["three_state", "chain"])
def test_transition_id_tables_match_the_bindings(tmp_path: Path, topo_text: str) -> None:
    trans_model = _trans_model(topo_text)
    write_model(tmp_path / "final.mdl", trans_model)
    model = read_model(tmp_path / "final.mdl")
    expected_pdfs = trans_model.transition_id_to_pdf_array()
    for source in (model, trans_model):
        pdfs, phones = transition_id_to_pdf(source), transition_id_to_phone(source)
        assert pdfs.dtype == np.int32 and pdfs.tolist() == expected_pdfs
        assert phones[0] == 0
        assert phones[1:].tolist() == [
            trans_model.transition_id_to_phone(t) for t in range(1, trans_model.num_transition_ids + 1)
        ]
    if topo_text == CHAIN:  # self-loops and forward transitions of one state emit different pdfs
        loops = [t for t in range(1, len(expected_pdfs)) if trans_model.is_self_loop(t)]
        assert all(expected_pdfs[t] != expected_pdfs[t + 1] for t in loops)


# --- the byte layout --------------------------------------------------------------------------------

ONE_PHONE = """<Topology>
<TopologyEntry>
<ForPhones>
1
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 </State>
<State> 1 </State>
</TopologyEntry>
</Topology>
"""


def test_binary_layout_is_kaldis(tmp_path: Path) -> None:
    trans_model = _trans_model(ONE_PHONE)
    am_gmm = _am_gmm(1, seed=1, components=1)
    write_model(tmp_path / "final.mdl", trans_model, am_gmm=am_gmm)
    log_probs = np.array(trans_model.log_probs, dtype=np.float32)
    gmm = am_gmm.get_pdf(0)
    expected = (
        b"\0B<TransitionModel> <Topology> "
        + _int_vector([1])  # phones (WriteIntegerVector: no size byte per element)
        + _int_vector([-1, 0])  # phone -> topology entry
        + _int(1)  # entries
        + _int(2)  # states of entry 0
        + _int(0) + _int(2) + _int(0) + _float(0.5) + _int(1) + _float(0.5)
        + _int(-1) + _int(0)
        + b"</Topology> <Triples> " + _int(1) + _int(1) + _int(0) + _int(0) + b"</Triples> "
        + b"<LogProbs> FV " + _int(3) + log_probs.tobytes() + b"</LogProbs> </TransitionModel> "
        + b"<DIMENSION> " + _int(DIM) + b"<NUMPDFS> " + _int(1)
        + b"<DiagGMM> <GCONSTS> FV " + _int(1) + gmm.gconsts.tobytes()
        + b"<WEIGHTS> FV " + _int(1) + gmm.weights.tobytes()
        + b"<MEANS_INVVARS> FM " + _int(1) + _int(DIM) + gmm.means_invvars.tobytes()
        + b"<INV_VARS> FM " + _int(1) + _int(DIM) + gmm.inv_vars.tobytes()
        + b"</DiagGMM> "
    )  # fmt: skip
    assert (tmp_path / "final.mdl").read_bytes() == expected


def test_self_loop_pdf_classes_are_written_behind_a_minus_one(tmp_path: Path) -> None:
    write_model(tmp_path / "final.mdl", _trans_model(CHAIN))
    data = (tmp_path / "final.mdl").read_bytes()
    head = b"\0B<TransitionModel> <Topology> " + _int_vector([1, 2, 3]) + _int_vector([-1, 0, 0, 0])
    # -1 marks the extended form; then 1 entry of 2 states: forward class 0, self-loop class 1.
    assert data.startswith(head + _int(-1) + _int(1) + _int(2) + _int(0) + _int(1) + _int(2))
    assert b"</Topology> <Tuples> " + _int(3) + _int(1) + _int(0) + _int(0) + _int(1) in data


# --- other forms ------------------------------------------------------------------------------------


def _text_gmm(am_gmm: khg.AmDiagGmm) -> str:
    """AmDiagGmm as ``gmm-copy --binary=false`` prints it."""

    def vector(values: np.ndarray) -> str:
        return " [ " + "".join(f"{v:g} " for v in values) + "]\n"

    def matrix(values: np.ndarray) -> str:
        return " [" + "".join("\n  " + "".join(f"{v:g} " for v in row) for row in values) + "]\n"

    out = [f"<DIMENSION> {am_gmm.dim} <NUMPDFS> {am_gmm.num_pdfs} "]
    for pdf in range(am_gmm.num_pdfs):
        gmm = am_gmm.get_pdf(pdf)
        out.append(
            "<DiagGMM> \n<GCONSTS> " + vector(gmm.gconsts) + "<WEIGHTS> " + vector(gmm.weights)
            + "<MEANS_INVVARS> " + matrix(gmm.means_invvars) + "<INV_VARS> " + matrix(gmm.inv_vars)
            + "</DiagGMM> \n"
        )  # fmt: skip
    return "".join(out)


def test_text_model_is_read(tmp_path: Path) -> None:
    trans_model = _trans_model(THREE_STATE)
    am_gmm = _am_gmm(trans_model.num_pdfs, seed=2)
    # str() of the bindings' TransitionModel is Kaldi's own text writer.
    (tmp_path / "text.mdl").write_text(str(trans_model) + _text_gmm(am_gmm))
    model = read_model(tmp_path / "text.mdl")
    assert [tuple(row) for row in model.tuples.tolist()] == _tuples(trans_model)
    assert np.allclose(model.log_probs, trans_model.log_probs, rtol=1e-5)
    assert transition_id_to_pdf(model).tolist() == trans_model.transition_id_to_pdf_array()
    assert model.am_gmm is not None
    for pdf in range(am_gmm.num_pdfs):
        for got, expected in zip(_gmm_arrays(model.am_gmm, pdf), _gmm_arrays(am_gmm, pdf), strict=True):
            assert np.allclose(got, expected, rtol=1e-4, atol=1e-5)
    (tmp_path / "tm.mdl").write_text(str(trans_model))
    assert read_model(tmp_path / "tm.mdl").am_gmm is None


def test_nnet_model_is_read_up_to_its_network(tmp_path: Path) -> None:
    trans_model = _trans_model(THREE_STATE)
    write_model(tmp_path / "tm.mdl", trans_model)
    (tmp_path / "final.mdl").write_bytes(
        (tmp_path / "tm.mdl").read_bytes() + b"<Nnet3> \ninput-node name=input dim=40\n"
    )
    model = read_model(tmp_path / "final.mdl")
    assert model.am_gmm is None and model.followed_by == "<Nnet3>"
    assert transition_id_to_pdf(model).tolist() == trans_model.transition_id_to_pdf_array()
    write_model(tmp_path / "gmm.mdl", trans_model, am_gmm=_am_gmm(trans_model.num_pdfs, seed=3))
    skipped = read_model(tmp_path / "gmm.mdl", with_gmm=False)
    assert skipped.am_gmm is None and skipped.followed_by == ""


def test_write_model_refuses_a_gmm_of_another_tree(tmp_path: Path) -> None:
    trans_model = _trans_model(THREE_STATE)
    with pytest.raises(ValueError, match="the GMM has 3 pdfs but the transition model 10"):
        write_model(tmp_path / "final.mdl", trans_model, am_gmm=_am_gmm(3, seed=4))
    assert not list(tmp_path.iterdir())  # nothing half-written


# --- broken files -----------------------------------------------------------------------------------


def _one_line_error(path: Path, *needles: str) -> str:
    with pytest.raises(DataError) as err:
        read_model(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message, message
    for needle in needles:
        assert needle in message, message
    return message


def test_every_truncation_is_a_clear_error(tmp_path: Path) -> None:
    trans_model = _trans_model(THREE_STATE)
    write_model(tmp_path / "full.mdl", trans_model, am_gmm=_am_gmm(trans_model.num_pdfs, seed=5))
    write_model(tmp_path / "tm.mdl", trans_model)
    data, transition_part = (tmp_path / "full.mdl").read_bytes(), len((tmp_path / "tm.mdl").read_bytes())
    cut = tmp_path / "cut.mdl"
    for end in sorted({*range(0, len(data), 7), *range(transition_part - 12, transition_part + 30)}):
        if end == transition_part:  # the transition model alone is a complete file
            continue
        cut.write_bytes(data[:end])
        _one_line_error(cut, "copy it again")
    cut.write_bytes(data[: len(data) // 2])
    _one_line_error(cut, "truncated")


def test_garbled_files(tmp_path: Path) -> None:
    trans_model = _trans_model(THREE_STATE)
    write_model(tmp_path / "final.mdl", trans_model, am_gmm=_am_gmm(trans_model.num_pdfs, seed=6))
    data = (tmp_path / "final.mdl").read_bytes()
    bad = tmp_path / "bad.mdl"
    bad.write_bytes(data.replace(b"<Triples> ", b"<Trxples> "))
    _one_line_error(bad, "expected <Triples> or <Tuples>", "'<Trxples>'")
    bad.write_bytes(data.replace(b"<Triples> \x04", b"<Triples> \x08"))
    _one_line_error(bad, "size byte is not 4")
    # A transition-state on phone 7, which the topology does not cover.
    bad.write_bytes(data.replace(b"<Triples> " + _int(10) + _int(1), b"<Triples> " + _int(10) + _int(7)))
    _one_line_error(bad, "transition-state 1 (phone 7", "not an emitting state")
    bad.write_bytes(data.replace(b"<NUMPDFS> " + _int(10), b"<NUMPDFS> " + _int(9)))
    _one_line_error(bad, "9 pdfs, the transition model 10 pdfs")
    bad.write_bytes(np.random.default_rng(7).bytes(3000))
    _one_line_error(bad, "expected <TransitionModel>")
    bad.write_bytes(b"\0B" + np.random.default_rng(8).bytes(3000))
    _one_line_error(bad)
    bad.write_text(
        "<TransitionModel> <Topology> <TopologyEntry> <ForPhones> 1 </ForPhones> </TopologyEntry> </Topology>"
    )
    _one_line_error(bad, "invalid HMM topology")
    _one_line_error(tmp_path / "missing.mdl", "model file not found")


# --- transition-id alignments through the alignment loader ------------------------------------------


def _transition_ids(
    trans_model: khg.TransitionModel, lengths: dict[str, int], *, seed: int
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        utt: rng.integers(1, trans_model.num_transition_ids + 1, size=n).astype(np.int32)
        for utt, n in lengths.items()
    }


def _gmm_dir(tmp_path: Path, trans_model: khg.TransitionModel, alis: dict[str, np.ndarray]) -> Path:
    """A Kaldi GMM alignment dir: final.mdl and ali.1.gz of transition-ids."""
    exp = tmp_path / "exp" / "tri1_ali"
    exp.mkdir(parents=True)
    write_model(exp / "final.mdl", trans_model, am_gmm=_am_gmm(trans_model.num_pdfs, seed=9))
    write_ark(tmp_path / "ali.ark", alis.items(), kind="int")
    write_gz(exp / "ali.1.gz", (tmp_path / "ali.ark").read_bytes())
    (exp / "num_jobs").write_text("1\n")
    return exp


def test_transition_id_dir_gives_pdf_and_phone_targets(tmp_path: Path) -> None:
    trans_model = _trans_model(THREE_STATE)
    frames = {"spk1-utt1": 12, "spk1-utt2": 20, "spk2-utt1": 7}
    alis = _transition_ids(trans_model, frames, seed=10)
    exp = _gmm_dir(tmp_path, trans_model, alis)
    pdf_of = np.array(trans_model.transition_id_to_pdf_array())
    targets = read_alignments(str(exp))
    assert {u: a.tolist() for u, a in targets.items()} == {u: pdf_of[a].tolist() for u, a in alis.items()}
    phones = read_alignments(str(exp), labels="phone")
    assert {u: a.tolist() for u, a in phones.items()} == {
        u: [trans_model.transition_id_to_phone(int(t)) for t in a] for u, a in alis.items()
    }

    # The checks are today's: coverage, lengths against utt2num_frames; classes from final.mdl.
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    (data / "utt2num_frames").write_text(
        "".join(f"{u} {n + (u == 'spk1-utt2')}\n" for u, n in frames.items())
    )
    usable, report = check_alignments(
        targets, read_frame_counts(str(data)), AlignmentCheckConfig(), source=str(exp)
    )
    assert report.usable and report.num_classes == trans_model.num_pdfs == 10
    assert report.fixed == ["spk1-utt2"] and len(usable["spk1-utt2"]) == 21
    _, report = check_alignments(
        phones, read_frame_counts(str(data)), AlignmentCheckConfig(labels="phone"), source=str(exp)
    )
    assert report.usable and report.num_classes == 5  # phones 1..4 and epsilon
    assert main(["check-alignments", str(exp), str(data)]) == 0


def test_transition_id_scp_in_a_gmm_dir(tmp_path: Path) -> None:
    trans_model = _trans_model(CHAIN)
    alis = _transition_ids(trans_model, {"a-1": 5, "a-2": 9}, seed=11)
    exp = tmp_path / "exp" / "chain_ali"
    exp.mkdir(parents=True)
    write_model(exp / "final.mdl", trans_model)
    scp = write_ark(exp / "ali.ark", alis.items(), kind="int")
    (exp / "ali.scp").write_text("".join(f"{u} {entry}\n" for u, entry in scp.items()))
    pdf_of = np.array(trans_model.transition_id_to_pdf_array())
    got = read_alignments(str(exp))
    assert {u: a.tolist() for u, a in got.items()} == {u: pdf_of[a].tolist() for u, a in alis.items()}
    # The same archive outside a GMM dir is read as it is.
    assert read_alignments(f"ark:{exp / 'ali.ark'}")["a-1"].tolist() == alis["a-1"].tolist()


@pytest.mark.parametrize("bad_id", [0, 999])
def test_transition_id_outside_the_model_is_one_error(tmp_path: Path, bad_id: int) -> None:
    trans_model = _trans_model(THREE_STATE)
    alis = _transition_ids(trans_model, {"b-1": 6, "b-2": 6}, seed=12)
    alis["b-2"][3] = bad_id
    exp = _gmm_dir(tmp_path, trans_model, alis)
    with pytest.raises(DataError) as err:
        read_alignments(str(exp))
    message = str(err.value)
    assert "\n" not in message
    assert str(exp / "ali.1.gz") in message and "utterance 'b-2'" in message
    assert f"transition-id {bad_id} is not in 1..{trans_model.num_transition_ids}" in message
    assert str(exp / "final.mdl") in message and "another model" in message


def test_unknown_labels_setting() -> None:
    with pytest.raises(ConfigError, match="labels='state'"):
        AlignmentCheckConfig(labels="state").check()
    with pytest.raises(ConfigError, match="pdf or phone"):
        read_alignments("ark:x.ark", labels="state")


def test_model_dataclass_from_parts() -> None:
    trans_model = _trans_model(ONE_PHONE)
    tuples = np.array(_tuples(trans_model), dtype=np.int32)
    model = KaldiModel(trans_model.topo, tuples, np.array(trans_model.log_probs, dtype=np.float32))
    assert model.num_pdfs == 1 and model.num_transition_ids == 2
    assert transition_id_to_pdf(model).tolist() == [0, 0, 0]
    assert transition_id_to_phone(model).tolist() == [0, 1, 1]
