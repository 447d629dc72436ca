"""Plain-number views of the profiles, and the architecture arithmetic both cost/ and kvcache/ need.

Profiles carry sources; the hot path wants bare floats. These frozen dataclasses are built once
per run from the validated profiles (units converted exactly once, here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from clustersim.config.profiles import (
    Cited,
    EfficiencyScales,
    EngineProfile,
    HardwareProfile,
    KVMemoryRule,
    ModelProfile,
    WeightScaling,
    engine_scales,
)
from clustersim.config.releases import runs_before
from clustersim.config.scenario import Precision

BYTES_PER_ELEMENT: dict[Precision, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5}


def precision_of_bytes(num_bytes: float) -> Precision:
    """The precision a model profile's ``weight_bytes_per_param`` stands for."""
    for name, size in BYTES_PER_ELEMENT.items():
        if size == num_bytes:
            return name
    raise ValueError(f"no precision stores {num_bytes} bytes per element")


@dataclass(frozen=True, slots=True)
class ModelShape:
    """A decoder-only transformer in numbers: dense or mixture-of-experts, standard or latent attention.

    ``num_experts == 0`` means every layer has a dense MLP of ``intermediate_size``. With experts,
    the first ``num_dense_layers`` layers are dense and the rest route each token to
    ``num_experts_per_token`` of ``num_experts`` experts of ``moe_intermediate_size`` (plus
    ``num_shared_experts`` always-on experts). ``kv_lora_rank > 0`` means multi-head latent attention:
    the KV cache holds one compressed vector of ``kv_lora_rank + qk_rope_head_dim`` per token and layer.
    """

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
    activation_bytes_per_element: float = 2.0
    weight_precision: Precision = "bf16"
    weight_scaling: WeightScaling = "tensor"  # "block": FP8 weights with 128 x 128 block scales
    qkv_bias: bool = False
    num_experts: int = 0
    num_experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_intermediate_size: int = 0
    num_dense_layers: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    loaded_weight_bytes: float = 0.0  # the published checkpoint as engines load it (0: parameters x precision)
    sliding_window_tokens: int = 0  # keys a sliding-window layer attends to (0: no such layer)
    num_sliding_window_layers: int = 0
    sliding_window_kv_share: float = 1.0  # KV a window layer keeps per context token (EngineProfile), of a full one's

    @classmethod
    def from_profile(
        cls,
        profile: ModelProfile,
        weight_precision: Precision | None = None,
        kv_cache_precision: Precision | None = None,
        weight_scaling: WeightScaling | None = None,
    ) -> ModelShape:
        """The model as profiled, optionally served with other weight or KV-cache precisions.

        Without overrides, weights keep the profile's ``weight_bytes_per_param`` and the KV cache is
        16-bit (the activation type), as vLLM's ``kv_cache_dtype: auto`` does. ``weight_scaling``
        (None): the published checkpoint's (its profile's ``weight_scaling``) when the weights keep its
        precision, else per tensor.
        """
        native = precision_of_bytes(profile.weight_bytes_per_param.value)
        weights = weight_precision or native
        kv = kv_cache_precision or "bf16"
        published = profile.weight_scaling.value if profile.weight_scaling is not None else "tensor"
        scaling = weight_scaling or (published if weights == native else "tensor")
        if scaling == "block" and weights != "fp8":
            raise ValueError(f"weight_scaling: block scales are FP8 weights', not {weights}")

        def opt(value: object, default: int = 0) -> int:
            cited = getattr(profile, str(value))
            return default if cited is None else int(cited.value)

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
            weight_bytes_per_param=BYTES_PER_ELEMENT[weights],
            kv_bytes_per_element=BYTES_PER_ELEMENT[kv],
            weight_precision=weights,
            weight_scaling=scaling,
            qkv_bias=bool(profile.qkv_bias.value) if profile.qkv_bias is not None else False,
            num_experts=opt("num_experts"),
            num_experts_per_token=opt("num_experts_per_token"),
            num_shared_experts=opt("num_shared_experts"),
            moe_intermediate_size=opt("moe_intermediate_size"),
            num_dense_layers=opt("num_dense_layers"),
            q_lora_rank=opt("q_lora_rank"),
            kv_lora_rank=opt("kv_lora_rank"),
            qk_nope_head_dim=opt("qk_nope_head_dim"),
            qk_rope_head_dim=opt("qk_rope_head_dim"),
            v_head_dim=opt("v_head_dim"),
            loaded_weight_bytes=loaded.value if (loaded := profile.loaded_weight_bytes) and weights == native else 0.0,
            sliding_window_tokens=opt("sliding_window_tokens"),
            num_sliding_window_layers=opt("num_sliding_window_layers"),
        )

    def with_precision(self, weights: Precision | None, kv_cache: Precision | None) -> ModelShape:
        """The same model with other weight and/or KV-cache precisions (``None`` keeps the current one)."""
        shape = self
        if weights is not None and weights != self.weight_precision:  # another format: scaled per tensor
            size = BYTES_PER_ELEMENT[weights]
            shape = replace(shape, weight_precision=weights, weight_bytes_per_param=size, weight_scaling="tensor",
                            loaded_weight_bytes=0.0)  # fmt: skip
        if kv_cache is not None:
            shape = replace(shape, kv_bytes_per_element=BYTES_PER_ELEMENT[kv_cache])
        return shape

    # ------------------------------------------------------------------ structure
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def num_dense_mlp_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def q_dim(self) -> int:
        """Query width: heads x head dim (MLA: heads x (no-position + rotary) dims)."""
        if self.is_mla:
            return self.num_attention_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def attention_out_dim(self) -> int:
        """Width of the attention output that enters the O projection."""
        if self.is_mla:
            return self.num_attention_heads * self.v_head_dim
        return self.num_attention_heads * self.head_dim

    @property
    def kv_cache_elements_per_token_per_layer(self) -> int:
        """Elements one token stores per layer (K and V; MLA: the compressed latent and the rotary key)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_dim

    # ------------------------------------------------------------------ parameters
    def attention_params_per_layer(self) -> int:
        """Attention projection weights (and QKV biases) of one layer.

        Standard: Q, K, V and O. MLA: the query down/up projections (with the low-rank norm), the joint
        KV down projection (latent + rotary key, with its norm), the KV up projection and O.
        """
        d = self.hidden_size
        if self.is_mla:
            heads = self.num_attention_heads
            q = d * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.q_dim
            kv_down = d * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
            kv_up = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv_down + kv_up + self.attention_out_dim * d
        bias = self.q_dim + 2 * self.kv_dim if self.qkv_bias else 0
        return d * self.q_dim + 2 * d * self.kv_dim + bias + self.q_dim * d

    def mlp_params(self, intermediate_size: int) -> int:
        """Up (and gate, if gated) and down projection weights of one MLP of ``intermediate_size``."""
        return (3 if self.gated_mlp else 2) * self.hidden_size * intermediate_size

    def mlp_params_per_layer(self) -> int:
        """Weights of one dense layer's MLP."""
        return self.mlp_params(self.intermediate_size)

    def expert_params(self) -> int:
        """Weights of one routed (or shared) expert."""
        return self.mlp_params(self.moe_intermediate_size)

    def router_params(self) -> int:
        """The gate that scores every expert for each token (DeepSeek-V3 adds a per-expert bias)."""
        return self.hidden_size * self.num_experts + (self.num_experts if self.is_mla else 0)

    def moe_layer_params(self, num_routed_experts: float) -> float:
        """MLP-side weights of one MoE layer holding ``num_routed_experts`` routed experts."""
        return (num_routed_experts + self.num_shared_experts) * self.expert_params() + self.router_params()

    def layer_linear_params(self) -> int:
        """GEMM weights of one dense layer (norm weights excluded: see :meth:`num_params`)."""
        return self.attention_params_per_layer() + self.mlp_params_per_layer()

    def _layers_params(self, num_routed_experts: float) -> float:
        d = self.hidden_size
        dense = self.num_dense_mlp_layers * (self.attention_params_per_layer() + self.mlp_params_per_layer() + 2 * d)
        moe = self.num_moe_layers * (
            self.attention_params_per_layer() + self.moe_layer_params(num_routed_experts) + 2 * d
        )
        return dense + moe

    def embedding_params(self) -> int:
        """Input embedding and LM head (one matrix if tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)

    def num_params(self) -> int:
        """Total parameters: layers (GEMMs, router, two RMSNorms each), final norm, embedding and LM head."""
        return round(self._layers_params(self.num_experts)) + self.hidden_size + self.embedding_params()

    def num_active_params(self) -> int:
        """Parameters one token uses: dense models all of them, MoE only its top-k routed experts."""
        if not self.is_moe:
            return self.num_params()
        return round(self._layers_params(self.num_experts_per_token)) + self.hidden_size + self.embedding_params()

    @property
    def embedding_bytes_per_param(self) -> float:
        """Bytes per weight of the embedding and LM head: quantized checkpoints keep both at 16 bits
        (llm-compressor FP8 recipes ``ignore=["lm_head"]``; NVIDIA ModelOpt checkpoints list ``lm_head``
        in ``exclude_modules``; embeddings are never quantized)."""
        return max(self.weight_bytes_per_param, self.activation_bytes_per_element)

    def head_shape(self) -> ModelShape:
        """The model as its LM head GEMM sees it: 16-bit weights (see :attr:`embedding_bytes_per_param`)."""
        if self.weight_bytes_per_param >= self.activation_bytes_per_element:
            return self
        sixteen_bit = self.activation_bytes_per_element
        return replace(self, weight_bytes_per_param=sixteen_bit, weight_precision="bf16", weight_scaling="tensor")

    def weight_bytes(self) -> float:
        """Bytes of all weights of one model copy in GPU memory: as loaded where the profile measured it
        (``loaded_weight_bytes``), else its parameters at their precision (embedding and LM head at 16 bits)."""
        return self.loaded_weight_bytes or self.computed_weight_bytes()

    def computed_weight_bytes(self) -> float:
        """Bytes of all weights of one model copy by parameter count (embedding and LM head at 16 bits)."""
        embedding = self.embedding_params()
        return (
            self.num_params() - embedding
        ) * self.weight_bytes_per_param + embedding * self.embedding_bytes_per_param

    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token occupies over all layers on one model copy."""
        return self.kv_layers * self.kv_cache_elements_per_token_per_layer * self.kv_bytes_per_element

    @property
    def kv_layers(self) -> float:
        """Layers whose KV cache grows with every token: the full-attention layers, and the sliding-window
        layers at the engine's ``sliding_window_kv_share`` (1: kept whole, as the model's other layers)."""
        sliding = self.num_sliding_window_layers
        return self.num_layers - sliding * (1.0 - self.sliding_window_kv_share)

    def with_sliding_window_kv_share(self, share: float) -> ModelShape:
        """The model as an engine that keeps ``share`` of a window layer's KV per token stores it."""
        return replace(self, sliding_window_kv_share=share) if self.num_sliding_window_layers else self

    def decode_attended_tokens(self, num_seqs: int, context_tokens: float) -> float:
        """Keys the decode queries of ``num_seqs`` sequences attend to, per layer on average over the
        layers: their whole ``context_tokens`` in a full-attention layer, the window in a sliding-window one.

        A sequence is charged the whole window in every window layer, even one whose context is not yet
        that long (a few tokens of the first steps of a short prompt): the step path and the closed-form
        decode path (:meth:`clustersim.cost.roofline.RooflineCostModel.decode_step_shape`) both need a
        cost affine in the summed context, and one rule for both keeps their results equal.
        """
        sliding = self.num_sliding_window_layers
        if not sliding:
            return context_tokens
        full = self.num_layers - sliding
        return (full * context_tokens + sliding * num_seqs * self.sliding_window_tokens) / self.num_layers

    def kv_heads_per_gpu(self, tensor_parallel: int) -> float:
        """KV heads each GPU stores: sharded, or replicated when there are fewer heads than GPUs."""
        return max(1.0, self.num_kv_heads / tensor_parallel)

    def layers_per_stage(self, pipeline_parallel: int) -> int:
        """Layers on the most loaded pipeline stage."""
        return -(-self.num_layers // pipeline_parallel)


def _counts(cited: Cited[dict[Precision, int]] | None) -> tuple[tuple[Precision, int], ...]:
    return tuple(sorted(cited.value.items())) if cited is not None else ()


def overlaps_host(engine: EngineProfile, engine_version: str | None, async_scheduling: bool | None = None) -> bool:
    """Whether a run of release ``engine_version`` overlaps the engine's host time with its GPU steps: as
    ``async_scheduling`` says where it is set, else by default from ``host_overlap_since_version`` on
    (from every release where the profile names none)."""
    if async_scheduling is not None:
        return async_scheduling
    since = engine.host_overlap_since_version
    return since is None or not runs_before(engine_version, since.value)


def _weight_only_rate(engine: EngineProfile, family: str | None, fitted: Cited[float] | None) -> float:
    """The compute rate of ``engine``'s weight-only GEMMs on ``family`` against its 16-bit ones: the rate its
    kernels' benchmark measured (``weight_only_rate_frac``; 1 where none is cited) times the fitted scale."""
    cited = (engine.weight_only_rate_frac or {}).get(family) if family is not None else None  # type: ignore[call-overload]
    return (cited.value if cited is not None else 1.0) * (fitted.value if fitted is not None else 1.0)


def _scaled_engine_spec(engine: EngineSpec, scales: EfficiencyScales, link_latency_s: float) -> EngineSpec:
    """``engine`` with the fitted scales that act on its own times: ``comm_latency_scale`` on its
    all-reduce latency (the GPU's link latency where it has none), ``eager_launch_scale`` on its eager
    and compiled launches."""
    if scales.comm_latency_scale is not None:
        latency_s = (engine.all_reduce_latency_s or link_latency_s) * scales.comm_latency_scale.value
        engine = replace(engine, all_reduce_latency_s=latency_s)
    if scales.eager_launch_scale is not None:
        scale = scales.eager_launch_scale.value
        engine = replace(
            engine,
            launch_overhead_per_layer_eager_s=engine.launch_overhead_per_layer_eager_s * scale,
            launch_overhead_per_kernel_eager_s=engine.launch_overhead_per_kernel_eager_s * scale,
            launch_overhead_per_layer_compiled_s=engine.launch_overhead_per_layer_compiled_s * scale,
        )
    return engine


def kernels_for(counts: tuple[tuple[Precision, int], ...], precision: Precision) -> int:
    """The count for weights of ``precision`` (FP16 reads BF16's; none given: 0)."""
    table = dict(counts)
    return table.get(precision, table.get("bf16", 0) if precision == "fp16" else 0)


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """A serving engine's per-step costs on top of the kernels, in seconds.

    The fixed per-step time lives on :class:`GpuSpec` (``step_overhead_s``), where it always was.
    """

    per_seq_overhead_s: float = 0.0
    launch_overhead_per_layer_eager_s: float = 0.0
    launch_overhead_per_layer_graph_s: float = 0.0
    # per kernel an MoE layer or MLA block launches beyond a dense layer's, in an eager step (EngineProfile)
    launch_overhead_per_kernel_eager_s: float = 0.0
    # per dense layer of a step no graph covers, run through compiled code (0: none, eager launches)
    launch_overhead_per_layer_compiled_s: float = 0.0
    # launch-bound kernels the op list does not price, by the weights' precision (EngineProfile)
    small_kernels_per_moe_layer: tuple[tuple[Precision, int], ...] = ()
    small_kernels_per_mla_layer: tuple[tuple[Precision, int], ...] = ()
    cuda_graph_max_seqs: int = 0
    sampling_per_seq_s: float = 0.0
    cuda_graph_mixed_steps: bool = False  # piecewise graphs: steps of up to cuda_graph_max_seqs tokens
    host_overlap_frac: float = 0.0  # of the host time, what runs while the GPU works (0: all of it in series)
    all_reduce_latency_s: float = 0.0  # the engine's own all-reduce kernels (0: the GPU profile's link latency)
    kv_memory_rule: KVMemoryRule = "static"  # how the KV cache is sized (EngineProfile.kv_memory_rule)
    runtime_memory_bytes: float = 0.0
    runtime_memory_tp_bytes: float = 0.0
    cuda_graph_pad_tokens: int = 1  # graphed steps run at 1, 2, 4, then multiples of this (1: no padding)
    all_reduce_overlap_frac: float = 0.0  # of the all-reduce time, what runs under other kernels
    step_overhead_per_worker_s: float = 0.0  # host time per step per GPU worker beyond the first
    frontend_per_request_s: float = 0.0  # the HTTP front end's work per request (EngineProfile)
    frontend_per_prompt_token_s: float = 0.0
    frontend_per_output_token_s: float = 0.0
    frontend_latency_s: float = 0.0  # a request's passage through it beyond its work (EngineProfile)
    frontend_tokenize_after_queued: bool = False  # tokenizing waits for the parses queued (EngineProfile)
    sliding_window_kv_share: float = 1.0  # KV a sliding-window layer keeps per token (EngineProfile)

    @classmethod
    def from_profile(cls, engine: EngineProfile, engine_version: str | None = None) -> EngineSpec:
        """``engine`` as a run of release ``engine_version`` (None: the profile's current) prices it."""

        def opt(cited: object) -> float:
            value = getattr(cited, "value", None)
            return 0.0 if value is None else float(value)

        return cls(
            per_seq_overhead_s=opt(engine.per_seq_overhead_s),
            launch_overhead_per_layer_eager_s=opt(engine.launch_overhead_per_layer_eager_s),
            launch_overhead_per_layer_graph_s=opt(engine.launch_overhead_per_layer_graph_s),
            launch_overhead_per_kernel_eager_s=opt(engine.launch_overhead_per_kernel_eager_s),
            launch_overhead_per_layer_compiled_s=opt(engine.launch_overhead_per_layer_compiled_s),
            small_kernels_per_moe_layer=_counts(engine.small_kernels_per_moe_layer),
            small_kernels_per_mla_layer=_counts(engine.small_kernels_per_mla_layer),
            cuda_graph_max_seqs=int(opt(engine.cuda_graph_max_seqs)),
            sampling_per_seq_s=opt(engine.sampling_per_seq_s),
            cuda_graph_mixed_steps=bool(engine.cuda_graph_mixed_steps and engine.cuda_graph_mixed_steps.value),
            host_overlap_frac=opt(engine.host_overlap_frac) if overlaps_host(engine, engine_version) else 0.0,
            all_reduce_latency_s=opt(engine.all_reduce_latency_s),
            kv_memory_rule=engine.kv_memory_rule.value if engine.kv_memory_rule is not None else "static",
            runtime_memory_bytes=opt(engine.runtime_memory_bytes),
            runtime_memory_tp_bytes=opt(engine.runtime_memory_tp_bytes),
            cuda_graph_pad_tokens=max(1, int(opt(engine.cuda_graph_pad_tokens) or 1)),
            all_reduce_overlap_frac=opt(engine.all_reduce_overlap_frac),
            step_overhead_per_worker_s=opt(engine.step_overhead_per_worker_s),
            frontend_per_request_s=opt(engine.frontend_per_request_s) + opt(engine.frontend_fitted_per_request_s),
            frontend_per_prompt_token_s=opt(engine.frontend_per_prompt_token_s),
            frontend_per_output_token_s=opt(engine.frontend_per_output_token_s)
            + opt(engine.frontend_fitted_per_output_token_s),
            frontend_latency_s=opt(engine.frontend_fitted_latency_s),
            frontend_tokenize_after_queued=bool(
                engine.frontend_tokenize_after_queued and engine.frontend_tokenize_after_queued.value
            ),
            sliding_window_kv_share=opt(share) if (share := engine.sliding_window_kv_share) is not None else 1.0,
        )


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU and the serving engine on it, in numbers.

    The fields after ``step_overhead_s`` default to an ideal device (no kernel latency, a sharp
    roofline, attention as efficient as GEMMs), so a hand-built spec prices the textbook roofline.
    """

    name: str
    memory_bytes: float
    hbm_bandwidth_bytes_per_s: float
    peak_flops_per_s: float
    interconnect_bandwidth_bytes_per_s: float
    interconnect_latency_s: float
    compute_efficiency_frac: float
    memory_efficiency_frac: float
    step_overhead_s: float
    peak_fp8_flops_per_s: float | None = None
    peak_fp4_flops_per_s: float | None = None
    interconnect_efficiency_frac: float = 1.0
    pcie_bandwidth_bytes_per_s: float | None = None
    hourly_price_usd: float | None = None
    gemm_kernel_latency_s: float = 0.0
    roofline_blend_exponent: float = math.inf
    elementwise_kernel_latency_s: float = 0.0
    decode_attention_memory_efficiency_frac: float | None = None
    decode_attention_latency_s: float = 0.0
    decode_attention_half_occupancy_seqs: float = 0.0
    prefill_attention_compute_efficiency_frac: float | None = None
    prefill_attention_latency_s: float = 0.0
    prefill_attention_half_efficiency_tokens: float = 0.0  # 0: one efficiency at every length
    prefill_attention_half_occupancy_tiles: float = 0.0  # 0: one efficiency however few query blocks
    memory_reported_bytes: float | None = None  # what the CUDA driver reports as total (None: memory_bytes)
    elementwise_memory_efficiency_frac: float | None = None  # None: memory_efficiency_frac
    moe_efficiency_scale: float = 1.0  # the routed experts' grouped GEMMs against dense GEMMs
    block_efficiency_scale: float = 1.0  # GEMMs of block-scaled FP8 weights against per-tensor FP8 GEMMs
    weight_only_compute_scale: float = 1.0  # GEMMs of weights no tensor-core path takes, dequantized in the kernel
    sustained_flops_per_s: float | None = None  # 16-bit GEMMs under continuous load (None: no limit known)
    sustained_fp8_flops_per_s: float | None = None  # FP8 GEMMs under continuous load
    engine: EngineSpec = field(default_factory=EngineSpec)

    @classmethod
    def from_profiles(
        cls, hardware: HardwareProfile, engine: EngineProfile, engine_version: str | None = None
    ) -> GpuSpec:
        """The GPU as ``engine`` runs it: the hardware profile's efficiencies times the engine's scales
        on the GPU's family, for a run of release ``engine_version`` (None: the profile's current)."""

        def opt(cited: object, default: float | None) -> float | None:
            value = getattr(cited, "value", None)
            return default if value is None else float(value)

        def num(cited: object, default: float) -> float:
            value = opt(cited, default)
            assert value is not None
            return value

        engine_spec = EngineSpec.from_profile(engine, engine_version)
        family = hardware.family.value if hardware.family is not None else None
        scales = engine_scales(engine, family, engine_version)

        def scaled(value: float, scale: Cited[float] | None) -> float:
            return value if scale is None else min(1.0, value * scale.value)

        memory_frac = hardware.memory_efficiency_frac.value
        elementwise = scaled(memory_frac, scales.elementwise_scale)
        latency = scales.kernel_latency_scale.value if scales.kernel_latency_scale is not None else 1.0
        spec = cls(
            name=hardware.name,
            memory_bytes=hardware.memory_bytes.value,
            hbm_bandwidth_bytes_per_s=hardware.hbm_bandwidth_bytes_per_s.value,
            peak_flops_per_s=hardware.peak_bf16_flops_per_s.value,
            interconnect_bandwidth_bytes_per_s=hardware.interconnect_bandwidth_bytes_per_s.value,
            interconnect_latency_s=hardware.interconnect_latency_s.value,
            compute_efficiency_frac=hardware.compute_efficiency_frac.value,
            memory_efficiency_frac=hardware.memory_efficiency_frac.value,
            step_overhead_s=engine.step_overhead_s.value,
            peak_fp8_flops_per_s=hardware.peak_fp8_flops_per_s.value,
            peak_fp4_flops_per_s=opt(hardware.peak_fp4_flops_per_s, None),
            interconnect_efficiency_frac=num(hardware.interconnect_efficiency_frac, 1.0),
            pcie_bandwidth_bytes_per_s=opt(hardware.pcie_bandwidth_bytes_per_s, None),
            hourly_price_usd=opt(hardware.hourly_price_usd, None),
            gemm_kernel_latency_s=num(hardware.gemm_kernel_latency_s, 0.0),
            roofline_blend_exponent=num(hardware.roofline_blend_exponent, math.inf),
            elementwise_kernel_latency_s=num(hardware.elementwise_kernel_latency_s, 0.0),
            decode_attention_memory_efficiency_frac=opt(hardware.decode_attention_memory_efficiency_frac, None),
            decode_attention_latency_s=num(hardware.decode_attention_latency_s, 0.0),
            decode_attention_half_occupancy_seqs=num(hardware.decode_attention_half_occupancy_seqs, 0.0),
            prefill_attention_compute_efficiency_frac=opt(hardware.prefill_attention_compute_efficiency_frac, None),
            prefill_attention_latency_s=num(hardware.prefill_attention_latency_s, 0.0),
            prefill_attention_half_efficiency_tokens=num(hardware.prefill_attention_half_efficiency_tokens, 0.0),
            prefill_attention_half_occupancy_tiles=num(hardware.prefill_attention_half_occupancy_tiles, 0.0),
            memory_reported_bytes=opt(hardware.memory_reported_bytes, None),
            sustained_flops_per_s=opt(hardware.sustained_bf16_flops_per_s, None),
            sustained_fp8_flops_per_s=opt(hardware.sustained_fp8_flops_per_s, None),
            engine=engine_spec,
        )
        return replace(
            spec,
            compute_efficiency_frac=scaled(spec.compute_efficiency_frac, scales.gemm_compute_scale),
            memory_efficiency_frac=scaled(memory_frac, scales.gemm_memory_scale),
            elementwise_memory_efficiency_frac=elementwise if elementwise != memory_frac else None,
            prefill_attention_compute_efficiency_frac=scaled(
                spec.prefill_attention_compute_efficiency_frac or spec.compute_efficiency_frac,
                scales.prefill_attention_scale,
            )
            if scales.prefill_attention_scale is not None
            else spec.prefill_attention_compute_efficiency_frac,
            decode_attention_memory_efficiency_frac=scaled(
                spec.decode_attention_memory_efficiency_frac or memory_frac, scales.decode_attention_scale
            )
            if scales.decode_attention_scale is not None
            else spec.decode_attention_memory_efficiency_frac,
            interconnect_efficiency_frac=scaled(spec.interconnect_efficiency_frac, scales.comm_scale),
            gemm_kernel_latency_s=spec.gemm_kernel_latency_s * latency,
            elementwise_kernel_latency_s=spec.elementwise_kernel_latency_s * latency,
            decode_attention_latency_s=spec.decode_attention_latency_s * latency,
            prefill_attention_latency_s=spec.prefill_attention_latency_s * latency,
            moe_efficiency_scale=scales.moe_scale.value if scales.moe_scale is not None else 1.0,
            block_efficiency_scale=scales.block_scale.value if scales.block_scale is not None else 1.0,
            weight_only_compute_scale=_weight_only_rate(engine, family, scales.weight_only_scale),
            engine=_scaled_engine_spec(engine_spec, scales, spec.interconnect_latency_s),
        )

    @property
    def usable_memory_bytes(self) -> float:
        """The memory an engine sizes itself from: the driver's total (less than the datasheet's)."""
        return self.memory_reported_bytes if self.memory_reported_bytes is not None else self.memory_bytes

    def runs_weight_only(self, precision: Precision) -> bool:
        """Whether GEMMs of ``precision`` weights run weight-only here: narrower than 16 bits, with no
        tensor-core path of their own (:meth:`gemm_peak_flops_per_s` falls back to the 16-bit peak)."""
        return (precision == "fp4" and self.peak_fp4_flops_per_s is None) or (
            precision == "fp8" and self.peak_fp8_flops_per_s is None
        )

    def gemm_peak_flops_per_s(self, precision: Precision) -> float:
        """Tensor-core peak for GEMMs with ``precision`` weights (and activations quantized to match).

        FP8 and FP4 GEMMs use their own peaks where the GPU has them; otherwise the weights are
        dequantized and the GEMM runs at the 16-bit peak (weight-only quantization). FP4 weights on a
        GPU without FP4 tensor cores meet 16-bit activations, not FP8 ones: vLLM's MXFP4 MoE kernels on
        Hopper take only bfloat16 activations (``Mxfp4Config.get_supported_act_dtypes`` and the SM90
        backends FlashInfer MXFP4 x BF16, triton_kernels and Marlin in
        vllm/model_executor/layers/quantization/mxfp4.py), as Marlin's NVFP4 path does.
        """
        if precision == "fp4" and self.peak_fp4_flops_per_s is not None:
            return self.peak_fp4_flops_per_s
        if precision == "fp8" and self.peak_fp8_flops_per_s is not None:
            return self.peak_fp8_flops_per_s
        return self.peak_flops_per_s  # 16-bit weights, or weights run weight-only (:meth:`runs_weight_only`)

    def gemm_sustained_flops_per_s(self, precision: Precision) -> float:
        """The most FLOP/s GEMMs with ``precision`` weights hold under continuous load (``inf``: no limit
        measured). A busy GPU runs at its board power limit, and the clock it holds there caps what
        compute-bound kernels reach, below what short timed bursts of them show (``validation/kernels/
        sustained``: an H100 SXM's Llama-3.1-70B GEMMs at 4,096 tokens fall from 720 to 697 TFLOP/s in
        BF16 within 10 s, its SM clock from 1,980 to ~1,350 MHz at 700 W). FP4 weights on a GPU without
        FP4 tensor cores run the 16-bit path and its limit; a GPU's FP4 path has none measured."""
        if precision == "fp4":
            return math.inf if self.peak_fp4_flops_per_s is not None else self._sustained(self.sustained_flops_per_s)
        if precision == "fp8" and self.peak_fp8_flops_per_s is not None:
            return self._sustained(self.sustained_fp8_flops_per_s)
        return self._sustained(self.sustained_flops_per_s)

    @staticmethod
    def _sustained(value: float | None) -> float:
        return math.inf if value is None else value

    def in_bursts(self) -> GpuSpec:
        """This GPU timed in short bursts (single kernels timed apart), below its power limit."""
        return replace(self, sustained_flops_per_s=None, sustained_fp8_flops_per_s=None)


def blocks_for_tokens(num_tokens: int, block_size_tokens: int) -> int:
    """Blocks needed to hold ``num_tokens`` tokens (ceiling division)."""
    return -(-num_tokens // block_size_tokens)


def weight_bytes_per_gpu(model: ModelShape, tensor_parallel: int, pipeline_parallel: int = 1) -> float:
    """Weight bytes on each GPU: a 1/TP shard of the model, or of the most loaded pipeline stage.

    With pipeline parallelism the first stage holds the embedding and the last the LM head; both
    are counted on the same (worst) stage, a small over-estimate.
    """
    if pipeline_parallel == 1:
        return model.weight_bytes() / tensor_parallel
    layers_share = model.layers_per_stage(pipeline_parallel) / model.num_layers
    layer_params = model.num_params() - model.embedding_params() - model.hidden_size
    stage_bytes = (layers_share * layer_params + model.hidden_size) * model.weight_bytes_per_param
    as_loaded = model.weight_bytes() / model.computed_weight_bytes()  # a measured load, in proportion
    return as_loaded * (stage_bytes + model.embedding_params() * model.embedding_bytes_per_param) / tensor_parallel


def kv_bytes_per_token_per_gpu(model: ModelShape, tensor_parallel: int, pipeline_parallel: int = 1) -> float:
    """KV bytes per token on each GPU of a TP group (all its stage's layers).

    Standard attention shards KV heads over TP (replicating them when there are fewer heads than
    GPUs); MLA's compressed latent is replicated on every GPU of the group.
    """
    layers = model.layers_per_stage(pipeline_parallel) * model.kv_layers / model.num_layers
    if model.is_mla:
        return layers * model.kv_cache_elements_per_token_per_layer * model.kv_bytes_per_element
    return 2.0 * layers * model.kv_heads_per_gpu(tensor_parallel) * model.head_dim * model.kv_bytes_per_element


def activation_reserve_bytes(model: ModelShape, tensor_parallel: int, max_num_batched_tokens: int) -> float:
    """Memory the engine keeps free for one forward pass of ``max_num_batched_tokens`` tokens on one GPU.

    The largest live tensors of a layer: the residual stream and normed input (2 x hidden), the QKV
    output, and the gate/up output with the activated product (3 x intermediate / TP); plus
    float32 logits for up to 256 sampled sequences. vLLM sizes this by a profiling forward pass;
    this is its analytic equivalent.
    """
    ffn = model.moe_intermediate_size * max(1, model.num_experts_per_token) if model.is_moe else 0
    ffn = max(ffn, model.intermediate_size)
    per_token = 2 * model.hidden_size + (model.q_dim + 2 * model.kv_dim) / tensor_parallel + 3 * ffn / tensor_parallel
    logits = min(256, max_num_batched_tokens) * model.vocab_size / tensor_parallel * 4.0
    return max_num_batched_tokens * per_token * model.activation_bytes_per_element + logits


def kv_capacity_blocks(
    model: ModelShape,
    gpu: GpuSpec,
    tensor_parallel: int,
    gpu_memory_frac: float,
    block_size_tokens: int,
    pipeline_parallel: int = 1,
    reserve_bytes: float = 0.0,
) -> int:
    """Paged KV blocks one replica holds: (memory x usable fraction - weight shard - reserve) / block bytes.

    May be zero or negative when the weights alone do not fit; callers report that.
    """
    free_bytes = (
        gpu.usable_memory_bytes * gpu_memory_frac
        - weight_bytes_per_gpu(model, tensor_parallel, pipeline_parallel)
        - reserve_bytes
    )
    block_bytes = kv_bytes_per_token_per_gpu(model, tensor_parallel, pipeline_parallel) * block_size_tokens
    return math.floor(free_bytes / block_bytes)


@dataclass(frozen=True, slots=True)
class KVMemory:
    """How one GPU of a replica splits its memory, as its engine computes it (bytes)."""

    total_bytes: float
    budget_bytes: float  # what the weights may take: the engine's fraction of the total, or all of it (of_free)
    weight_bytes: float
    activation_bytes: float
    runtime_bytes: float
    kv_bytes: float  # left for the KV cache

    def describe(self, rule: str) -> str:
        gib = 2.0**30
        return (
            f"{self.total_bytes / gib:.2f} GiB reported, rule {rule}: weights {self.weight_bytes / gib:.2f} GiB, "
            f"activations {self.activation_bytes / gib:.2f} GiB, runtime {self.runtime_bytes / gib:.2f} GiB, "
            f"KV cache {self.kv_bytes / gib:.2f} GiB"
        )


def engine_kv_memory(
    model: ModelShape,
    gpu: GpuSpec,
    tensor_parallel: int,
    pipeline_parallel: int,
    gpu_memory_frac: float,
    activation_bytes: float,
    extra_weight_bytes: float = 0.0,
) -> KVMemory:
    """The KV cache one GPU holds by its engine's rule (:attr:`EngineSpec.kv_memory_rule`).

    ``of_total`` (vLLM ``gpu_memory_utilization``, vllm/v1/worker/gpu_worker.py
    ``determine_available_memory``): ``f x total - (weights + profile-run activation peak + memory
    outside torch)``. ``static`` (SGLang ``mem_fraction_static``): ``f x total - weights``; activations
    and CUDA graphs live in the rest, and only what exceeds it comes off the KV cache. ``of_free``
    (TensorRT-LLM ``KvCacheConfig.free_gpu_memory_fraction``): ``f x`` the memory still free once the
    weights, activations and runtime buffers are allocated.
    """
    engine = gpu.engine
    total = gpu.usable_memory_bytes
    weights = weight_bytes_per_gpu(model, tensor_parallel, pipeline_parallel) + extra_weight_bytes
    runtime = engine.runtime_memory_bytes + (engine.runtime_memory_tp_bytes if tensor_parallel > 1 else 0.0)
    budget = total * gpu_memory_frac
    if engine.kv_memory_rule == "of_total":
        kv = budget - weights - activation_bytes - runtime
    elif engine.kv_memory_rule == "of_free":  # the fraction is of what the weights and buffers leave
        budget = total
        kv = gpu_memory_frac * (total - weights - activation_bytes - runtime)
    else:
        kv = budget - weights - max(0.0, activation_bytes + runtime - (total - budget))
    return KVMemory(total, budget, weights, activation_bytes, runtime, kv)
