"""Hardware, model and engine profiles: data files where every number carries its source."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import Field

from clustersim.config.scenario import StrictModel

T = TypeVar("T")


class Cited(StrictModel, Generic[T]):
    """A number (or flag) together with where it comes from."""

    value: T
    source: str = Field(min_length=3)


class HardwareProfile(StrictModel):
    """One GPU: datasheet peaks and the achievable fractions measured on it."""

    name: str
    aliases: tuple[str, ...] = ()
    memory_bytes: Cited[float]
    hbm_bandwidth_bytes_per_s: Cited[float]
    peak_bf16_flops_per_s: Cited[float]
    peak_fp8_flops_per_s: Cited[float | None]
    interconnect_bandwidth_bytes_per_s: Cited[float]
    interconnect_latency_s: Cited[float]
    compute_efficiency_frac: Cited[float]
    memory_efficiency_frac: Cited[float]


class ModelProfile(StrictModel):
    """A decoder-only transformer's architecture, as in its ``config.json``."""

    name: str
    aliases: tuple[str, ...] = ()
    source: str = Field(min_length=3)
    num_layers: Cited[int]
    hidden_size: Cited[int]
    num_attention_heads: Cited[int]
    num_kv_heads: Cited[int]
    head_dim: Cited[int]
    intermediate_size: Cited[int]
    vocab_size: Cited[int]
    gated_mlp: Cited[bool]
    tied_embeddings: Cited[bool]
    max_model_len_tokens: Cited[int]
    weight_bytes_per_param: Cited[float]
    published_params: Cited[float]


class EngineProfile(StrictModel):
    """What a serving engine adds to every step on top of the GPU kernels."""

    name: str
    aliases: tuple[str, ...] = ()
    step_overhead_s: Cited[float]
