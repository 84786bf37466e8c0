"""``asrkit check-alignments ALI FEATS``: do Kaldi alignments fit the features?"""

from __future__ import annotations

import argparse

from asrkit.targets.alignments import (
    AlignmentCheckConfig,
    check_alignments,
    read_alignments,
    read_frame_counts,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    defaults = AlignmentCheckConfig()
    parser = subparsers.add_parser(
        "check-alignments",
        help="check Kaldi alignments against feature frame counts",
        description="Read frame-level alignments (int-vector tables) and the features they "
        "label, and report utterances checked, frames, classes seen, and every mismatch: "
        "feature utterances without alignment, alignments without features (ignored), "
        "lengths off ceil(frames / subsampling factor) within the tolerance (fixed) or beyond "
        "it, and labels outside [0, num_classes). Exits 0 when the alignments can be used "
        "for training, 2 otherwise.",
    )
    parser.add_argument(
        "alignments",
        metavar="ALI",
        help="alignment dir (ali.scp, ali.N.gz or ali.ark inside), or a Kaldi rspecifier: "
        "ark:ali.ark, 'ark:gunzip -c ali.1.gz |', scp:ali.scp, or a bare archive path",
    )
    parser.add_argument(
        "features",
        metavar="FEATS",
        help="data dir (utt2num_frames or feats.scp), or scp:feats.scp, ark:feats.ark, "
        "'ark:gunzip -c feats.ark.gz |'",
    )
    parser.add_argument(
        "--subsampling-factor",
        type=int,
        default=defaults.subsampling_factor,
        metavar="N",
        help="feature frames per alignment frame (default: the alignment dir's "
        "frame_subsampling_factor, else 1)",
    )
    parser.add_argument(
        "--tolerance",
        type=int,
        default=defaults.tolerance,
        metavar="N",
        help=f"labels an alignment may be off and still be padded/trimmed (default {defaults.tolerance})",
    )
    parser.add_argument(
        "--num-classes",
        type=int,
        default=defaults.num_classes,
        metavar="N",
        help="labels must be below N (default: the alignment dir's num_classes, else the largest label + 1)",
    )
    parser.add_argument(
        "--max-missing",
        type=float,
        default=defaults.max_missing,
        metavar="F",
        help="fraction of feature utterances allowed to lack an alignment (default "
        f"{defaults.max_missing:g})",
    )
    parser.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    cfg = AlignmentCheckConfig(
        subsampling_factor=args.subsampling_factor,
        tolerance=args.tolerance,
        num_classes=args.num_classes,
        max_missing=args.max_missing,
    )
    cfg.check()
    alignments = read_alignments(args.alignments)
    frame_counts = read_frame_counts(args.features)
    _, report = check_alignments(alignments, frame_counts, cfg, source=args.alignments)
    print(report.summary(), flush=True)
    report.raise_if_unusable()
    return 0
