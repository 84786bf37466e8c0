"""The analytic LSTM training FLOP count against hand computations."""

from __future__ import annotations

import pytest
import torch

from asrkit.bench.compute import lstm_training_flops, matmul_rate, training_rate
from asrkit.models.lstm import LSTMAcousticModel


def test_flops_of_a_tiny_blstm_by_hand() -> None:
    # 1 BLSTM layer, H=3, input 2: per direction 2 x 4H x (I + H) = 2 x 12 x 5 = 120 per frame,
    # 240 for both; CTC head 2 x 6 x 5 = 60; forward 300, training 3 x 300 = 900 per frame.
    model = LSTMAcousticModel(2, 4, hidden=3, layers=1, bidirectional=True)
    assert lstm_training_flops(model, 10) == 9000


def test_flops_with_stacking_bottleneck_and_frame_head_by_hand() -> None:
    # LSTM input 3 x stack 2 = 6; layer 1: 2 x 16 x (6 + 4) = 320; layer 2: 2 x 16 x 8 = 256;
    # bottleneck 2 x 4 x 5 = 40; CTC head 2 x 5 x 3 = 30; frame head 2 x 5 x 7 = 70.
    model = LSTMAcousticModel(
        3, 2, hidden=4, layers=2, bidirectional=False, bottleneck=5, stack=2, subsample=2, num_classes=7
    )
    assert lstm_training_flops(model, 1) == 3 * (320 + 256 + 40 + 30 + 70)


@pytest.mark.parametrize("size", ["tiny", "demo", "paper"])
def test_flops_are_two_per_weight_per_frame_times_three(size: str) -> None:
    from asrkit.models import ModelConfig, build_model

    model = build_model(ModelConfig(size=size, num_classes=11), input_dim=40, num_tokens=30)
    weights = sum(p.numel() for p in model.parameters() if p.dim() == 2)
    assert lstm_training_flops(model, 7) == 3 * 2 * weights * 7


def test_rates_are_measured() -> None:
    cpu = torch.device("cpu")
    assert matmul_rate(cpu, size=64, repeats=2) > 0
    # Utterances of 30 and 22 frames (the last 75% of the first, rounded down).
    for packed, bf16 in ((False, False), (True, False), (False, True)):
        rate = training_rate("tiny", cpu, batch=2, seconds=0.3, steps=1, packed=packed, bf16=bf16)
        assert rate["frames"] == 52 and rate["gflop_s"] > 0 and rate["step_s"] > 0


def test_every_benchmark_has_quick_settings_and_a_plot(tmp_path) -> None:
    from asrkit.bench import BENCHMARKS, QUICK
    from asrkit.bench.plots import plot

    assert set(QUICK) == set(BENCHMARKS)
    result = {
        "source": "test",
        "target_loss": 2.0,
        "curves": {"sync": [[1.0, 3.0, 50.0], [2.0, 2.0, 40.0]], "adpsgd": [[1.5, 2.5, 45.0]]},
    }
    png = plot("convergence", result, tmp_path)
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot("scoring", {"asrkit_s": 1.0, "sclite_s": 0.5, "utterances": 3}, tmp_path) is not None
    assert plot("nonesuch", {}, tmp_path) is None


def test_synthetic_scoring_pairs_are_seeded_and_sorted_ids() -> None:
    from asrkit.bench.scoring import synthetic_pairs

    refs, hyps = synthetic_pairs(50, seed=3)
    assert (refs, hyps) == synthetic_pairs(50, seed=3)
    assert [r.split()[0] for r in refs] == [h.split()[0] for h in hyps]
    assert sum(r != h for r, h in zip(refs, hyps, strict=True)) > 20  # errors are there
