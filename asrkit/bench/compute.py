"""Compute efficiency: FLOP/s achieved by LSTM training vs the machine's matrix-multiply rate.

The training FLOPs are counted analytically (:func:`lstm_training_flops`): per LSTM
layer, direction and valid output frame, the gate pre-activations ``W_ih x + W_hh h``
cost ``2 * 4H * (I + H)`` multiply-adds-as-2-FLOPs, plus ``2 * D * V`` for each output
head; the backward pass costs twice the forward (gradients for the inputs and for the
weights), so a training step is 3x the forward. Element-wise gate arithmetic, the loss
and the optimizer are not counted (they are O(H) per frame, not O(H^2)), so the figure
is slightly conservative. The baseline is a square ``float32`` matrix multiply timed
in the same run, on the same device and thread count: "peak" as this machine delivers
it to PyTorch. Baidu reports 60-65% of peak for its RNN training on one GPU.
"""

from __future__ import annotations

import time

import torch

from asrkit.models import ModelConfig, build_model
from asrkit.models.lstm import LSTMAcousticModel


def lstm_training_flops(model: LSTMAcousticModel, frames: int) -> int:
    """FLOPs of one training step (forward + backward) over ``frames`` valid output frames.

    Args:
        model: the acoustic model (its shape is read from ``model.args``).
        frames: the batch's frames after stacking/subsampling (summed over utterances).
    """
    a: dict[str, int] = {k: int(v) for k, v in model.args.items()}  # sizes and flags
    hidden, layers = a["hidden"], a["layers"]
    directions = 2 if a["bidirectional"] else 1
    forward = 0
    width = a["input_dim"] * a["stack"]
    for _ in range(layers):
        forward += directions * 2 * 4 * hidden * (width + hidden)
        width = directions * hidden
    if a["bottleneck"] > 0:
        forward += 2 * width * a["bottleneck"]
        width = a["bottleneck"]
    forward += 2 * width * (a["num_tokens"] + 1)
    if a["num_classes"] > 0:
        forward += 2 * width * a["num_classes"]
    return 3 * forward * frames


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_rate(device: torch.device, *, size: int, repeats: int = 5) -> float:
    """FLOP/s of a ``size x size`` float32 matrix product (the best of ``repeats``)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(size, size, generator=g).to(device)
    y = torch.randn(size, size, generator=g).to(device)
    torch.matmul(x, y)
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        began = time.perf_counter()
        torch.matmul(x, y)
        _sync(device)
        best = min(best, time.perf_counter() - began)
    return 2 * size**3 / best


def training_rate(
    size: str,
    device: torch.device,
    *,
    batch: int,
    seconds: float,
    steps: int = 4,
    packed: bool = False,
    bf16: bool = False,
) -> dict:
    """Achieved training FLOP/s of the ``size`` model on random ``(batch, T, 80)`` features
    of ``seconds`` length (100 frames/s; the other utterances 75-100% as long as the first),
    CTC loss, Adam; the best of ``steps`` steps. ``packed`` takes the packed-sequence LSTM
    path on the CPU too (the baseline of the padded path the CPU uses by default); ``bf16``
    runs forward and backward under bfloat16 autocast, as ``train.precision=bf16``."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(size=size), input_dim=80, num_tokens=28).to(device)
    model.padded_on_cpu = not packed
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    frames_in = int(seconds * 100)
    feats = torch.randn(batch, frames_in, 80, device=device)
    # Utterances of unequal length, as a length-bucketed batch holds.
    lengths = torch.linspace(frames_in, 0.75 * frames_in, batch).long()
    out_frames = int(model.output_lengths(lengths).sum())
    targets = torch.randint(1, 29, (batch, max(1, out_frames // batch // 4)), device=device)
    target_lengths = torch.full((batch,), targets.shape[1], dtype=torch.long)
    best = float("inf")
    for step in range(steps + 1):
        _sync(device)
        began = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            out = model(feats, lengths)
            loss = torch.nn.functional.ctc_loss(
                out["ctc"].float().transpose(0, 1),
                targets,
                out["lengths"],
                target_lengths,
                zero_infinity=True,
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        _sync(device)
        if step:  # the first step warms up (allocations, cuDNN plans)
            best = min(best, time.perf_counter() - began)
    flops = lstm_training_flops(model, out_frames)
    return {
        "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
        "batch": batch,
        "frames": out_frames,
        "step_s": _figures(best),
        "gflop_per_step": _figures(flops / 1e9),
        "gflop_s": _figures(flops / best / 1e9),
    }


def _figures(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant figures: a tiny model's rate on a busy machine
    (a few MFLOP/s) must not print as 0."""
    return float(f"{value:.{digits}g}")


def bench_compute(data_dir: str = "", *, device: str = "auto", quick: bool = False) -> dict:
    """Training FLOP/s of the demo and paper-size models as a fraction of the matmul rate.

    ``data_dir`` is unused (the batches are random: FLOPs do not depend on the values).
    """
    dev = torch.device(
        "cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device)
    )
    gpu = dev.type == "cuda"
    peak = matmul_rate(dev, size=8192 if gpu else 1024)
    # The paper trained with batches of 256 utterances; a GPU gets that, a CPU a taste.
    shapes = {"demo": (32, 4.0) if gpu else (8, 2.0), "paper": (256, 4.0) if gpu else (4, 1.0)}
    if quick:
        shapes = {k: (b, s / 2) for k, (b, s) in shapes.items()}
    result = {
        "device": torch.cuda.get_device_name(dev) if gpu else "cpu",
        "threads": torch.get_num_threads(),
        "matmul_gflop_s": round(peak / 1e9, 2),
    }
    for size, (batch, seconds) in shapes.items():
        rate = training_rate(size, dev, batch=batch, seconds=seconds)
        rate["fraction_of_matmul"] = round(rate["gflop_s"] * 1e9 / peak, 3)
        if not gpu:
            # The CPU's padded LSTM path against the packed-sequence path, same run and batch.
            baseline = training_rate(size, dev, batch=batch, seconds=seconds, packed=True)
            rate["packed_step_s"] = baseline["step_s"]
            rate["speedup_vs_packed"] = round(baseline["step_s"] / rate["step_s"], 2)
        # train.precision=bf16 against float32, same run and batch (bfloat16 matrix units,
        # where the machine has them, decide it).
        half = training_rate(size, dev, batch=batch, seconds=seconds, bf16=True)
        rate["bf16_step_s"] = half["step_s"]
        rate["speedup_bf16"] = round(rate["step_s"] / half["step_s"], 2)
        result[size] = rate
    return result
