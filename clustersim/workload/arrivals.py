"""Arrival streams: pure generators of ``(arrival_at_s, prompt_tokens, output_tokens)``.

Each tenant draws from its own random streams, keyed by the tenant's name, so adding or
reordering tenants never changes another tenant's traffic.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import numpy as np

from clustersim.config.scenario import ExplicitArrivals, PoissonArrivals, Tenant
from clustersim.workload.lengths import sample_lengths

ArrivalTuple = tuple[float, int, int]

_DRAW_CHUNK = 4096  # samples drawn per numpy call: per-chunk work, not per-request Python calls

STREAM_ARRIVALS = 0
STREAM_PROMPT = 1
STREAM_OUTPUT = 2


def tenant_rng(seed: int, tenant_name: str, stream: int) -> np.random.Generator:
    """The random stream ``stream`` of tenant ``tenant_name`` under scenario ``seed``."""
    key = zlib.crc32(tenant_name.encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(key, stream)))


def tenant_arrivals(tenant: Tenant, seed: int) -> Iterator[ArrivalTuple]:
    """All requests of one tenant in arrival order (infinite for open-ended processes)."""
    arrival = tenant.arrival
    if isinstance(arrival, ExplicitArrivals):
        for item in arrival.requests:
            yield item.arrival_at_s, item.prompt_tokens, item.output_tokens
        return
    if isinstance(arrival, PoissonArrivals):
        assert tenant.prompt_tokens is not None and tenant.output_tokens is not None
        gaps_rng = tenant_rng(seed, tenant.name, STREAM_ARRIVALS)
        prompt_rng = tenant_rng(seed, tenant.name, STREAM_PROMPT)
        output_rng = tenant_rng(seed, tenant.name, STREAM_OUTPUT)
        now_s = 0.0
        while True:
            gaps = gaps_rng.exponential(1.0 / arrival.rate_per_s, size=_DRAW_CHUNK)
            prompts = sample_lengths(tenant.prompt_tokens, prompt_rng, _DRAW_CHUNK).tolist()
            outputs = sample_lengths(tenant.output_tokens, output_rng, _DRAW_CHUNK).tolist()
            times = (now_s + np.cumsum(gaps)).tolist()
            now_s = times[-1]
            yield from zip(times, prompts, outputs, strict=True)
        return
    raise TypeError(f"unknown arrival process {arrival!r}")
