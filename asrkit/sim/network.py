"""How long messages take between simulated learners: a link per learner with a bandwidth
and a latency (the alpha-beta model), and the standard algorithms' message counts.

    t(message of b bytes) = latency + b / bandwidth
    ring all-reduce of b bytes among n:  2 (n - 1) (latency + b / (n bandwidth))
    tree broadcast:                      ceil(log2 n) t(b)
    all-gather of b bytes each (ring):   (n - 1) t(b)
    barrier (dissemination):             ceil(log2 n) latency

Every learner has its own full-duplex link (a pairwise exchange sends and receives at
once, and disjoint pairs do not share bandwidth), as on a non-blocking fat tree.

Communication at another model's scale: ``bytes_scale`` charges every tensor message as
that many times its bytes, so a small model computes while the network carries a large
one's weights; :meth:`Network.at_ratio` picks the factor that gives a chosen ratio of one
whole-model exchange's time to one learner's step of computation (IBM's setups:
docs/study.md).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

__all__ = ["NETWORKS", "Network"]


@dataclass(frozen=True)
class Network:
    """A learner's link.

    Attributes:
        name: for reports.
        bandwidth_gbps: per direction, in Gbit/s.
        latency_us: one message's fixed cost, in microseconds.
        bytes_scale: a tensor message of b bytes is charged as ``b x bytes_scale`` (a model
            this many times larger on the wire; 1: its own size).
    """

    name: str
    bandwidth_gbps: float
    latency_us: float
    bytes_scale: float = 1.0

    def __post_init__(self) -> None:
        # NaN compares false both ways: finiteness first, or nan would pass as free.
        good_bandwidth = math.isfinite(self.bandwidth_gbps) and self.bandwidth_gbps > 0
        good_latency = math.isfinite(self.latency_us) and self.latency_us >= 0
        good_scale = math.isfinite(self.bytes_scale) and self.bytes_scale > 0
        if not (good_bandwidth and good_latency and good_scale):
            raise ValueError(
                f"network {self.name}: bandwidth_gbps={self.bandwidth_gbps} and bytes_scale="
                f"{self.bytes_scale} must be positive numbers and latency_us={self.latency_us} a "
                "number not negative (finite)"
            )

    def tensor_bytes(self, nbytes: int) -> int:
        """What a tensor message of ``nbytes`` counts as on this network."""
        return round(nbytes * self.bytes_scale)

    def at_ratio(self, ratio: float, *, model_bytes: int, step_s: float) -> Network:
        """This network, with the ``bytes_scale`` that makes one exchange of the whole
        model (``model_bytes``, one message) take ``ratio`` x ``step_s`` (one learner's
        step of computation). A ratio below what the latency alone costs is refused."""
        if not (math.isfinite(ratio) and ratio > 0 and step_s > 0 and model_bytes > 0):
            raise ValueError(
                f"comm ratio {ratio}: give a positive number (a whole-model exchange's time over "
                f"one step's compute; step {step_s} s, model {model_bytes} bytes)"
            )
        wire_s = ratio * step_s - self.latency_s
        if wire_s <= 0:
            raise ValueError(
                f"comm ratio {ratio}: one message's latency on {self.name} ({self.latency_us} us) is "
                f"already more than {ratio} x the step's {step_s:.4g} s; give a larger ratio"
            )
        scale = wire_s * self.bytes_per_s / model_bytes
        return dataclasses.replace(self, name=f"{self.name}@ratio{ratio:g}", bytes_scale=scale)

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9 / 8

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6

    def transfer_s(self, nbytes: int) -> float:
        """One message of ``nbytes`` from one learner to another."""
        return self.latency_s + nbytes / self.bytes_per_s

    def all_reduce_s(self, nbytes: int, n: int) -> float:
        """A ring all-reduce (reduce-scatter, then all-gather) of ``nbytes`` among ``n``."""
        if n <= 1:
            return 0.0
        return 2 * (n - 1) * (self.latency_s + nbytes / n / self.bytes_per_s)

    def broadcast_s(self, nbytes: int, n: int) -> float:
        """A binomial-tree broadcast of ``nbytes`` to ``n`` learners."""
        return math.ceil(math.log2(n)) * self.transfer_s(nbytes) if n > 1 else 0.0

    def all_gather_s(self, nbytes: int, n: int) -> float:
        """A ring all-gather of ``nbytes`` from each of ``n`` learners."""
        return (n - 1) * self.transfer_s(nbytes) if n > 1 else 0.0

    def barrier_s(self, n: int) -> float:
        """A dissemination barrier among ``n`` learners."""
        return math.ceil(math.log2(n)) * self.latency_s if n > 1 else 0.0


#: The links ``sim.network`` names: EDR InfiniBand (IBM's cluster class of interconnect)
#: and 10 Gb Ethernet through TCP (a typical lab cluster).
NETWORKS = {
    "infiniband": Network("infiniband", bandwidth_gbps=100.0, latency_us=2.0),
    "10gbe": Network("10gbe", bandwidth_gbps=10.0, latency_us=50.0),
}
