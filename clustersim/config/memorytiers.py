"""An engine that sizes its prefill chunks, CUDA graphs and KV memory by the GPU's memory (pure).

SGLang (since sgl-project/sglang PR #10975, ``ServerArgs._handle_gpu_memory_settings`` in
``python/sglang/srt/server_args.py``) picks ``chunked_prefill_size`` and ``cuda_graph_max_bs`` from the
memory the device reports, in tiers, and then reserves memory for activations and CUDA graphs out of
it: ``mem_fraction_static = (memory - reserved) / memory``, with ``reserved = base + max(chunk,
min_chunk) x per_chunk_token + graph_max_bs x per_graph_seq + TP x PP x per_gpu`` MiB, at least a floor
on large GPUs. Older releases used fixed values (the profile's plain defaults), so the rule applies from
``since_version`` on.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, field_validator

from clustersim.config.base import StrictModel
from clustersim.config.releases import checked_release, runs_before

MIB = 2**20
GIB = 2**30
SMALL_TP = 4  # below this TP degree a tier may capture fewer CUDA-graph batch sizes


class MemoryTier(StrictModel):
    """The settings for GPUs reporting under ``below_gib`` GiB (None: every larger GPU)."""

    below_gib: PositiveFloat | None = None
    chunk_tokens: PositiveInt
    graph_seqs: PositiveInt
    graph_seqs_below_tp4: PositiveInt | None = None  # with TP under 4 (None: graph_seqs)


class GpuMemoryRule(StrictModel):
    """Tiers by reported GPU memory, and the memory reserved out of it (MiB)."""

    since_version: str
    tiers: tuple[MemoryTier, ...] = Field(min_length=1)
    reserved_base_mib: NonNegativeFloat
    reserved_per_chunk_token_mib: NonNegativeFloat
    reserved_min_chunk_tokens: PositiveInt
    reserved_per_graph_seq_mib: NonNegativeFloat
    reserved_per_gpu_mib: NonNegativeFloat
    reserved_floor_mib: NonNegativeFloat = 0.0
    reserved_floor_above_gib: NonNegativeFloat = 0.0

    @field_validator("since_version")
    @classmethod
    def _release(cls, text: str) -> str:
        return checked_release(text)

    @field_validator("tiers")
    @classmethod
    def _ordered(cls, tiers: tuple[MemoryTier, ...]) -> tuple[MemoryTier, ...]:
        bounds = [t.below_gib for t in tiers]
        if bounds[-1] is not None or any(b is None for b in bounds[:-1]):
            raise ValueError("every tier but the last needs below_gib; the last has none (every larger GPU)")
        limits = [b for b in bounds if b is not None]
        if any(a >= b for a, b in itertools.pairwise(limits)):
            raise ValueError("below_gib must increase from tier to tier")
        return tiers

    def applies_to(self, version: str | None) -> bool:
        """Whether a run of release ``version`` (None: the current one) sizes its memory so."""
        return not runs_before(version, self.since_version)


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """What the rule gives one deployment."""

    chunk_tokens: int
    graph_seqs: int
    gpu_memory_frac: float


def memory_settings(rule: GpuMemoryRule, reported_bytes: float, tp: int, pp: int) -> MemorySettings:
    """The chunk, CUDA-graph batch cap and memory fraction on a GPU reporting ``reported_bytes``."""
    memory_gib = reported_bytes / GIB
    tier = next(t for t in rule.tiers if t.below_gib is None or memory_gib < t.below_gib)
    graph = tier.graph_seqs_below_tp4 if tp < SMALL_TP and tier.graph_seqs_below_tp4 else tier.graph_seqs
    reserved = (
        rule.reserved_base_mib
        + max(tier.chunk_tokens, rule.reserved_min_chunk_tokens) * rule.reserved_per_chunk_token_mib
        + graph * rule.reserved_per_graph_seq_mib
        + tp * pp * rule.reserved_per_gpu_mib
    )
    if memory_gib > rule.reserved_floor_above_gib:
        reserved = max(reserved, rule.reserved_floor_mib)
    memory_mib = reported_bytes / MIB
    return MemorySettings(tier.chunk_tokens, graph, round((memory_mib - reserved) / memory_mib, 3))
