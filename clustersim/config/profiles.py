"""Hardware, model and engine profiles: data files where every number carries its source."""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

from pydantic import Field, field_validator, model_validator

from clustersim.config.base import StrictModel
from clustersim.config.memorytiers import GpuMemoryRule
from clustersim.config.releases import checked_release, runs_before
from clustersim.config.reserve import DecodeReserve, SeqsRule

T = TypeVar("T")
# how an engine sizes its KV cache from the GPU's memory (see EngineProfile)
KVMemoryRule = Literal["of_total", "static", "of_free"]
Precision = Literal["bf16", "fp16", "fp8", "fp4"]  # number formats of weights and KV caches
# how FP8 weights carry their scales: one per tensor or output channel, applied after the GEMM ("tensor"),
# or one per 128 x 128 weight block with one per 128 activations of a token, applied inside it ("block",
# DeepSeek-V3's format: config.json quantization_config.weight_block_size [128, 128])
WeightScaling = Literal["tensor", "block"]
# GPU generations whose kernels an engine profile scales together (EngineProfile.efficiency)
GpuFamily = Literal["ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4"]

# fields that may be zero (every other number of a profile must be positive)
MAY_BE_ZERO = frozenset({"num_dense_layers", "num_shared_experts", "sliding_window_kv_share"})
WEIGHT_BYTES_PER_PARAM = (2.0, 1.0, 0.5)  # bf16/fp16, fp8, fp4: architecture.BYTES_PER_ELEMENT
# (c^p + m^p)^(1/p) lies between max(c, m) and c + m only for p >= 1 (the fit's own lower bound)
AT_LEAST_ONE = {"roofline_blend_exponent": "at least 1 (1 adds compute and memory time; larger tends to their maximum)"}


def check_physical(profile: StrictModel) -> None:
    """Raise ValueError for a profile number that cannot be physical: fractions (``*_frac``) outside
    (0, 1], times (``*_s``, rates ``*_per_s`` aside) negative, anything else not positive (a few counts may be zero)."""
    for name in type(profile).model_fields:
        cited = getattr(profile, name)
        value: Any = cited.value if isinstance(cited, Cited) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if name.endswith("_frac"):
            ok, rule = 0 < value <= 1, "a fraction in (0, 1]"
        elif name.endswith("_s") and not name.endswith("_per_s"):
            ok, rule = value >= 0, "a time of at least 0 s"
        elif name in AT_LEAST_ONE:
            ok, rule = value >= 1, AT_LEAST_ONE[name]
        elif name in MAY_BE_ZERO:
            ok, rule = value >= 0, "at least 0"
        else:
            ok, rule = value > 0, "positive"
        if not ok:
            raise ValueError(f"{name}: {value:g} must be {rule}")


class _Physical(StrictModel):
    @model_validator(mode="after")
    def _physical(self) -> Any:
        check_physical(self)
        return self


class Cited(StrictModel, Generic[T]):
    """A number (or flag) together with where it comes from."""

    value: T
    source: str = Field(min_length=3)


class HardwareProfile(_Physical):
    """One GPU: datasheet peaks, links, the achievable fractions measured on it, and a planning price.

    The efficiencies and latencies under "calibrated" are fitted by ``clustersim validate-cost`` on
    measured kernel times; each source says which rows and what error the fit reached.
    """

    name: str
    aliases: tuple[str, ...] = ()
    family: Cited[GpuFamily] | None = None
    memory_bytes: Cited[float]
    memory_reported_bytes: Cited[float] | None = None
    hbm_bandwidth_bytes_per_s: Cited[float]
    peak_bf16_flops_per_s: Cited[float]
    peak_fp8_flops_per_s: Cited[float | None]
    peak_fp4_flops_per_s: Cited[float | None] | None = None
    interconnect_bandwidth_bytes_per_s: Cited[float]
    interconnect_latency_s: Cited[float]
    interconnect_efficiency_frac: Cited[float] | None = None
    pcie_bandwidth_bytes_per_s: Cited[float] | None = None
    hourly_price_usd: Cited[float] | None = None
    # measured: the tensor-core rate held under continuous load, at the board's power limit
    sustained_bf16_flops_per_s: Cited[float] | None = None
    sustained_fp8_flops_per_s: Cited[float] | None = None
    # calibrated: dense GEMMs
    compute_efficiency_frac: Cited[float]
    memory_efficiency_frac: Cited[float]
    gemm_kernel_latency_s: Cited[float] | None = None
    roofline_blend_exponent: Cited[float] | None = None
    # calibrated: element-wise kernels and attention
    elementwise_kernel_latency_s: Cited[float] | None = None
    decode_attention_memory_efficiency_frac: Cited[float] | None = None
    decode_attention_latency_s: Cited[float] | None = None
    decode_attention_half_occupancy_seqs: Cited[float] | None = None
    prefill_attention_compute_efficiency_frac: Cited[float] | None = None
    prefill_attention_latency_s: Cited[float] | None = None
    prefill_attention_half_efficiency_tokens: Cited[float] | None = None
    prefill_attention_half_occupancy_tiles: Cited[float] | None = None


class ModelProfile(_Physical):
    """A decoder-only transformer's architecture, as in its ``config.json``.

    Mixture-of-experts fields (``num_experts`` ...) and multi-head latent attention fields
    (``kv_lora_rank`` ...) are absent for dense, standard-attention models.
    """

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
    qkv_bias: Cited[bool] | None = None
    published_active_params: Cited[float] | None = None
    # mixture of experts
    num_experts: Cited[int] | None = None
    num_experts_per_token: Cited[int] | None = None
    num_shared_experts: Cited[int] | None = None
    moe_intermediate_size: Cited[int] | None = None
    num_dense_layers: Cited[int] | None = None
    # multi-head latent attention (DeepSeek-V2/V3)
    q_lora_rank: Cited[int] | None = None
    kv_lora_rank: Cited[int] | None = None
    qk_nope_head_dim: Cited[int] | None = None
    qk_rope_head_dim: Cited[int] | None = None
    v_head_dim: Cited[int] | None = None
    # how the published checkpoint's FP8 weights are scaled (absent: per tensor or channel)
    weight_scaling: Cited[WeightScaling] | None = None
    # bytes one copy's weights take in GPU memory as engines load the published checkpoint, where
    # parameters x weight_bytes_per_param misstate it (mixed-precision checkpoints, repacked kernels' layouts)
    loaded_weight_bytes: Cited[float] | None = None
    # sliding-window attention: this many of the layers attend only to the last sliding_window_tokens keys
    sliding_window_tokens: Cited[int] | None = None
    num_sliding_window_layers: Cited[int] | None = None

    @model_validator(mode="after")
    def _sliding_window(self) -> ModelProfile:
        window, layers = self.sliding_window_tokens, self.num_sliding_window_layers
        if (window is None) != (layers is None):
            raise ValueError("sliding_window_tokens and num_sliding_window_layers go together: give both or neither")
        if window is not None and layers is not None:
            if window.value < 1:
                raise ValueError(f"sliding_window_tokens: {window.value} must be at least 1")
            if not 0 < layers.value <= self.num_layers.value:
                raise ValueError(
                    f"num_sliding_window_layers: {layers.value} must be within 1..num_layers ({self.num_layers.value})"
                )
            if self.kv_lora_rank is not None:
                raise ValueError(
                    "num_sliding_window_layers: sliding windows of latent (MLA) attention are not modelled"
                )
        return self

    @model_validator(mode="after")
    def _stored_precision(self) -> ModelProfile:
        if self.weight_bytes_per_param.value not in WEIGHT_BYTES_PER_PARAM:
            raise ValueError(
                f"weight_bytes_per_param: {self.weight_bytes_per_param.value:g} is not a precision clustersim "
                "models (2: bf16/fp16, 1: fp8, 0.5: fp4)"
            )
        block = self.weight_scaling is not None and self.weight_scaling.value == "block"
        if block and self.weight_bytes_per_param.value != 1:
            raise ValueError("weight_scaling: block scales are FP8 weights' (weight_bytes_per_param 1)")
        return self


class EfficiencyScales(_Physical):
    """How an engine's kernels fare on one GPU family against the GPU profile's measured fractions.

    Each scale multiplies one fraction of the GPU profile (the product is capped at 1):
    ``gemm_compute_scale`` and ``gemm_memory_scale`` the dense GEMMs' compute and memory efficiency,
    ``prefill_attention_scale`` and ``decode_attention_scale`` attention's, ``elementwise_scale`` the
    memory-bound element-wise kernels', ``moe_scale`` both efficiencies of the routed experts' grouped
    GEMMs, ``comm_scale`` the interconnect efficiency of all-reduces, ``comm_latency_scale`` the latency
    of one all-reduce (the engine's ``all_reduce_latency_s``, else the GPU profile's link latency; this
    one is not capped), ``kernel_latency_scale`` the GPU profile's fixed time per kernel (GEMM,
    element-wise and both attention latencies: what a small batch's step is made of; not capped either),
    ``eager_launch_scale`` the engine's eager launch times (``launch_overhead_per_layer_eager_s`` and
    ``launch_overhead_per_kernel_eager_s``; not capped), ``block_scale`` both efficiencies of GEMMs
    whose FP8 weights carry block scales (dense and grouped), against per-tensor FP8 GEMMs',
    ``weight_only_scale`` the compute efficiency of GEMMs whose weights are narrower than any tensor-core
    path of the GPU (FP4 on Hopper and Ampere, FP8 on Ampere: dequantized inside weight-only kernels such
    as Marlin, which vLLM's log warns "may degrade performance for compute-heavy workloads").
    Absent: 1.
    """

    gemm_compute_scale: Cited[float] | None = None
    gemm_memory_scale: Cited[float] | None = None
    prefill_attention_scale: Cited[float] | None = None
    decode_attention_scale: Cited[float] | None = None
    elementwise_scale: Cited[float] | None = None
    moe_scale: Cited[float] | None = None
    comm_scale: Cited[float] | None = None
    comm_latency_scale: Cited[float] | None = None
    kernel_latency_scale: Cited[float] | None = None
    eager_launch_scale: Cited[float] | None = None
    block_scale: Cited[float] | None = None
    weight_only_scale: Cited[float] | None = None


class KernelRelease(StrictModel):
    """Kernels an engine gained on one GPU family in one release.

    A run of an older release (the scenario's ``cluster.engine_version`` below ``since_version``) has
    the engine's efficiency scales on ``gpu_family`` multiplied by ``before``: how much slower the
    kernels it ran then were, each factor with its source (a measurement of the same engine with and
    without them). Runs without a version are of the profile's current release.
    """

    gpu_family: GpuFamily
    since_version: str
    before: EfficiencyScales

    @field_validator("since_version")
    @classmethod
    def _release(cls, text: str) -> str:
        return checked_release(text)


class EngineSchedulerDefaults(StrictModel):
    """An engine's defaults for the scenario's ``scheduler`` section."""

    policy: Cited[str] | None = None
    max_num_seqs: Cited[int] | None = None
    max_num_batched_tokens: Cited[int] | None = None
    decode_reserve: Cited[DecodeReserve] | None = None
    # the running-request cap by the replica's KV pool, where the scenario sets no max_num_seqs
    max_num_seqs_rule: Cited[SeqsRule] | None = None


class EngineKVDefaults(StrictModel):
    """An engine's defaults for the scenario's ``kv`` section."""

    prefix_caching: Cited[bool] | None = None
    watermark_frac: Cited[float] | None = None
    block_size_tokens: Cited[int] | None = None
    gpu_memory_frac: Cited[float] | None = None
    # the fraction by GPUs per replica (TP x PP): the value at the largest key not above them
    gpu_memory_frac_by_gpus: Cited[dict[int, float]] | None = None
    # from a release on: the prefill chunk, CUDA-graph cap and memory fraction by the GPU's memory
    # (replaces the two above and the scheduler's max_num_batched_tokens where the scenario leaves them)
    gpu_memory_rule: Cited[GpuMemoryRule] | None = None


class EngineProfile(_Physical):
    """What a serving engine adds to every step on top of the GPU kernels.

    The host (CPU) time of a step is ``step_overhead_s + num_seqs x (per_seq_overhead_s +
    sampling_per_seq_s)``, plus its launches: ``num_layers x launch_overhead_per_layer_graph_s`` when it
    replays a CUDA graph; else ``num_layers x launch_overhead_per_layer_eager_s`` (one dense layer's
    kernels launched one at a time) and ``launch_overhead_per_kernel_eager_s`` for each kernel an MoE
    layer or MLA attention block launches beyond a dense grouped-query layer's (its extra GEMMs of the
    op list and its small kernels below). Eager launches run ahead of the GPU, so only the part the
    step's kernels do not cover adds to it. ``launch_overhead_per_layer_compiled_s``: an engine that
    compiles its model (vLLM V1's torch.compile) runs a step no graph covers through the compiled code,
    whose launches cost this per dense layer instead of ``launch_overhead_per_layer_eager_s`` (which
    then applies with ``cluster.cuda_graphs: false`` only: the engine's eager mode compiles nothing).
    ``small_kernels_per_moe_layer`` and ``small_kernels_per_mla_layer``:
    by the weights' precision (block-FP8 weights add an activation-quantisation kernel before each GEMM),
    the launch-bound kernels the engine runs in each MoE layer (routing top-k, expert sort and alignment,
    activation quantisation, the reduction of the experts' outputs) and each MLA attention block (its
    extra norms, quantisation, the absorbed-weight copies) beyond those the roofline prices; each takes
    at least the GPU's ``elementwise_kernel_latency_s``, in a CUDA graph or not. An engine that
    schedules the next step while the GPU runs this one (vLLM V1 async scheduling, SGLang's overlap
    scheduler) hides ``host_overlap_frac`` of it: a step lasts ``(1 - f) x host + max(f x host,
    GPU time)``; without it (``None``) host and GPU time add up. ``host_overlap_since_version``: the
    first release that overlaps by default (vLLM's async scheduling from 0.14.0); a run of an earlier
    release (``cluster.engine_version``) adds host and GPU time unless ``cluster.async_scheduling`` turns
    it on. ``all_reduce_latency_s``: the
    latency of the engine's own all-reduce kernels, replacing the GPU profile's (NCCL) link latency;
    ``all_reduce_overlap_frac``: the share of all-reduce time the engine hides under other kernels
    (fused or overlapped communication). ``step_overhead_per_worker_s``: host time per step for each
    GPU worker beyond the first (sending each step's inputs to the tensor- and pipeline-parallel
    workers), added to ``step_overhead_s``.
    ``cuda_graph_mixed_steps``: CUDA graphs also cover steps with prompt tokens, up to
    ``cuda_graph_max_seqs`` tokens in all (piecewise graphs, vLLM V1); otherwise only pure-decode
    steps of up to that many sequences replay a graph; a replayed graph computes the step padded to
    the next captured size (1, 2, 4, then multiples of ``cuda_graph_pad_tokens``). ``kv_memory_rule``:
    how the engine sizes its
    KV cache from the memory the GPU reports (``memory_reported_bytes``) with ``f`` the scenario's
    ``kv.gpu_memory_frac`` (the engine's default unless set): ``of_total`` (vLLM:
    ``f x total - weights - activation peak - runtime``), ``static`` (SGLang's
    ``mem_fraction_static``: ``f x total - weights``, activations outside), ``of_free`` (TensorRT-LLM's
    ``free_gpu_memory_fraction``: ``f x (total - weights - activations - runtime)``); ``runtime_memory_bytes``
    is what the engine holds outside tensors (CUDA context growth, cuBLAS workspaces), plus
    ``runtime_memory_tp_bytes`` with tensor parallelism (NCCL and custom all-reduce buffers).
    ``efficiency``: by GPU family, how this engine's kernels scale the GPU profile's measured
    efficiencies (:class:`EfficiencyScales`); ``kernel_releases``: kernels it gained in later
    releases, which an older release's run lacks (:class:`KernelRelease`). ``frontend_per_request_s``,
    ``frontend_per_prompt_token_s`` and ``frontend_per_output_token_s``: the work of the HTTP front end
    (API server: parsing, tokenizing the prompt, streaming and detokenizing) per request, per prompt
    token and per output token, done one request at a time beside the engine loop
    (:mod:`clustersim.frontend`); ``frontend_fitted_per_request_s`` is what ``clustersim validate
    --fit`` found beyond the cited per-request cost, added to it, and ``frontend_fitted_max_per_request_s``
    the most that fit may add: a measured ceiling of one front end's throughput less the cited work of the
    requests it carried there (0: the cited costs already fill it, and nothing is fitted).
    ``frontend_fitted_per_output_token_s``: the streaming work per output token the same fit finds, for an
    engine that cites none (added to ``frontend_per_output_token_s`` where both are given).
    ``frontend_tokenize_after_queued``: a request's prompt is tokenized only after the parses of the
    requests waiting when its own parse ended (its tokenizing joins the back of the server's queue), so
    a burst is parsed whole before any of it is tokenized and handed over; otherwise each request is
    parsed and tokenized in turn (:mod:`clustersim.frontend`).
    ``frontend_fitted_latency_s`` is the time a request spends passing the front end beyond its work, as
    the same fit finds it: latency, which occupies no server (the HTTP round trip, the hand-offs between
    the server's processes), so requests sent together pass it together.
    ``sliding_window_kv_share``: the KV cache a sliding-window layer keeps per token of context, as a
    share of a full-attention layer's (absent: 1, every token of every layer kept, as engines without a
    hybrid allocator do): 0 where the engine frees the blocks that slid out of the window (vLLM V1's
    hybrid KV cache manager), 0.8 where the window layers get a pool of 0.8 times the full layers' tokens
    (SGLang's ``--swa-full-tokens-ratio``).
    ``weight_only_rate_frac``: by GPU family, the compute rate of the engine's weight-only kernels (weights
    narrower than any tensor-core path of the GPU, dequantized inside the kernel: Marlin, Triton's
    ``matmul_ogs``) as a fraction of its 16-bit GEMMs' at the same shape, as a kernel benchmark measured it
    (absent: 1); the fitted ``weight_only_scale`` multiplies it.
    ``scheduler`` and ``kv``: the engine's defaults for the scenario sections of those names, used where
    the scenario leaves a field unset (``scheduler_small_gpu`` instead of ``scheduler`` on A100s and GPUs under 70 GiB).
    """

    name: str
    aliases: tuple[str, ...] = ()
    step_overhead_s: Cited[float]
    per_seq_overhead_s: Cited[float] | None = None
    launch_overhead_per_layer_eager_s: Cited[float] | None = None
    launch_overhead_per_layer_graph_s: Cited[float] | None = None
    launch_overhead_per_kernel_eager_s: Cited[float] | None = None
    launch_overhead_per_layer_compiled_s: Cited[float] | None = None
    small_kernels_per_moe_layer: Cited[dict[Precision, int]] | None = None  # by the weights' precision
    small_kernels_per_mla_layer: Cited[dict[Precision, int]] | None = None
    cuda_graph_max_seqs: Cited[int] | None = None
    cuda_graph_pad_tokens: Cited[int] | None = None
    sampling_per_seq_s: Cited[float] | None = None
    cuda_graph_mixed_steps: Cited[bool] | None = None
    host_overlap_frac: Cited[float] | None = None
    host_overlap_since_version: Cited[str] | None = None
    all_reduce_latency_s: Cited[float] | None = None
    all_reduce_overlap_frac: Cited[float] | None = None
    step_overhead_per_worker_s: Cited[float] | None = None
    kv_memory_rule: Cited[KVMemoryRule] | None = None
    runtime_memory_bytes: Cited[float] | None = None
    runtime_memory_tp_bytes: Cited[float] | None = None
    efficiency: dict[GpuFamily, EfficiencyScales] | None = None
    kernel_releases: tuple[KernelRelease, ...] = ()
    frontend_per_request_s: Cited[float] | None = None
    frontend_fitted_per_request_s: Cited[float] | None = None
    frontend_fitted_max_per_request_s: Cited[float] | None = None
    frontend_fitted_latency_s: Cited[float] | None = None
    frontend_per_prompt_token_s: Cited[float] | None = None
    frontend_per_output_token_s: Cited[float] | None = None
    frontend_fitted_per_output_token_s: Cited[float] | None = None
    frontend_tokenize_after_queued: Cited[bool] | None = None
    sliding_window_kv_share: Cited[float] | None = None
    weight_only_rate_frac: dict[GpuFamily, Cited[float]] | None = None
    scheduler: EngineSchedulerDefaults | None = None
    scheduler_small_gpu: EngineSchedulerDefaults | None = None  # A100s and GPUs under 70 GiB (vLLM's rule)
    kv: EngineKVDefaults | None = None

    @field_validator("small_kernels_per_moe_layer", "small_kernels_per_mla_layer")
    @classmethod
    def _counts(cls, cited: Cited[dict[Precision, int]] | None) -> Cited[dict[Precision, int]] | None:
        for precision, count in (cited.value if cited is not None else {}).items():
            if count < 0:
                raise ValueError(f"{precision}: {count} kernels must be at least 0")
        return cited

    @field_validator("sliding_window_kv_share")
    @classmethod
    def _share(cls, cited: Cited[float] | None) -> Cited[float] | None:
        if cited is not None and not 0.0 <= cited.value <= 1.0:
            raise ValueError(f"{cited.value} must be within 0..1")
        return cited

    @field_validator("weight_only_rate_frac")
    @classmethod
    def _rates(cls, rates: dict[GpuFamily, Cited[float]] | None) -> dict[GpuFamily, Cited[float]] | None:
        for family, cited in (rates or {}).items():
            if not 0.0 < cited.value <= 1.0:
                raise ValueError(f"{family}: {cited.value} must be within (0, 1]")
        return rates

    @field_validator("frontend_fitted_max_per_request_s")
    @classmethod
    def _ceiling(cls, cited: Cited[float] | None) -> Cited[float] | None:
        if cited is not None and not cited.value >= 0:
            raise ValueError(f"{cited.value} s must be at least 0")
        return cited


def engine_scales(engine: EngineProfile, family: str | None, version: str | None = None) -> EfficiencyScales:
    """``engine``'s efficiency scales on GPU ``family`` for a run of release ``version`` (None: its
    current release): its ``efficiency`` block times every later ``kernel_releases`` entry's ``before``."""
    found = (engine.efficiency or {}).get(family) if family is not None else None  # type: ignore[call-overload]
    scales: EfficiencyScales = found or EfficiencyScales()
    for release in engine.kernel_releases:
        if release.gpu_family == family and runs_before(version, release.since_version):
            scales = _scaled_by(scales, release.before, release.since_version)
    return scales


def _scaled_by(scales: EfficiencyScales, factors: EfficiencyScales, since: str) -> EfficiencyScales:
    combined: dict[str, Cited[float]] = {}
    for name in EfficiencyScales.model_fields:
        scale, factor = getattr(scales, name), getattr(factors, name)
        if factor is None:
            if scale is not None:
                combined[name] = scale
            continue
        base = scale.value if scale is not None else 1.0
        source = f"{factor.value:g} before release {since}: {factor.source}"
        combined[name] = Cited[float](value=base * factor.value, source=source)
    return EfficiencyScales(**combined)
