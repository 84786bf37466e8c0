"""Long utterances are decoded piece by piece (memory bounded by a piece), cut at their
quietest frames into pieces whose outputs join into the whole's."""

from __future__ import annotations

import numpy as np

from asrkit.decoding.recognizer import cut_points


def test_pieces_are_bounded_multiples_of_the_subsampling_cut_where_it_is_quiet() -> None:
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(1000, 8)).astype(np.float32) + 5.0
    quiet = [290, 560, 830]  # one quiet frame in the last quarter of each window of 300
    for q in quiet:
        feats[q - 1 : q + 2] -= 20.0
    bounds = cut_points(feats, most=300, multiple=3)
    assert bounds[0] == 0 and bounds[-1] == 1000
    sizes = np.diff(bounds)
    assert (sizes <= 300).all() and (sizes[:-1] % 3 == 0).all()
    for cut, q in zip(bounds[1:-1], quiet, strict=False):
        assert abs(cut - q) <= 3, (bounds, quiet)  # at the quiet frame, rounded to the subsampling


def test_a_short_utterance_is_one_piece() -> None:
    assert cut_points(np.zeros((300, 4), dtype=np.float32), most=300, multiple=3) == [0, 300]
    assert cut_points(np.zeros((0, 4), dtype=np.float32), most=300) == [0, 0]
