"""How long messages take between simulated learners: a link per learner with a bandwidth
and a latency (the alpha-beta model), and the standard algorithms' message counts.

    t(message of b bytes) = latency + b / bandwidth
    ring all-reduce of b bytes among n:  2 (n - 1) (latency + b / (n bandwidth))
    tree broadcast:                      ceil(log2 n) t(b)
    all-gather of b bytes each (ring):   (n - 1) t(b)
    barrier (dissemination):             ceil(log2 n) latency

Every learner has its own full-duplex link (a pairwise exchange sends and receives at
once, and disjoint pairs do not share bandwidth), as on a non-blocking fat tree.
"""

from __future__ import annotations

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
    """

    name: str
    bandwidth_gbps: float
    latency_us: float

    def __post_init__(self) -> None:
        # NaN compares false both ways: finiteness first, or nan would pass as free.
        good_bandwidth = math.isfinite(self.bandwidth_gbps) and self.bandwidth_gbps > 0
        good_latency = math.isfinite(self.latency_us) and self.latency_us >= 0
        if not (good_bandwidth and good_latency):
            raise ValueError(
                f"network {self.name}: bandwidth_gbps={self.bandwidth_gbps} must be a positive number and "
                f"latency_us={self.latency_us} a number not negative (finite)"
            )

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
