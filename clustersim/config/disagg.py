"""The ``disaggregation`` section of a scenario: prefill and decode on separate replica pools.

Replica groups with ``role: prefill`` compute prompts; groups with ``role: decode`` generate the
tokens (DistServe, OSDI'24; Splitwise, ISCA'24; Mooncake, FAST'25; vLLM's disaggregated prefill).
Each request's KV cache moves from its prefill replica to its decode replica over the ``link``.
The decode replica pulls it once it has taken the blocks for it (DistServe's online scheduling: the
prefill instance keeps the KV cache until the decode instance fetches it, so a busy decode pool holds
the prefill pool's memory; vLLM V1's ``WAITING_FOR_REMOTE_KVS`` state). A transfer takes
``latency_s + bytes / (bandwidth_bytes_per_s x efficiency_frac x GPUs)``, where GPUs is the smaller
replica's GPU count (each GPU sends its tensor-parallel shard over its own link).

Link presets (bandwidth per GPU and direction; ``latency_s`` and ``efficiency_frac`` are the fixed
cost and the achieved share of a measured transfer: a straight-line fit to Mooncake's vLLM V1
connector benchmark, 1P1D Qwen3-8B over 8 x 200 Gb/s RoCE, 20 MB in 0.54 ms and 4.50 GB in
31.65 ms: 0.40 ms + bytes / 144 GB/s, 72% of the 200 GB/s the NICs carry;
kvcache-ai.github.io/Mooncake/performance/vllm-v1-support-benchmark.html):

- ``nvlink``: 450 GB/s, half of NVLink 4's 900 GB/s bidirectional per H100 SXM (NVIDIA H100 datasheet).
- ``infiniband``: 50 GB/s, one ConnectX-7 NDR 400 Gb/s adapter per GPU (NVIDIA DGX H100 user guide;
  ConnectX-7 datasheet).
- ``roce``: 25 GB/s, one 200 Gb/s Ethernet port per GPU (Mooncake's testbed above).
- ``pcie``: 63 GB/s, PCIe 5.0 x16 (32 GT/s x 16 lanes, 128b/130b encoding: PCI-SIG).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat

from clustersim.config.base import StrictModel
from clustersim.config.faults import PoolAutoscalers
from clustersim.config.routing import LeastKVRouter, RouterConfig

MOONCAKE_LATENCY_S = 0.40e-3  # fixed cost per transfer, fitted to Mooncake's vLLM V1 connector benchmark
MOONCAKE_EFFICIENCY_FRAC = 0.72  # 144 GB/s achieved of 200 GB/s, same fit

LinkKind = Literal["nvlink", "infiniband", "roce", "pcie"]
LINK_BANDWIDTH_BYTES_PER_S: dict[str, float] = {
    "nvlink": 450e9,  # NVLink 4, per direction (H100 SXM datasheet: 900 GB/s bidirectional)
    "infiniband": 50e9,  # NDR 400 Gb/s, ConnectX-7, one per GPU (DGX H100)
    "roce": 25e9,  # 200 Gb/s Ethernet per GPU (Mooncake's benchmark testbed)
    "pcie": 63e9,  # PCIe 5.0 x16 (PCI-SIG)
}


class Link(StrictModel):
    """The link a KV cache crosses from a prefill to a decode replica; unset fields take the preset's."""

    kind: LinkKind = "infiniband"
    bandwidth_bytes_per_s: PositiveFloat | None = None  # per GPU and direction
    latency_s: NonNegativeFloat = MOONCAKE_LATENCY_S
    efficiency_frac: float = Field(default=MOONCAKE_EFFICIENCY_FRAC, gt=0.0, le=1.0)

    def per_gpu_bytes_per_s(self) -> float:
        """The bandwidth one GPU's shard moves at: the preset's (or the set) bandwidth times the efficiency."""
        nominal = self.bandwidth_bytes_per_s or LINK_BANDWIDTH_BYTES_PER_S[self.kind]
        return nominal * self.efficiency_frac


class Nodes(StrictModel):
    """Where the replicas sit: packed onto nodes of ``gpus_per_node`` GPUs in replica order (a replica
    that does not fit in what is left of a node starts the next one). Two replicas on one node move KV
    caches over ``link`` (default NVLink), others over the section's link (DistServe's placement for
    high node affinity keeps each prefill instance's decode partners in its node). ``prefer_local``:
    the decode router picks among the decode replicas on the prompt's node, when there are any."""

    gpus_per_node: int = Field(default=8, ge=1, le=1024)
    link: Link = Link(kind="nvlink")
    prefer_local: bool = True


class Disaggregation(StrictModel):
    """How KV caches move from the prefill pool to the decode pool, and how the decode replica is chosen.

    The scenario's ``router`` picks a prefill replica on arrival; ``decode_router`` picks the decode
    replica when the prompt is done (default ``least_kv``: DistServe and Splitwise both send a
    request to the decode instance with the most free memory). ``nodes``: the replicas' placement on
    nodes, whose own link serves the transfers within a node (None: every transfer crosses ``link``).
    ``autoscaler``: start and stop each pool's replicas by its own load (:class:`PoolAutoscalers`).
    """

    link: Link = Link()
    nodes: Nodes | None = None
    decode_router: RouterConfig = LeastKVRouter(kind="least_kv")
    autoscaler: PoolAutoscalers | None = None


def node_of(num_gpus: list[int], gpus_per_node: int) -> list[int]:
    """Each replica's node when replicas of ``num_gpus`` GPUs are packed in order onto nodes of
    ``gpus_per_node``; a replica larger than a node takes whole nodes of its own (pure)."""
    nodes, node, used = [], 0, 0
    for gpus in num_gpus:
        if used and used + gpus > gpus_per_node:
            node, used = node + 1, 0
        nodes.append(node)
        used += gpus
        if used >= gpus_per_node:
            node, used = node + -(-used // gpus_per_node), 0
    return nodes
