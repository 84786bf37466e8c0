"""HCLG building (:mod:`asrkit.gmm.graph`) and decoding against it (:mod:`asrkit.decoding.wfst`).

The decoder is checked against two brute forces on a tiny lexicon and bigram LM:

- over the graph itself: an exact Viterbi over every path of HCLG, in Python;
- over the model, without the graph: every word sequence that fits in the frames, every
  pronunciation and optional silence, every HMM state path (a Viterbi over the phone chain),
  with the LM (backoff included), silence and transition costs computed from the ARPA text,
  the lexicon and the topology. This checks the graph construction too (context, disambiguation
  symbols, self-loop scaling), up to the 1/1024 weight quantization of Kaldi's
  ``fstminimizeencoded``.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import kaldi_hmm_gmm as khg
import kaldifst
import numpy as np
import pytest

from asrkit.decoding.wfst import NEVER, SweepJournal, WfstDecoder, first_pass_words, pdf_log_likelihoods
from asrkit.errors import ConfigError, DataError
from asrkit.gmm.graph import (
    _build_hclg,
    check_g,
    load_graph_dir,
    make_g,
    make_graph,
    make_hclg,
)
from asrkit.gmm.lang import Lang, prepare_lang
from asrkit.gmm.tree import Leaf, Split, Table, Tree

# HI and HIGH are homophones, both a prefix of HIKE; KAY has two pronunciations.
LEXICON = {
    "HI": [["h", "ay"]],
    "HIGH": [["h", "ay"]],
    "HIKE": [["h", "ay", "k"]],
    "KAY": [["k", "ay"], ["k", "ey"]],
}
VOCAB = sorted(LEXICON)
SIL_PROB = 0.5

NGRAMS = [
    ("1", "-0.8", "</s>", ""),
    ("1", "-99", "<s>", "-0.3"),
    ("1", "-0.5", "HI", "-0.2"),
    ("1", "-0.7", "HIGH", "-0.1"),
    ("1", "-0.9", "HIKE", "-0.25"),
    ("1", "-0.6", "KAY", "-0.15"),
    ("1", "-1.2", "<unk>", "-0.1"),
    ("2", "-0.2", "<s> HI", ""),
    ("2", "-0.4", "HI KAY", ""),
    ("2", "-0.3", "KAY </s>", ""),
    ("2", "-0.5", "HIGH <unk>", ""),
    ("2", "-0.35", "HIKE HIGH", ""),
    ("2", "-1.5", "KAY KAY", ""),  # dearer than backing off: G's backoff path wins
]


def arpa_text(ngrams: list[tuple[str, str, str, str]]) -> str:
    counts = {o: sum(1 for n in ngrams if n[0] == o) for o in ("1", "2")}
    lines = ["\\data\\", f"ngram 1={counts['1']}", f"ngram 2={counts['2']}", ""]
    for order in ("1", "2"):
        lines.append(f"\\{order}-grams:")
        lines += [f"{p} {words} {bo}".rstrip() for o, p, words, bo in ngrams if o == order]
        lines.append("")
    return "\n".join(lines + ["\\end\\", ""])


def lm_cost(words: tuple[str, ...]) -> float:
    """``-ln P(words </s> | <s>)`` of the bigram, as G computes it: an n-gram's own arc or the
    backoff path, whichever is cheaper (tropical semiring)."""
    prob = {tuple(w.split()): -float(p) * math.log(10) for _, p, w, _ in NGRAMS}
    backoff = {tuple(w.split()): -float(b) * math.log(10) for _, _, w, b in NGRAMS if b}
    total, history = 0.0, "<s>"
    for word in (*words, "</s>"):
        cost = backoff.get((history,), 0.0) + prob[(word,)]
        total += min(cost, prob.get((history, word), math.inf))
        history = word
    return total


@dataclass
class Setup:
    lang: Lang
    ctx_dep: khg.ContextDependency
    trans_model: khg.TransitionModel
    hclg: kaldifst.StdVectorFst
    disambig_tids: list[int]
    arpa: Path


def _setup(root: Path, tree: Tree | None) -> Setup:
    lang = prepare_lang(LEXICON, root / "lang", sil_prob=SIL_PROB)
    topo = lang.topology()
    if tree is None:
        ctx_dep = khg.monophone_context_dependency(lang.real_phones, topo.get_phone_to_num_pdf_classes())
    else:
        ctx_dep = tree.context_dependency()
    trans_model = khg.TransitionModel(ctx_dep, topo)
    arpa = root / "lm.arpa"
    arpa.write_text(arpa_text(NGRAMS))
    g = make_g(arpa, lang)
    hclg, tids = _build_hclg(lang, ctx_dep, trans_model, g, self_loop_scale=0.1, transition_scale=1.0)
    return Setup(lang, ctx_dep, trans_model, hclg, tids, arpa)


def _triphone_tree(lang: Lang) -> Tree:
    """A context-dependent tree: ``ay`` split on its left phone, ``k`` on whether it ends the
    utterance, the others monophone-like; every leaf its own pdf."""
    p = lang.phones
    pdf = itertools.count()

    def states(n: int) -> Table:
        return Table(-1, tuple(Leaf(next(pdf)) for _ in range(n)))

    children: list = [None] * (max(lang.real_phones) + 1)
    children[p["SIL"]] = states(5)
    children[p["ay"]] = Split(0, (p["h"],), states(3), states(3))
    children[p["ey"]] = states(3)
    children[p["h"]] = states(3)
    children[p["k"]] = Split(2, (0,), states(3), states(3))
    return Tree(3, 1, Table(1, tuple(children)))


@pytest.fixture(scope="module")
def mono(tmp_path_factory) -> Setup:
    return _setup(tmp_path_factory.mktemp("mono"), None)


@pytest.fixture(scope="module")
def tri(tmp_path_factory) -> Setup:
    root = tmp_path_factory.mktemp("tri")
    lang = prepare_lang(LEXICON, root / "lang", sil_prob=SIL_PROB)
    return _setup(root, _triphone_tree(lang))


def _arcs(fst: kaldifst.StdVectorFst):
    for state in range(fst.num_states):
        for arc in kaldifst.ArcIterator(fst, state):
            yield state, arc


# --- brute force over the graph ------------------------------------------------------------------


def graph_viterbi(
    hclg: kaldifst.StdVectorFst, frame_scores: np.ndarray, *, word_penalty: float = 0.0
) -> tuple[float, tuple[int, ...]]:
    """Best ``sum frame_scores[t, tid - 1] - graph cost - penalty * words`` over every path of
    ``hclg`` that consumes all frames and ends in a final state, and its word ids."""
    arcs = [[] for _ in range(hclg.num_states)]
    for state, arc in _arcs(hclg):
        arcs[state].append((arc.ilabel, arc.olabel, arc.weight.value, arc.nextstate))

    def relax(best: dict[int, tuple[float, tuple[int, ...]]]) -> None:
        # Input-epsilon arcs, until nothing improves (the graph has no epsilon cycles).
        changed = True
        while changed:
            changed = False
            for state, (score, words) in list(best.items()):
                for ilabel, olabel, cost, dst in arcs[state]:
                    if ilabel:
                        continue
                    cand = score - cost - (word_penalty if olabel else 0.0)
                    if cand > best.get(dst, (-math.inf, ()))[0] + 1e-12:
                        best[dst] = (cand, words + ((olabel,) if olabel else ()))
                        changed = True

    best = {hclg.start: (0.0, ())}
    relax(best)
    for t in range(frame_scores.shape[0]):
        nxt: dict[int, tuple[float, tuple[int, ...]]] = {}
        for state, (score, words) in best.items():
            for ilabel, olabel, cost, dst in arcs[state]:
                if not ilabel:
                    continue
                cand = score - cost + float(frame_scores[t, ilabel - 1]) - (word_penalty if olabel else 0.0)
                if cand > nxt.get(dst, (-math.inf, ()))[0]:
                    nxt[dst] = (cand, words + ((olabel,) if olabel else ()))
        best = nxt
        relax(best)
    finals = [
        (s - hclg.final(q).value, w) for q, (s, w) in best.items() if math.isfinite(hclg.final(q).value)
    ]
    return max(finals)


# --- brute force over the model (no graph) -------------------------------------------------------


def model_brute_force(
    setup: Setup, scaled: np.ndarray, *, self_loop_scale: float = 0.1, max_words: int = 2
) -> list[tuple[float, tuple[str, ...]]]:
    """Every word sequence of up to ``max_words`` words with its best score
    ``sum_t scaled[t, pdf_t] - (LM + silence + transition costs)``, best first.

    Args:
        scaled: ``(T, num_pdfs)`` acoustic scale x log-likelihoods.
    """
    lang, ctx = setup.lang, setup.ctx_dep
    topo = lang.topology()
    width, central = ctx.context_width, ctx.central_position
    sil = lang.phones["SIL"]
    boundary = -math.log(SIL_PROB)  # both choices cost ln 2 at sil_prob 0.5
    assert boundary == -math.log(1 - SIL_PROB)
    cache: dict[tuple[int, ...], float] = {}

    def hmm_score(phones: tuple[int, ...]) -> float:
        """Viterbi over the chain of the phones' HMMs, Kaldi's scaled transition costs."""
        if phones in cache:
            return cache[phones]
        pdfs: list[int] = []
        trans: list[list[tuple[int, float]]] = []  # per state: (next state or -1 = end, cost)
        entry = 0
        for i, phone in enumerate(phones):
            window = [
                phones[i + k - central] if 0 <= i + k - central < len(phones) else 0 for k in range(width)
            ]
            hmm = topo.topology_for_phone(phone)
            last = len(hmm) - 1
            for s in range(last):
                ok, pdf = ctx.compute(window, hmm[s].forward_pdf_class)
                assert ok
                pdfs.append(pdf)
                loop = dict(hmm[s].transitions).get(s, 0.0)
                out = []
                for dst, prob in hmm[s].transitions:
                    if dst == s:
                        out.append((entry + s, -self_loop_scale * math.log(prob)))
                        continue
                    cost = -math.log(prob / (1 - loop)) - self_loop_scale * math.log(1 - loop)
                    nxt = entry + dst if dst != last else (entry + last if i + 1 < len(phones) else -1)
                    out.append((nxt, cost))
                trans.append(out)
            entry += last
        score = np.full(len(pdfs), -math.inf)
        score[0] = scaled[0, pdfs[0]]
        for t in range(1, scaled.shape[0]):
            new = np.full(len(pdfs), -math.inf)
            for j, out in enumerate(trans):
                for dst, cost in out:
                    if dst >= 0:
                        new[dst] = max(new[dst], score[j] - cost + scaled[t, pdfs[dst]])
            score = new
        ends = [score[j] - cost for j, out in enumerate(trans) for dst, cost in out if dst < 0]
        cache[phones] = max(ends) if ends else -math.inf
        return cache[phones]

    results = []
    for n in range(max_words + 1):
        for words in itertools.product(VOCAB, repeat=n):
            best = -math.inf
            for prons in itertools.product(*(LEXICON[w] for w in words)):
                for sils in itertools.product((False, True), repeat=n + 1):
                    phones = [sil] if sils[0] else []
                    for pron, after in zip(prons, sils[1:], strict=True):
                        phones += [lang.phones[p] for p in pron] + ([sil] if after else [])
                    if phones:
                        best = max(best, hmm_score(tuple(phones)) - boundary * (n + 1))
            results.append((best - lm_cost(words), words))
    return sorted(results, reverse=True)


def _tid_scores(setup: Setup, scaled: np.ndarray) -> np.ndarray:
    return scaled[:, np.asarray(setup.trans_model.transition_id_to_pdf_array())[1:]]


def _decoder(setup: Setup, **settings) -> WfstDecoder:
    settings = {"beam": 1e4, "lattice_beam": 1e4, "max_active": 1_000_000, **settings}
    return WfstDecoder(setup.hclg, setup.trans_model, words=setup.lang.word_names, **settings)


T = 14  # two words fit (each needs 6 frames or more), three do not (18 or more)


# --- the graph -----------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["mono", "tri"])
def test_hclg_has_transition_ids_in_and_words_out(which: str, request) -> None:
    setup: Setup = request.getfixturevalue(which)
    num_tids = setup.trans_model.num_transition_ids
    assert setup.hclg.num_states > 0 and setup.hclg.start >= 0
    assert setup.disambig_tids and min(setup.disambig_tids) > num_tids
    words = {setup.lang.words[w] for w in VOCAB}
    ilabels = {arc.ilabel for _, arc in _arcs(setup.hclg)}
    olabels = {arc.olabel for _, arc in _arcs(setup.hclg)} - {0}
    assert max(ilabels) <= num_tids and 0 < min(ilabels - {0})
    assert olabels == words
    assert setup.hclg.is_ilabel_sorted


@pytest.mark.parametrize("which", ["mono", "tri"])
def test_every_word_sequence_of_the_lm_is_in_the_graph(which: str, request) -> None:
    setup: Setup = request.getfixturevalue(which)
    hclg = kaldifst.StdVectorFst(setup.hclg)
    kaldifst.arcsort(hclg, sort_type="olabel")
    for n in range(3):
        for words in itertools.product(VOCAB, repeat=n):
            acceptor = kaldifst.make_linear_acceptor([setup.lang.words[w] for w in words])
            assert kaldifst.compose(hclg, acceptor).num_states > 0, words


# --- decoding against the brute forces -----------------------------------------------------------


@pytest.mark.parametrize("which", ["mono", "tri"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_decoder_finds_the_brute_force_best_path(which: str, seed: int, request) -> None:
    setup: Setup = request.getfixturevalue(which)
    rng = np.random.default_rng(seed)
    loglikes = rng.normal(0.0, 10.0, size=(T, setup.trans_model.num_pdfs)).astype(np.float32)
    decoder = _decoder(setup)
    result = decoder.decode_best(loglikes, utt=f"u{seed}")
    assert result.reached_final and decoder.num_partial == 0
    assert len(result.alignment) == T

    scaled = 0.1 * loglikes.astype(np.float64)
    graph_score, graph_words = graph_viterbi(setup.hclg, _tid_scores(setup, scaled))
    assert result.score == pytest.approx(graph_score, abs=1e-3)
    assert tuple(result.word_ids) == graph_words
    # The path's costs add up: acoustic cost from its alignment.
    pdfs = np.asarray(setup.trans_model.transition_id_to_pdf_array())[result.alignment]
    assert -scaled[np.arange(T), pdfs].sum() == pytest.approx(result.acoustic_cost, abs=1e-3)

    ranked = model_brute_force(setup, scaled)
    best, words = ranked[0]
    # HCLG's weights are quantized to 1/1024 (fstminimizeencoded): a few arcs' worth of slack,
    # and a word sequence within it of the best is as good an answer.
    assert result.score == pytest.approx(best, abs=5e-3)
    assert tuple(result.words) in [w for s, w in ranked if s > best - 1e-2]
    assert decoder.decode(loglikes) == result.words


@pytest.mark.parametrize("which", ["mono", "tri"])
def test_lattice_rescoring_matches_the_brute_force_at_every_weight(which: str, request) -> None:
    setup: Setup = request.getfixturevalue(which)
    rng = np.random.default_rng(7)
    loglikes = rng.normal(0.0, 3.0, size=(T, setup.trans_model.num_pdfs)).astype(np.float32)
    decoder = _decoder(setup, acoustic_scale=0.1)
    lattice = decoder.decode_lattice(loglikes, utt="lat")
    weights, penalties = [1.0, 3.0, 10.0, 30.0], [-2.0, 0.0, 3.0]
    paths = lattice.best_paths(weights, word_penalties=penalties)
    words_at = decoder.decode_with_scales(loglikes, weights, word_penalties=penalties)
    seen = set()
    for lmwt, wip in itertools.product(weights, penalties):
        score, ids = graph_viterbi(setup.hclg, _tid_scores(setup, loglikes / lmwt), word_penalty=wip)
        got_ids, cost = paths[(lmwt, wip)]
        assert cost == pytest.approx(-score, abs=1e-3), (lmwt, wip)
        assert tuple(got_ids) == ids, (lmwt, wip)
        assert words_at[(lmwt, wip)] == [setup.lang.word_names[i] for i in ids]
        seen.add(ids)
        if wip == 0.0:
            # The same as searching with acoustic scale 1 / lmwt.
            again = _decoder(setup, acoustic_scale=1.0 / lmwt).decode_best(loglikes)
            assert tuple(again.word_ids) == ids
    assert len(seen) > 1, "the sweep should change the answer on this data"


def _noise(setup: Setup, *, seed: int, utts: int) -> dict[str, np.ndarray]:
    """Random log-likelihoods of ``utts`` utterances of ``T``, ``T + 1``, ... frames."""
    rng = np.random.default_rng(seed)
    return {
        f"u{k}": rng.normal(0.0, 3.0, size=(T + k, setup.trans_model.num_pdfs)).astype(np.float32)
        for k in range(utts)
    }


def test_sweep_in_two_jobs_equals_one_utterance_at_a_time(tri: Setup) -> None:
    scores = _noise(tri, seed=11, utts=5)
    scores["short"] = np.zeros((2, tri.trans_model.num_pdfs), dtype=np.float32)  # reaches no final state
    weights, penalties = [2.0, 10.0], [0.0, 1.0]
    decoder = _decoder(tri)
    swept = decoder.sweep(scores, weights, word_penalties=penalties, nj=2)
    assert list(swept) == list(scores)
    assert decoder.num_decoded == 6 and decoder.num_partial == 1
    alone = _decoder(tri)
    for utt, loglikes in scores.items():
        assert swept[utt] == alone.decode_with_scales(loglikes, weights, word_penalties=penalties, utt=utt)


def test_a_stopped_sweep_goes_on_from_its_journal(tri: Setup, tmp_path: Path, monkeypatch) -> None:
    scores = _noise(tri, seed=13, utts=6)
    weights, penalties = [2.0, 10.0], [0.0, 1.0]
    whole = _decoder(tri).sweep(scores, weights, word_penalties=penalties)
    path = tmp_path / "decode_dev" / "sweep.jsonl"

    def journal() -> SweepJournal:
        return SweepJournal(path, {"graph": "HCLG.fst"})

    searched: list[str] = []
    real = WfstDecoder.decode_with_scales

    def stop_at_u3(self, loglikes, lm_weights, *, word_penalties=(0.0,), utt="?"):
        if utt == "u3":
            raise KeyboardInterrupt  # the stop, mid-set
        searched.append(utt)
        return real(self, loglikes, lm_weights, word_penalties=word_penalties, utt=utt)

    monkeypatch.setattr(WfstDecoder, "decode_with_scales", stop_at_u3)
    with pytest.raises(KeyboardInterrupt):
        _decoder(tri).sweep(scores, weights, word_penalties=penalties, journal=journal())
    assert searched == ["u0", "u1", "u2"] and path.is_file()
    with open(path, "a") as f:
        f.write('{"utt":"u3","digest":"')  # a line cut short by the stop

    def counting(self, loglikes, lm_weights, *, word_penalties=(0.0,), utt="?"):
        searched.append(utt)
        return real(self, loglikes, lm_weights, word_penalties=word_penalties, utt=utt)

    monkeypatch.setattr(WfstDecoder, "decode_with_scales", counting)
    searched.clear()
    changed = dict(scores, u1=scores["u1"] + 0.5)  # u1's scores changed (a retrained model)
    again = _decoder(tri).sweep(changed, weights, word_penalties=penalties, journal=journal())
    assert searched == ["u1", "u3", "u4", "u5"]
    assert list(again) == list(scores) and not path.exists()  # removed once whole
    assert {u: w for u, w in again.items() if u != "u1"} == {u: w for u, w in whole.items() if u != "u1"}
    assert again["u1"] == _decoder(tri).sweep({"u1": changed["u1"]}, weights, word_penalties=penalties)["u1"]
    # Another grid starts the journal afresh: nothing from the old one is used.
    monkeypatch.setattr(WfstDecoder, "decode_with_scales", stop_at_u3)
    searched.clear()
    with pytest.raises(KeyboardInterrupt):
        _decoder(tri).sweep(scores, weights, word_penalties=penalties, journal=journal())
    monkeypatch.setattr(WfstDecoder, "decode_with_scales", counting)
    searched.clear()
    other = _decoder(tri).sweep(scores, [3.0], word_penalties=[0.0], journal=journal())
    assert searched == list(scores) and other == _decoder(tri).sweep(scores, [3.0])


def test_forked_jobs_share_one_journal(tri: Setup, tmp_path: Path, monkeypatch) -> None:
    scores = _noise(tri, seed=14, utts=5)
    whole = _decoder(tri).sweep(scores, [2.0])
    journal = SweepJournal(tmp_path / "sweep.jsonl", {})
    journal.begin(_decoder(tri), [2.0], [0.0])
    for utt in ("u0", "u1"):
        journal.add(utt, scores[utt], whole[utt])
    monkeypatch.setattr(SweepJournal, "done", lambda self: None)  # keep it, to read it
    decoder = _decoder(tri)
    assert decoder.sweep(scores, [2.0], nj=2, journal=journal) == whole
    assert decoder.num_decoded == 3  # the other three, in two forked jobs
    lines = (tmp_path / "sweep.jsonl").read_text().splitlines()
    assert len(lines) == 6 and sorted(json.loads(line)["utt"] for line in lines[1:]) == list(scores)
    assert journal.finished(scores) == whole


def test_best_words_and_the_first_pass_equal_the_lattice_at_their_point(tri: Setup) -> None:
    scores = _noise(tri, seed=12, utts=6)
    weights, penalties = [2.0, 10.0], [0.0, 1.5]
    swept = _decoder(tri).sweep(scores, weights, word_penalties=penalties)
    for weight in weights:
        decoder = _decoder(tri)
        best = decoder.best_words(scores, weight, nj=2)
        assert list(best) == list(scores) and decoder.num_decoded == len(scores)
        assert best == {utt: swept[utt][(weight, 0.0)] for utt in scores}, weight
        # The first pass: the best path search without a penalty, the lattice with one.
        for penalty in penalties:
            first = first_pass_words(_decoder(tri), scores, (weight, penalty))
            assert first == {utt: " ".join(swept[utt][(weight, penalty)]) for utt in scores}
    assert any(swept[u][(2.0, 0.0)] != swept[u][(10.0, 0.0)] for u in scores), "the weight should matter"
    with pytest.raises(ConfigError, match="LM weight 0"):
        _decoder(tri).best_words(scores, 0.0)


def test_utterance_that_reaches_no_final_state_gives_partial_output(mono: Setup, caplog) -> None:
    decoder = _decoder(mono)
    loglikes = np.zeros((2, mono.trans_model.num_pdfs), dtype=np.float32)  # no word fits in 2 frames
    with caplog.at_level(logging.WARNING):
        result = decoder.decode_best(loglikes, utt="short")
    assert not result.reached_final and decoder.num_partial == 1
    assert "short" in caplog.text and "partial" in caplog.text
    decoder.decode_lattice(loglikes, utt="short2")
    assert decoder.num_partial == 2 and decoder.num_decoded == 2


def test_decoder_rejects_mismatched_log_likelihoods(mono: Setup) -> None:
    decoder = _decoder(mono)
    with pytest.raises(DataError, match=r"utterance bad: .*shape \(5, 3\)"):
        decoder.decode(np.zeros((5, 3), dtype=np.float32), utt="bad")
    loglikes = np.zeros((5, mono.trans_model.num_pdfs), dtype=np.float32)
    loglikes[2, 1] = np.nan
    with pytest.raises(DataError, match="frame 2"):
        decoder.decode(loglikes, utt="nan")


def test_pdf_log_likelihoods_subtract_priors_and_floor_rare_pdfs() -> None:
    log_post = np.log(np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]], dtype=np.float32))
    log_prior = np.log(np.array([0.6, 0.4, 1e-12]))
    out = pdf_log_likelihoods(log_post, log_prior, prior_floor=1e-10)
    assert out.dtype == np.float32 and out.shape == (2, 3)
    np.testing.assert_allclose(out[:, :2], log_post[:, :2] - log_prior[:2], rtol=1e-6)
    assert (out[:, 2] == NEVER).all()
    with pytest.raises(DataError, match="log-priors of shape"):
        pdf_log_likelihoods(log_post, log_prior[:2])
    # Weighted priors: 0 leaves the posteriors, 0.5 divides by the priors' square roots; the
    # floor still looks at the priors themselves.
    bare = pdf_log_likelihoods(log_post, log_prior, prior_scale=0.0)
    np.testing.assert_allclose(bare[:, :2], log_post[:, :2], rtol=1e-6)
    half = pdf_log_likelihoods(log_post, log_prior, prior_scale=0.5)
    np.testing.assert_allclose(half[:, :2], log_post[:, :2] - 0.5 * log_prior[:2], rtol=1e-6)
    assert (half[:, 2] == NEVER).all()


# --- G, errors, graph dirs -----------------------------------------------------------------------


def test_arpa_words_outside_the_lexicon_are_skipped_with_a_warning(
    mono: Setup, tmp_path: Path, caplog
) -> None:
    with caplog.at_level(logging.WARNING):
        g = make_g(mono.arpa, mono.lang)
    assert "2 n-gram(s) skipped" in caplog.text and "<unk> x2" in caplog.text
    clean = tmp_path / "clean.arpa"
    clean.write_text(arpa_text([n for n in NGRAMS if "<unk>" not in n[2]]))
    assert str(g) == str(make_g(clean, mono.lang))
    labels = {arc.ilabel for _, arc in _arcs(g)} | {arc.olabel for _, arc in _arcs(g)}
    assert labels <= {0, mono.lang.words["#0"]} | {mono.lang.words[w] for w in VOCAB}
    check_g(g, mono.lang)


def test_lm_that_shares_no_word_with_the_lexicon_is_an_error(mono: Setup, tmp_path: Path) -> None:
    arpa = tmp_path / "other.arpa"
    arpa.write_text(arpa_text([("1", "-0.5", "</s>", ""), ("1", "-99", "<s>", ""), ("1", "-0.3", "FOO", "")]))
    with pytest.raises(DataError, match="share no words"):
        make_g(arpa, mono.lang)


def test_malformed_arpa_is_an_error(mono: Setup, tmp_path: Path) -> None:
    arpa = tmp_path / "bad.arpa"
    arpa.write_text("\\data\\\nngram 1=1\n\n\\1-grams:\n-0.5\n\n\\end\\\n")
    with pytest.raises(DataError, match=r"bad.arpa:5: a 1-gram needs"):
        make_g(arpa, mono.lang)
    with pytest.raises(DataError, match="cannot read the ARPA LM"):
        make_g(tmp_path / "missing.arpa", mono.lang)
    (tmp_path / "lm.DMP").write_bytes(b"\x00\xff\xfe binary")
    with pytest.raises(DataError, match="not UTF-8 text"):
        make_g(tmp_path / "lm.DMP", mono.lang)


def test_graph_that_accepts_nothing_is_an_error(mono: Setup) -> None:
    g = kaldifst.StdVectorFst()
    g.start = g.add_state()
    end = g.add_state()
    g.set_final(end, 0.0)
    g.add_arc(g.start, kaldifst.StdArc(99, 99, 0.0, end))  # a word L does not know
    with pytest.raises(DataError, match="is empty"):
        make_hclg(mono.lang, mono.ctx_dep, mono.trans_model, g)
    with pytest.raises(DataError, match="not a word"):
        check_g(g, mono.lang)


def test_graph_dir_round_trip(mono: Setup, tmp_path: Path) -> None:
    out = tmp_path / "exp" / "graph"
    graph = make_graph(mono.lang, mono.ctx_dep, mono.trans_model, mono.arpa, out)
    assert sorted(p.name for p in out.iterdir()) == [
        "HCLG.fst",
        "disambig_tid.int",
        "num_pdfs",
        "phones",
        "phones.txt",
        "words.txt",
    ]
    again = make_graph(mono.lang, mono.ctx_dep, mono.trans_model, mono.arpa, out)  # replaces the dir
    assert sorted(p.name for p in out.parent.iterdir()) == ["graph"]
    loaded = load_graph_dir(out)
    assert str(loaded.hclg) == str(graph.hclg) == str(again.hclg) == str(mono.hclg)
    assert loaded.words == mono.lang.words and loaded.phones == mono.lang.phones
    assert loaded.disambig_tids == mono.disambig_tids
    assert loaded.num_pdfs == mono.trans_model.num_pdfs
    loglikes = np.random.default_rng(5).normal(0, 10, (T, loaded.num_pdfs)).astype(np.float32)
    decoder = WfstDecoder.from_graph_dir(loaded, mono.trans_model, beam=1e4, max_active=1_000_000)
    assert decoder.decode(loglikes) == _decoder(mono).decode(loglikes)
    # Kaldi's own graph dirs hold a ConstFst.
    kaldifst.StdConstFst(mono.hclg).write(str(out / "HCLG.fst"))
    assert str(load_graph_dir(out).hclg) == str(mono.hclg)
    (out / "HCLG.fst").unlink()
    with pytest.raises(DataError, match="HCLG.fst: not found"):
        load_graph_dir(out)
