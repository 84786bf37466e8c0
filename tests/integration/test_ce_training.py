"""Forced alignment, CE training and log-likelihoods as recipe stages (stages 5-7).

The in-process tests of the same code are in :mod:`tests.unit.test_ce_training`.
"""

from __future__ import annotations

from pathlib import Path

from asrkit.data.kaldi_ark import kaldi_io
from asrkit.targets.alignments import AlignmentCheckConfig, check_alignments, read_alignments
from tests.helpers import make_data_dir, tiny_recipe


def _recipe(tmp_path: Path, exp: str, first: int, last: int, *extra: str):
    return tiny_recipe(tmp_path, *extra, stage=first, stop_stage=last, exp=exp)


def test_align_ce_training_and_loglikes_stages(tmp_path: Path) -> None:
    """CTC model -> forced alignments (stage 6) -> CE model (stage 4) -> decode (5) ->
    log-likelihoods (7), on a seeded fixture."""
    for i, name in enumerate(("train", "train_dev", "test")):
        make_data_dir(tmp_path / "data" / name, utts=6, seed=10 * i)
    result = _recipe(tmp_path, "ctc", 2, 7)
    assert result.returncode == 0, result.stderr[-3000:]
    ctc = tmp_path / "ctc"
    for name in ("train", "train_dev"):
        ali_dir = ctc / f"ali_{name}"
        alis = read_alignments(str(ali_dir))
        frames = {
            utt: m.shape[0] for utt, m in kaldi_io.read_mat_scp(str(tmp_path / "data" / name / "feats.scp"))
        }
        assert sorted(alis) == sorted(frames)
        _, report = check_alignments(alis, frames, AlignmentCheckConfig(), source=str(ali_dir))
        assert report.usable and not report.fixed, report.summary()
    num_classes = int((ctc / "ali_train" / "num_classes").read_text())
    counts = (ctc / "ali_train_pdf.counts").read_text().split()
    assert counts[0] == "[" and counts[-1] == "]" and len(counts) == num_classes + 2
    mats = dict(kaldi_io.read_mat_ark(str(ctc / "loglikes_test" / "loglikes.ark")))
    test_frames = {
        utt: m.shape[0] for utt, m in kaldi_io.read_mat_scp(str(tmp_path / "data" / "test" / "feats.scp"))
    }
    assert sorted(mats) == sorted(test_frames)
    for utt, mat in mats.items():
        assert mat.shape == (test_frames[utt], num_classes)  # tiny model: no subsampling

    result = _recipe(
        tmp_path,
        "ce",
        3,
        7,
        "objective=ce",
        f"align.train={ctc / 'ali_train'}",
        f"align.dev={ctc / 'ali_train_dev'}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ce = tmp_path / "ce"
    assert (ce / "tokenizer" / "units.txt").read_bytes() == (ctc / "tokenizer" / "units.txt").read_bytes()
    assert "test: %WER " in result.stdout
    log = (ce / "log" / "run.log").read_text()
    assert "frame accuracy" in log and "stage 6 skipped" in log
    mats = dict(kaldi_io.read_mat_ark(str(ce / "loglikes_test" / "loglikes.ark")))
    assert all(m.shape == (test_frames[u], num_classes) for u, m in mats.items())


def test_ce_with_missing_alignments_is_one_line_error(tmp_path: Path) -> None:
    for i, name in enumerate(("train", "train_dev", "test")):
        make_data_dir(tmp_path / "data" / name, utts=6, seed=10 * i)
    result = _recipe(tmp_path, "ce", 2, 4, "objective=ce", f"align.train={tmp_path / 'nowhere'}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("asrkit: error:")]
    assert len(errors) == 1 and "nowhere" in errors[0]
    assert result.stderr.strip().splitlines()[-1] == errors[0]
