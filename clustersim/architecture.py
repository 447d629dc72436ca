"""Plain-number views of the profiles, and the architecture arithmetic both cost/ and kvcache/ need.

Profiles carry sources; the hot path wants bare floats. These frozen dataclasses are built once
per run from the validated profiles (units converted exactly once, here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustersim.config.profiles import EngineProfile, HardwareProfile, ModelProfile


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A dense decoder-only transformer in numbers."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    gated_mlp: bool
    tied_embeddings: bool
    max_model_len_tokens: int
    weight_bytes_per_param: float
    kv_bytes_per_element: float

    @classmethod
    def from_profile(cls, profile: ModelProfile) -> ModelShape:
        return cls(
            name=profile.name,
            num_layers=profile.num_layers.value,
            hidden_size=profile.hidden_size.value,
            num_attention_heads=profile.num_attention_heads.value,
            num_kv_heads=profile.num_kv_heads.value,
            head_dim=profile.head_dim.value,
            intermediate_size=profile.intermediate_size.value,
            vocab_size=profile.vocab_size.value,
            gated_mlp=profile.gated_mlp.value,
            tied_embeddings=profile.tied_embeddings.value,
            max_model_len_tokens=profile.max_model_len_tokens.value,
            weight_bytes_per_param=profile.weight_bytes_per_param.value,
            kv_bytes_per_element=profile.weight_bytes_per_param.value,
        )

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def attention_params_per_layer(self) -> int:
        """Q, K, V and O projection weights of one layer."""
        d = self.hidden_size
        return d * self.q_dim + 2 * d * self.kv_dim + self.q_dim * d

    def mlp_params_per_layer(self) -> int:
        """Up (and gate, if gated) and down projection weights of one layer."""
        return (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size

    def layer_linear_params(self) -> int:
        """All GEMM weights of one layer (norm weights excluded: see :meth:`num_params`)."""
        return self.attention_params_per_layer() + self.mlp_params_per_layer()

    def num_params(self) -> int:
        """Total parameters: layers (GEMMs and two RMSNorms each), final norm, embedding and LM head."""
        d = self.hidden_size
        per_layer = self.layer_linear_params() + 2 * d
        embeddings = self.vocab_size * d * (1 if self.tied_embeddings else 2)
        return self.num_layers * per_layer + d + embeddings

    def weight_bytes(self) -> float:
        """Bytes of all weights of one model copy."""
        return self.num_params() * self.weight_bytes_per_param

    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token occupies over all layers (K and V) on one model copy."""
        return 2.0 * self.num_layers * self.kv_dim * self.kv_bytes_per_element

    def kv_heads_per_gpu(self, tensor_parallel: int) -> float:
        """KV heads each GPU stores: sharded, or replicated when there are fewer heads than GPUs."""
        return max(1.0, self.num_kv_heads / tensor_parallel)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU and the serving engine on it, in numbers."""

    name: str
    memory_bytes: float
    hbm_bandwidth_bytes_per_s: float
    peak_flops_per_s: float
    interconnect_bandwidth_bytes_per_s: float
    interconnect_latency_s: float
    compute_efficiency_frac: float
    memory_efficiency_frac: float
    step_overhead_s: float

    @classmethod
    def from_profiles(cls, hardware: HardwareProfile, engine: EngineProfile) -> GpuSpec:
        return cls(
            name=hardware.name,
            memory_bytes=hardware.memory_bytes.value,
            hbm_bandwidth_bytes_per_s=hardware.hbm_bandwidth_bytes_per_s.value,
            peak_flops_per_s=hardware.peak_bf16_flops_per_s.value,
            interconnect_bandwidth_bytes_per_s=hardware.interconnect_bandwidth_bytes_per_s.value,
            interconnect_latency_s=hardware.interconnect_latency_s.value,
            compute_efficiency_frac=hardware.compute_efficiency_frac.value,
            memory_efficiency_frac=hardware.memory_efficiency_frac.value,
            step_overhead_s=engine.step_overhead_s.value,
        )


def blocks_for_tokens(num_tokens: int, block_size_tokens: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens (ceiling division)."""
    return -(-num_tokens // block_size_tokens)


def weight_bytes_per_gpu(model: ModelShape, tensor_parallel: int) -> float:
    """Each GPU holds a 1/TP shard of the weights."""
    return model.weight_bytes() / tensor_parallel


def kv_bytes_per_token_per_gpu(model: ModelShape, tensor_parallel: int) -> float:
    """KV bytes per token on each GPU of a TP group (KV heads sharded or replicated)."""
    return (
        2.0 * model.num_layers * model.kv_heads_per_gpu(tensor_parallel) * model.head_dim * model.kv_bytes_per_element
    )


def kv_capacity_blocks(
    model: ModelShape, gpu: GpuSpec, tensor_parallel: int, gpu_memory_frac: float, block_size_tokens: int
) -> int:
    """Paged KV blocks one replica holds: (memory x usable fraction - weight shard) / block bytes.

    May be zero or negative when the weights alone do not fit; callers report that.
    """
    free_bytes = gpu.memory_bytes * gpu_memory_frac - weight_bytes_per_gpu(model, tensor_parallel)
    block_bytes = kv_bytes_per_token_per_gpu(model, tensor_parallel) * block_size_tokens
    return math.floor(free_bytes / block_bytes)
