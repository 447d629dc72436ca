"""Batching policies, one per file, and their registry (keyed by the scenario's ``scheduler.policy``).

Adding a policy is one new file here (a class with ``kind``, ``plan`` and, if it needs to, the
other :class:`BatchingPolicy` members) plus its line in :data:`POLICIES`; ``docs/replica.md`` walks
through one.
"""

from __future__ import annotations

from clustersim.registry import Registry
from clustersim.replica.batching.base import BatchingPolicy, PolicyBase, StepBuilder, StepLimits
from clustersim.replica.batching.chunked_prefill import ChunkedPrefill
from clustersim.replica.batching.continuous import Continuous
from clustersim.replica.batching.sglang import SGLang
from clustersim.replica.batching.static import Static
from clustersim.replica.batching.trtllm import (
    TrtllmMaxUtilization,
    TrtllmMaxUtilizationChunked,
    TrtllmNoEvict,
    TrtllmNoEvictChunked,
)
from clustersim.replica.batching.vllm_v0 import VllmV0
from clustersim.replica.batching.vllm_v1 import VllmV1

POLICIES: Registry[type[BatchingPolicy]] = Registry(
    "batching policy",
    [
        (Static.kind, Static),
        (Continuous.kind, Continuous),
        (VllmV0.kind, VllmV0),
        (ChunkedPrefill.kind, ChunkedPrefill),
        (VllmV1.kind, VllmV1),
        (TrtllmNoEvict.kind, TrtllmNoEvict),
        (TrtllmNoEvictChunked.kind, TrtllmNoEvictChunked),
        (TrtllmMaxUtilization.kind, TrtllmMaxUtilization),
        (TrtllmMaxUtilizationChunked.kind, TrtllmMaxUtilizationChunked),
        (SGLang.kind, SGLang),
    ],
)

__all__ = ["POLICIES", "BatchingPolicy", "PolicyBase", "StepBuilder", "StepLimits"]
