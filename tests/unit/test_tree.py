"""Phonetic decision trees: stats, questions, building, Kaldi's binary ``tree`` format."""

from __future__ import annotations

import math
from pathlib import Path

import kaldi_hmm_gmm as khg
import numpy as np
import pytest

from asrkit.errors import ConfigError, DataError
from asrkit.gmm.tree import (
    ABSENT,
    Leaf,
    Questions,
    Root,
    Split,
    Table,
    Tree,
    TreeStats,
    accumulate_tree_stats,
    build_tree,
    make_questions,
    pdf_class_questions,
    read_phone_sets,
    read_roots,
    read_tree,
)

PHONES = [1, 2, 3, 4, 5]

TOPO_3STATE = """<Topology>
<TopologyEntry>
<ForPhones>
1 2 3 4 5
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.75 <Transition> 1 0.25 </State>
<State> 1 <PdfClass> 1 <Transition> 1 0.75 <Transition> 2 0.25 </State>
<State> 2 <PdfClass> 2 <Transition> 2 0.75 <Transition> 3 0.25 </State>
<State> 3 </State>
</TopologyEntry>
</Topology>
"""

# A small tree with every kind of node, and its Kaldi binary bytes written out by hand.
FIXED_TREE = Tree(
    3,
    1,
    Table(
        1,
        (
            None,
            Split(0, (2, 3), Leaf(0), Leaf(1)),
            Table(-1, (Leaf(2), Leaf(3), Leaf(4))),
            Split(-1, (0,), Leaf(5), Split(2, (1,), Leaf(6), Leaf(1))),
        ),
    ),
)
FIXED_TREE_BYTES = (
    b"\x00BContextDependency \x04\x03\x00\x00\x00\x04\x01\x00\x00\x00ToPdf "
    # TE key 1, size 4 (an unsigned int32: size byte -4)
    b"TE \x04\x01\x00\x00\x00\xfc\x04\x00\x00\x00( "
    b"NULL "
    # SE key 0, yes-set [2 3] as an integer vector (size byte, count, raw int32s)
    b"SE \x04\x00\x00\x00\x00\x04\x02\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00"
    b"{ CE \x04\x00\x00\x00\x00CE \x04\x01\x00\x00\x00} "
    b"TE \x04\xff\xff\xff\xff\xfc\x03\x00\x00\x00( CE \x04\x02\x00\x00\x00CE \x04\x03\x00\x00\x00"
    b"CE \x04\x04\x00\x00\x00) "
    b"SE \x04\xff\xff\xff\xff\x04\x01\x00\x00\x00\x00\x00\x00\x00{ CE \x04\x05\x00\x00\x00"
    b"SE \x04\x02\x00\x00\x00\x04\x01\x00\x00\x00\x01\x00\x00\x00{ CE \x04\x06\x00\x00\x00"
    b"CE \x04\x01\x00\x00\x00} } "
    b") EndContextDependency "
)


def _topology() -> khg.HmmTopology:
    topo = khg.HmmTopology()
    topo.read(TOPO_3STATE)
    return topo


def _kaldi_bytes(ctx_dep: khg.ContextDependency) -> bytes:
    return b"\0B" + np.array(ctx_dep.__getstate__()[0], dtype=np.int8).tobytes()


def _stats_from_frames(
    events: list[tuple[tuple[int, ...], int]], frames: list[np.ndarray], *, central: int = 1
) -> TreeStats:
    """TreeStats from the raw frames ``(n_i, D)`` of each event ``(phones, pdf_class)``."""
    return TreeStats(
        context_width=len(events[0][0]),
        central_position=central,
        phones=np.array([e[0] for e in events], dtype=np.int32),
        pdf_classes=np.array([e[1] for e in events], dtype=np.int32),
        counts=np.array([len(f) for f in frames], dtype=np.float64),
        sums=np.stack([f.sum(0) for f in frames]),
        sumsqs=np.stack([(f * f).sum(0) for f in frames]),
    )


def _frame_loglik(frames: np.ndarray) -> float:
    """sum_t log N(x_t; mean, var) under the ML diagonal Gaussian of ``frames``, term by term."""
    mean, var = frames.mean(0), frames.var(0)
    return float(-0.5 * (np.log(2 * math.pi * var) + (frames - mean) ** 2 / var).sum())


def _random_triphone_stats(seed: int, *, dim: int = 4) -> TreeStats:
    """Stats whose means depend on the central phone, the pdf-class and the left phone."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(6, 3, dim)) * 3
    events, frames = [], []
    for left in [0, *PHONES]:
        for centre in PHONES:
            for right in [0, *PHONES]:
                for pdf_class in range(3):
                    mean = base[centre, pdf_class] + (1.5 if left in (1, 2) else 0.0)
                    events.append(((left, centre, right), pdf_class))
                    frames.append(mean + rng.normal(size=(int(rng.integers(5, 30)), dim)))
    return _stats_from_frames(events, frames)


def test_first_split_is_the_planted_left_context_question_with_the_hand_computed_gain() -> None:
    rng = np.random.default_rng(0)
    events, frames = [], []
    for left in (1, 3, 4, 5):
        for right in PHONES:
            events.append(((left, 2, right), 0))
            # Left context {1, 3} vs {4, 5} moves the mean by 4 standard deviations; the rest is noise.
            frames.append(rng.normal(size=(40, 3)) + (2.0 if left in (1, 3) else -2.0))
    stats = _stats_from_frames(events, frames)
    questions = Questions(
        phone_sets=((1, 4), (3, 5), (1, 3), (1,), (2,), (3,), (4,), (5,), (1, 2, 3, 4, 5)),
        pdf_class_sets=(),
    )
    tree = build_tree(
        stats, roots=[(2,)], questions=questions, num_leaves=2, split_thresh=0.0, cluster_thresh=0.0
    )

    first = tree.splits[0]
    assert (first.key, first.values) == (0, (1, 3))
    yes = np.concatenate([f for (ph, _), f in zip(events, frames, strict=True) if ph[0] in (1, 3)])
    no = np.concatenate([f for (ph, _), f in zip(events, frames, strict=True) if ph[0] in (4, 5)])
    expected = _frame_loglik(yes) + _frame_loglik(no) - _frame_loglik(np.concatenate([yes, no]))
    assert first.gain == pytest.approx(expected, rel=1e-9)
    assert (first.yes_count, first.no_count) == (len(yes), len(no))
    assert tree.num_leaves == 2
    assert tree.lookup([1, 2, 5], 0) == tree.lookup([3, 2, 1], 0) != tree.lookup([4, 2, 5], 0)


def test_make_questions_clusters_the_planted_phone_groups() -> None:
    rng = np.random.default_rng(1)
    events, frames = [], []
    for centre in (1, 2, 3, 4):
        for pdf_class in range(3):
            events.append(((0, centre, 0), pdf_class))
            frames.append(rng.normal(size=(50, 3)) + (3.0 if centre in (1, 3) else -3.0))
    stats = _stats_from_frames(events, frames)

    questions = make_questions(stats, extra_questions=[(2, 3)], num_pdf_classes=3)

    assert questions.phone_sets[0] == (1, 2, 3, 4)
    assert {(1, 3), (2, 4), (1,), (2,), (3,), (4,)} <= set(questions.phone_sets)
    assert questions.phone_sets[-1] == (2, 3)
    assert questions.pdf_class_sets == pdf_class_questions(3) == ((0,), (0, 1))


def test_tree_bytes_are_pinned_and_kaldi_reads_them_back(tmp_path: Path) -> None:
    assert FIXED_TREE.to_bytes() == FIXED_TREE_BYTES
    assert Tree.from_bytes(FIXED_TREE_BYTES) == FIXED_TREE

    ctx_dep = FIXED_TREE.context_dependency()
    assert (ctx_dep.context_width, ctx_dep.central_position, ctx_dep.num_pdfs) == (3, 1, 7)
    assert _kaldi_bytes(ctx_dep) == FIXED_TREE_BYTES
    ctx_dep.write(False, str(tmp_path / "tree.txt"))
    assert (tmp_path / "tree.txt").read_text() == FIXED_TREE.to_text()
    for left in range(5):
        for centre in range(5):
            for right in range(5):
                for pdf_class in range(3):
                    ok, pdf = ctx_dep.compute([left, centre, right], pdf_class)
                    assert (pdf if ok else None) == FIXED_TREE.lookup([left, centre, right], pdf_class)


def test_tree_without_splits_is_kaldis_monophone_tree_byte_for_byte() -> None:
    phone2num_pdf_classes = [-1, 3, 3, 1, 2, 3]
    rng = np.random.default_rng(2)
    events = [((p,), c) for p in PHONES for c in range(phone2num_pdf_classes[p])]
    stats = _stats_from_frames(events, [rng.normal(size=(10, 2)) for _ in events], central=0)

    tree = build_tree(
        stats,
        roots=[Root((p,), shared=False, split=False) for p in PHONES],
        questions=make_questions(stats),
        num_leaves=100,
        phone2num_pdf_classes=phone2num_pdf_classes,
    )

    monophone = khg.monophone_context_dependency(PHONES, phone2num_pdf_classes)
    assert tree.to_bytes() == _kaldi_bytes(monophone)
    assert tree.num_leaves == monophone.num_pdfs == 12


def test_read_tree_loads_a_written_tree_and_rejects_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "exp" / "tree"
    FIXED_TREE.write(path)
    assert path.read_bytes() == FIXED_TREE_BYTES
    assert Tree.read(path) == FIXED_TREE
    ctx_dep = read_tree(path)
    assert ctx_dep.compute([1, 3, 1], 2) == (True, FIXED_TREE.lookup([1, 3, 1], 2))

    text = tmp_path / "tree.txt"
    FIXED_TREE.context_dependency().write(False, str(text))
    with pytest.raises(DataError, match=r"tree\.txt.*text form.*copy-tree --binary=true"):
        read_tree(text)
    truncated = tmp_path / "truncated"
    truncated.write_bytes(FIXED_TREE_BYTES[:-40])
    with pytest.raises(DataError, match=r"truncated.*not a valid Kaldi binary tree.*truncated or corrupt"):
        read_tree(truncated)
    with pytest.raises(DataError, match=r"missing.*cannot read the tree"):
        read_tree(tmp_path / "missing")


def test_leaf_stats_sum_the_events_of_each_leaf() -> None:
    stats = _random_triphone_stats(3)
    tree = build_tree(
        stats, roots=[(p,) for p in PHONES], questions=make_questions(stats), num_leaves=30, split_thresh=0.0
    )

    counts, means, variances = tree.leaf_stats(stats, var_floor=0.01)

    leaves = [tree.lookup(list(stats.phones[e]), int(stats.pdf_classes[e])) for e in range(stats.num_events)]
    assert counts.shape == (tree.num_leaves,) and means.shape == variances.shape == (tree.num_leaves, 4)
    assert counts.sum() == stats.counts.sum()
    for leaf in range(tree.num_leaves):
        mine = np.array([found == leaf for found in leaves])
        assert counts[leaf] == stats.counts[mine].sum() > 0
        mean = stats.sums[mine].sum(0) / counts[leaf]
        np.testing.assert_allclose(means[leaf], mean)
        np.testing.assert_allclose(
            variances[leaf], np.maximum(stats.sumsqs[mine].sum(0) / counts[leaf] - mean**2, 0.01)
        )


def _transition_ids(trans_model: khg.TransitionModel) -> dict[tuple[int, int, bool], int]:
    """(phone, hmm_state, is_self_loop) -> transition-id, for the 3-state topology."""
    out = {}
    for tid in range(1, trans_model.num_transition_ids + 1):
        phone, hmm_state = trans_model.tuples[trans_model.id2state[tid] - 1].__getstate__()[:2]
        out[(phone, hmm_state, trans_model.is_self_loop(tid))] = tid
    return out


def _alignment(
    tids: dict[tuple[int, int, bool], int], phones: list[int], durations: list[list[int]], *, reorder: bool
) -> list[int]:
    out = []
    for phone, per_state in zip(phones, durations, strict=True):
        for state, frames in enumerate(per_state):
            loops, forward = [tids[(phone, state, True)]] * (frames - 1), [tids[(phone, state, False)]]
            out += forward + loops if reorder else loops + forward
    return out


@pytest.mark.parametrize("reorder", [False, True])
def test_accumulate_tree_stats_gathers_each_frame_into_its_event(reorder: bool) -> None:
    topo = _topology()
    trans_model = khg.TransitionModel(
        khg.monophone_context_dependency(PHONES, topo.get_phone_to_num_pdf_classes()), topo
    )
    tids = _transition_ids(trans_model)
    rng = np.random.default_rng(4)
    utterances = [
        ([1, 3, 3, 2], [[2, 1, 1], [1, 3, 2], [1, 1, 1], [4, 1, 2]]),
        ([4, 3, 3, 1], [[1, 1, 1]] * 4),
    ]
    alignments, expected = [], {}
    for phones, durations in utterances:
        feats = rng.normal(size=(sum(map(sum, durations)), 4)).astype(np.float32)
        alignments.append((_alignment(tids, phones, durations, reorder=reorder), feats))
        frame = 0
        for s, phone in enumerate(phones):
            window = (phones[s - 1] if s > 0 else 0, phone, phones[s + 1] if s + 1 < len(phones) else 0)
            if phone == 1:  # CI: only the central phone is kept
                window = (ABSENT, 1, ABSENT)
            for pdf_class, frames in enumerate(durations[s]):
                count, total = expected.get((window, pdf_class), (0, 0.0))
                expected[(window, pdf_class)] = (
                    count + frames,
                    total + feats[frame : frame + frames].astype(float).sum(0),
                )
                frame += frames

    stats = accumulate_tree_stats(trans_model, alignments, ci_phones=[1])

    got = {
        (tuple(int(p) for p in stats.phones[e]), int(stats.pdf_classes[e])): (stats.counts[e], stats.sums[e])
        for e in range(stats.num_events)
    }
    assert got.keys() == expected.keys()
    for event, (count, total) in expected.items():
        assert got[event][0] == count
        np.testing.assert_allclose(got[event][1], total, rtol=1e-6)
    assert stats.event(0) == ((-1, 0), (1, 1))  # Kaldi's event: sorted pairs, context keys left out


def test_accumulate_tree_stats_rejects_broken_alignments() -> None:
    topo = _topology()
    trans_model = khg.TransitionModel(
        khg.monophone_context_dependency(PHONES, topo.get_phone_to_num_pdf_classes()), topo
    )
    good = _alignment(_transition_ids(trans_model), [2, 3], [[1, 2, 1], [1, 1, 1]], reorder=False)
    with pytest.raises(DataError, match=r"utterance #1.*does not end with a phone's final transition"):
        accumulate_tree_stats(trans_model, [(good, np.zeros((7, 2))), (good[:-1], np.zeros((6, 2)))])
    with pytest.raises(DataError, match=r"utterance #0: 7 transition-ids but features of shape \(5, 2\)"):
        accumulate_tree_stats(trans_model, [(good, np.zeros((5, 2)))])


def test_a_built_triphone_tree_makes_a_transition_model() -> None:
    topo = _topology()
    stats = _random_triphone_stats(5)
    roots = [Root((1,), shared=True, split=False), *(Root((p,)) for p in PHONES[1:])]

    tree = build_tree(stats, roots=roots, questions=make_questions(stats), num_leaves=20, split_thresh=0.0)

    trans_model = khg.TransitionModel(tree.context_dependency(), topo)
    assert trans_model.num_pdfs == tree.num_leaves > len(PHONES)
    assert sorted(set(trans_model.transition_id_to_pdf_array()[1:])) == list(range(tree.num_leaves))
    # The not-split root (phone 1) keeps one pdf for every context and state.
    assert len({tree.lookup([a, 1, b], c) for a in range(6) for b in range(6) for c in range(3)}) == 1


def test_clustering_merges_leaves_only_within_a_root() -> None:
    stats = _random_triphone_stats(6)
    questions = make_questions(stats)
    roots = [(p,) for p in PHONES]

    def build(cluster_thresh: float | None) -> Tree:
        return build_tree(
            stats,
            roots=roots,
            questions=questions,
            num_leaves=40,
            split_thresh=0.0,
            cluster_thresh=cluster_thresh,
        )

    unclustered, default, everything = build(0.0), build(None), build(1e12)
    assert unclustered.num_leaves == len(unclustered.splits) + len(roots) == 40
    assert len(roots) < default.num_leaves <= 40
    assert everything.num_leaves == len(roots)
    # Merged leaves never span roots: each phone keeps its own pdfs.
    pdfs = [
        {default.lookup([a, p, b], c) for a in range(6) for b in range(6) for c in range(3)} for p in PHONES
    ]
    assert all(pdfs[i].isdisjoint(pdfs[j]) for i in range(5) for j in range(i + 1, 5))


def test_build_tree_rejects_bad_roots() -> None:
    stats = _random_triphone_stats(7)
    questions = make_questions(stats)
    with pytest.raises(ConfigError, match=r"central phones \[5\] of the stats are in no root"):
        build_tree(stats, roots=[(1, 2), (3, 4)], questions=questions, num_leaves=10)
    with pytest.raises(ConfigError, match=r"phone 2 is in roots #0 and #1"):
        build_tree(stats, roots=[(1, 2), (2, 3, 4, 5)], questions=questions, num_leaves=10)
    with pytest.raises(ConfigError, match=r"'not-shared split' is not supported"):
        Root((1,), shared=False, split=True)


def test_read_roots_and_phone_sets(tmp_path: Path) -> None:
    roots = tmp_path / "roots.int"
    roots.write_text("shared split 2 3 4\nnot-shared not-split 1\n\n")
    assert read_roots(roots) == [Root((2, 3, 4)), Root((1,), shared=False, split=False)]
    sets = tmp_path / "sets.int"
    sets.write_text("1\n2 3 4\n")
    assert read_phone_sets(sets) == [(1,), (2, 3, 4)]
    roots.write_text("shared 2 3\n")
    with pytest.raises(DataError, match=r"roots\.int:1: expected 'shared\|not-shared split\|not-split"):
        read_roots(roots)


def test_tree_stats_merge_and_save(tmp_path: Path) -> None:
    stats = _random_triphone_stats(8)
    half = stats.num_events // 2
    parts = [
        TreeStats(
            3, 1, stats.phones[s], stats.pdf_classes[s], stats.counts[s], stats.sums[s], stats.sumsqs[s]
        )
        for s in (slice(0, half + 10), slice(half, None))
    ]
    merged = TreeStats.merge(parts)
    tree = build_tree(stats, roots=[(p,) for p in PHONES], questions=make_questions(stats), num_leaves=10)
    doubled = np.isin(np.arange(stats.num_events), np.arange(half, half + 10))
    expected_counts = np.bincount(tree.map_events(stats), weights=stats.counts * (1 + doubled))
    np.testing.assert_allclose(tree.leaf_stats(merged)[0], expected_counts)

    stats.save(tmp_path / "treeacc.npz")
    loaded = TreeStats.load(tmp_path / "treeacc.npz")
    np.testing.assert_array_equal(loaded.sums, stats.sums)
    np.testing.assert_array_equal(loaded.phones, stats.phones)
