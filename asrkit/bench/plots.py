"""PNG plots of benchmark results (matplotlib, no display needed).

:func:`plot` draws ``<out_dir>/<name>.png`` for a benchmark's result dict: bars of each
side against its same-run baseline, or, for ``convergence``, dev loss against training
time per strategy; for ``sim_agreement``, simulated against torchrun dev-loss curves;
for ``hybrid``, GMM training seconds per stage beside the decoding
real-time factors.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _bars(ax, labels: list[str], values: list[float], ylabel: str, title: str) -> None:
    ax.bar(range(len(values)), values, color=["#4c72b0", "#dd8452"] * len(values))
    ax.set_xticks(range(len(values)), labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)


def plot(name: str, result: dict, out_dir: str | Path) -> Path | None:
    """Write ``out_dir/<name>.png``; returns its path (None for an unknown result shape)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        if name == "convergence":
            for strategy, rows in result["curves"].items():
                ax.plot([r[0] for r in rows], [r[1] for r in rows], marker=".", label=strategy)
            ax.axhline(result["target_loss"], color="grey", linestyle=":", label="target loss")
            ax.set_xlabel("training time (s)")
            ax.set_ylabel("held-out CTC loss per utterance")
            ax.set_title(f"convergence per wall clock ({result['source']})", fontsize=9)
            ax.legend(fontsize=8)
        elif name == "strategies":
            rows = {k: v for k, v in result.items() if k.endswith(("equal_speed", "straggler_2x"))}
            labels = [f"{k} {s}" for k in rows for s in ("sync", "adpsgd")]
            values = [rows[k][f"{s}_samples_per_s"] for k in rows for s in ("sync", "adpsgd")]
            _bars(ax, labels, values, "aggregate samples/s", f"strategy throughput ({result['cpus']} CPUs)")
        elif name == "compute":
            sizes = [k for k in ("demo", "paper") if k in result]
            _bars(
                ax,
                sizes,
                [result[k]["fraction_of_matmul"] for k in sizes],
                "training FLOP/s / matmul FLOP/s",
                f"compute efficiency on {result['device']}",
            )
        elif name == "decoding":
            keys = ["forward_rtf", "greedy_search_rtf", "beam_lm_search_rtf"]
            _bars(ax, keys, [result[k] for k in keys], "real-time factor", "decoding on the CPU")
        elif name == "scoring":
            _bars(
                ax,
                ["asrkit score", "sclite"],
                [result["asrkit_s"], result["sclite_s"]],
                "seconds",
                f"scoring {result['utterances']} utterances",
            )
        elif name == "trainer":
            _bars(
                ax,
                ["asrkit", "minimal loop"],
                [result["asrkit_s_per_step"], result["minimal_s_per_step"]],
                "seconds per step",
                "trainer overhead",
            )
        elif name == "features":
            names = [n for n in ("asrkit", "knf", "loop") if f"{n}_rtf" in result]
            _bars(
                ax,
                names,
                [result[f"{n}_rtf"] for n in names],
                "real-time factor",
                "fbank extraction (knf = kaldi-native-fbank)",
            )
        elif name == "hybrid":
            fig.clf()
            fig.set_size_inches(10, 4)
            left, right = fig.subplots(1, 2)
            stages = {k: v for k, v in result["training_s"].items() if k != "total"}
            _bars(left, list(stages), list(stages.values()), "seconds", "GMM training per stage")
            rtfs = {
                label: part[key]
                for label, part, key in (
                    ("GMM", result["gmm_decoding"], "total_rtf"),
                    ("hybrid BLSTM", result["hybrid_decoding"], "total_rtf"),
                    ("CTC beam + LM", result["ctc_decoding"], "beam_lm_total_rtf"),
                )
                if key in part  # a skipped part has only its reason
            }
            _bars(right, list(rtfs), list(rtfs.values()), "real-time factor", "decoding, same utterances")
        elif name in ("sim_agreement", "sim_agreement_ce"):
            curves = result["curves"]
            fig.clf()
            fig.set_size_inches(4 * max(1, len(curves)), 3.5)
            axes = fig.subplots(1, max(1, len(curves)), squeeze=False)[0]
            for axis, (label, curve) in zip(axes, curves.items(), strict=False):
                epochs = [r["epoch"] for r in curve["epochs"]]
                axis.fill_between(
                    epochs,
                    [r["real_min"] for r in curve["epochs"]],
                    [r["real_max"] for r in curve["epochs"]],
                    alpha=0.3,
                    label="torchrun, range over seeds",
                )
                axis.plot(
                    epochs, [r["real_mean"] for r in curve["epochs"]], marker=".", label="torchrun mean"
                )
                axis.plot(
                    epochs, [r["sim_mean"] for r in curve["epochs"]], marker="x", label="simulated mean"
                )
                axis.set_xlabel("epoch")
                axis.set_ylabel("dev loss")
                axis.set_title(label, fontsize=9)
            axes[0].legend(fontsize=7)
        else:
            return None
        fig.tight_layout()
        path = Path(out_dir) / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
        return path
    except KeyError:
        return None
    finally:
        plt.close(fig)
