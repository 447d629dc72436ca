"""A roofline step-time model with a per-op-group breakdown.

One step of one replica (``tensor_parallel`` x ``pipeline_parallel`` GPUs) costs the sum of:

* ``linear``: the attention projections (QKV/O, or MLA's low-rank ones) of every layer and the
  MLPs of dense layers. Each GEMM costs ``kernel latency + blend(compute, memory)``.
* ``moe``: router, shared experts and the routed experts of MoE layers (only the experts the
  batch touches are read).
* ``elementwise``: norms, residual adds, rotary embedding, MLP activation (memory-bound kernels), and the
  small routing and quantisation kernels of MoE and MLA layers (:func:`small_kernels`).
* ``embedding`` and ``lm_head``: once per step (the LM head only for sequences that sample).
* ``attention_prefill``: causal attention of prefill chunks over prior context and themselves.
* ``attention_decode``: every decode sequence reads its KV cache; per layer
  ``latency + max(compute, memory / occupancy(num_seqs))``.
* ``all_reduce``: two per layer when TP > 1, ring: ``latency + 2(n-1)/n x message / link bandwidth``.
* ``pp_send_recv``: activations handed between consecutive pipeline stages.
* ``overhead``: the engine (fixed CPU time, per-sequence scheduling, launches, sampling).

``compute = FLOPs / (peak x efficiency)`` (the FP8/FP4 peak for FP8/FP4 weights),
``memory = bytes / (bandwidth x efficiency)``, and ``blend(c, m) = (c^p + m^p)^(1/p)``, which is the
sharp roofline ``max(c, m)`` for ``p = inf`` and smooths the knee for a fitted finite ``p``.

Pipeline parallelism: a batch crosses every stage in turn, so it costs the sum of all stages' work
plus ``pp - 1`` activation hand-offs: the trip of one micro-batch. A replica keeps a micro-batch per
stage in flight; :mod:`clustersim.cost.pipeline` prices its step as the largest one's trip.

Kernels run one after another (no overlap between groups). The engine's host time is added to
them, or, for an engine that prepares the next step while the GPU runs this one, partly hidden:
``(1 - f) x host + max(f x host, kernels)`` with ``f`` its ``host_overlap_frac``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from clustersim.architecture import EngineSpec, GpuSpec, ModelShape, kernels_for
from clustersim.cost.base import DecodeStepShape, StepBatch
from clustersim.cost.ops import (
    Gemm,
    Work,
    attention_gemms,
    decode_attention_work,
    elementwise_work,
    embedding_work,
    lm_head_gemm,
    lm_head_logits_bytes,
    mlp_gemms,
    moe_dense_gemms,
    moe_experts_work,
    prefill_attention_work,
)

Bound = Literal["compute", "memory", "power", "latency", "fixed"]


@dataclass(frozen=True, slots=True)
class OpCost:
    """One op group of one step on one GPU of the replica (summed over layers and stages)."""

    name: str
    flops: float
    bytes: float
    time_s: float
    bound: Bound


@dataclass(frozen=True, slots=True)
class StepCost:
    """A priced step: its duration and why."""

    duration_s: float
    ops: tuple[OpCost, ...]

    def op(self, name: str) -> OpCost:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)


def blend_s(compute_s: float, memory_s: float, exponent: float) -> float:
    """``(c^p + m^p)^(1/p)``: ``max(c, m)`` for ``p = inf``, between max and sum otherwise."""
    if math.isinf(exponent):
        return max(compute_s, memory_s)
    top = max(compute_s, memory_s)
    if top == 0.0:
        return 0.0
    return float(top * ((compute_s / top) ** exponent + (memory_s / top) ** exponent) ** (1.0 / exponent))


@dataclass(frozen=True, slots=True)
class _Timed:
    flops: float
    bytes: float
    time_s: float
    compute_s: float
    memory_s: float
    power_s: float = 0.0  # the time of the parts held to the GPU's power-limited rate (sustained_s)


def _roofline_bound(compute_s: float, memory_s: float) -> Bound:
    return "compute" if compute_s >= memory_s else "memory"


def _kernels(name: str, parts: Iterable[_Timed], count: float = 1.0, bound: Bound | None = None) -> OpCost:
    flops = num_bytes = time_s = compute_s = memory_s = power_s = 0.0
    for part in parts:
        flops += part.flops
        num_bytes += part.bytes
        time_s += part.time_s
        compute_s += part.compute_s
        memory_s += part.memory_s
        power_s += part.power_s
    chosen: Bound = bound or ("power" if 2.0 * power_s >= time_s > 0.0 else _roofline_bound(compute_s, memory_s))
    return OpCost(name, count * flops, count * num_bytes, count * time_s, chosen)


def block_scale(model: ModelShape, gpu: GpuSpec) -> float:
    """The engine's efficiency on GEMMs of ``model``'s weights against per-tensor FP8 GEMMs' (1 unless
    they carry block scales)."""
    return gpu.block_efficiency_scale if model.weight_scaling == "block" else 1.0


def gemm_peak_flops_per_s(model: ModelShape, gpu: GpuSpec) -> float:
    """The compute rate GEMMs of ``model``'s weights start from: the GPU's peak for them, times the
    engine's ``weight_only_compute_scale`` where no tensor-core path takes them (dequantized inside a
    weight-only kernel)."""
    peak = gpu.gemm_peak_flops_per_s(model.weight_precision)
    return peak * gpu.weight_only_compute_scale if gpu.runs_weight_only(model.weight_precision) else peak


def gemm_time(gemm: Gemm, model: ModelShape, gpu: GpuSpec) -> _Timed:
    """One GEMM: kernel latency plus the blended roofline at the weights' GEMM peak (block-scaled FP8
    weights at the engine's efficiency for them, ``block_efficiency_scale`` of per-tensor FP8's; weights
    no tensor core takes at ``weight_only_compute_scale`` of the 16-bit compute rate)."""
    flops = gemm.flops()
    num_bytes = gemm.bytes(model.weight_bytes_per_param, model.activation_bytes_per_element)
    scale = block_scale(model, gpu)
    compute_s = flops / (gemm_peak_flops_per_s(model, gpu) * gpu.compute_efficiency_frac * scale)
    memory_s = num_bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency_frac * scale)
    time_s = gpu.gemm_kernel_latency_s + blend_s(compute_s, memory_s, gpu.roofline_blend_exponent)
    return _limited(_Timed(flops, num_bytes, time_s, compute_s, memory_s), sustained_s(flops, model, gpu))


def _limited(timed: _Timed, limit_s: float) -> _Timed:
    """``timed`` held to at least ``limit_s``, the power-limited time of its work (marked as such)."""
    if limit_s <= timed.time_s:
        return timed
    return _Timed(timed.flops, timed.bytes, limit_s, timed.compute_s, timed.memory_s, limit_s)


def sustained_s(flops: float, model: ModelShape, gpu: GpuSpec) -> float:
    """The least time ``flops`` of GEMM work take, launch and all, at the rate the GPU holds at its power
    limit (``GpuSpec.gemm_sustained_flops_per_s``; 0 where none is measured). A physical ceiling: no
    engine's kernels beat it, so the engine's efficiency scales do not move it. Whole steps timed on H100
    and H200 (``validation/kernels/layers``) bear it out: prompts of 2,048 and 8,192 tokens, 6-18% faster
    in the model than measured without it, are -8% to +2% with it, and 512-token prompts, whose GEMMs run
    near the limit anyway, -4% to +9%."""
    return flops / gpu.gemm_sustained_flops_per_s(model.weight_precision)


def grouped_time(work: Work, model: ModelShape, gpu: GpuSpec) -> _Timed:
    """A fused multi-GEMM kernel group (MoE experts) priced like one GEMM per kernel launched, at the
    engine's efficiency for grouped GEMMs (``moe_efficiency_scale`` of the dense GEMMs'; block-scaled
    FP8 experts also ``block_efficiency_scale``, weight-only ones ``weight_only_compute_scale``)."""
    scale = gpu.moe_efficiency_scale * block_scale(model, gpu)
    compute_s = work.flops / (gemm_peak_flops_per_s(model, gpu) * gpu.compute_efficiency_frac * scale)
    memory_s = work.bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency_frac * scale)
    latency_s = work.num_kernels * gpu.gemm_kernel_latency_s
    time_s = latency_s + blend_s(compute_s, memory_s, gpu.roofline_blend_exponent)
    return _limited(_Timed(work.flops, work.bytes, time_s, compute_s, memory_s), sustained_s(work.flops, model, gpu))


def _memory_bound_time(work: Work, gpu: GpuSpec) -> _Timed:
    efficiency = gpu.elementwise_memory_efficiency_frac or gpu.memory_efficiency_frac
    memory_s = work.bytes / (gpu.hbm_bandwidth_bytes_per_s * efficiency)
    return _Timed(work.flops, work.bytes, work.num_kernels * gpu.elementwise_kernel_latency_s + memory_s, 0.0, memory_s)


def _attention_compute_flops_per_s(gpu: GpuSpec) -> float:
    efficiency = gpu.prefill_attention_compute_efficiency_frac or gpu.compute_efficiency_frac
    return gpu.peak_flops_per_s * efficiency


def decode_attention_rates(num_seqs: int, gpu: GpuSpec) -> tuple[float, float]:
    """FLOP/s and bytes/s decode attention reaches with ``num_seqs`` sequences in the batch.

    Bandwidth is scaled by ``n / (n + n_half)``: with few sequences the kernel has too few thread
    blocks to keep every memory channel busy.
    """
    efficiency = gpu.decode_attention_memory_efficiency_frac or gpu.memory_efficiency_frac
    half = gpu.decode_attention_half_occupancy_seqs
    occupancy = num_seqs / (num_seqs + half) if num_seqs > 0 else 1.0
    return _attention_compute_flops_per_s(gpu), gpu.hbm_bandwidth_bytes_per_s * efficiency * occupancy


def decode_attention_layer_time(work: Work, num_seqs: int, gpu: GpuSpec) -> _Timed:
    flops_per_s, bytes_per_s = decode_attention_rates(num_seqs, gpu)
    compute_s = work.flops / flops_per_s
    memory_s = work.bytes / bytes_per_s
    return _Timed(
        work.flops, work.bytes, gpu.decode_attention_latency_s + max(compute_s, memory_s), compute_s, memory_s
    )


def prefill_attention_layer_time(work: Work, gpu: GpuSpec) -> _Timed:
    """One layer of prefill attention. With ``prefill_attention_half_efficiency_tokens`` = h, a chunk
    spanning L keys runs at ``frac x L / (L + h)`` of peak (FlashAttention's forward speed rises with
    sequence length towards a plateau, FA2 and FA3 papers' benchmark figures): its time is
    ``flops x (L + h) / L`` at the plateau rate, i.e. ``flops + h x flops_per_key`` in total. With
    ``prefill_attention_half_occupancy_tiles`` = t, a kernel of T query blocks (all heads and chunks) runs at
    ``T / (T + t)`` of that: too few blocks leave multiprocessors idle (timed on H100 and H200 in
    ``validation/kernels``: a 256-token chunk on 8 heads over 32k keys reaches a third of the plateau)."""
    flops = work.flops + gpu.prefill_attention_half_efficiency_tokens * work.flops_per_key
    compute_s = flops / _attention_compute_flops_per_s(gpu)
    half = gpu.prefill_attention_half_occupancy_tiles
    if half > 0.0 and work.query_tiles > 0.0:
        compute_s *= (work.query_tiles + half) / work.query_tiles
    memory_s = work.bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency_frac)
    return _Timed(
        work.flops, work.bytes, gpu.prefill_attention_latency_s + max(compute_s, memory_s), compute_s, memory_s
    )


def all_reduce_time_s(message_bytes: float, tensor_parallel: int, gpu: GpuSpec) -> float:
    """One ring all-reduce of ``message_bytes`` over ``tensor_parallel`` GPUs."""
    if tensor_parallel <= 1:
        return 0.0
    ring_factor = 2.0 * (tensor_parallel - 1) / tensor_parallel
    bandwidth = gpu.interconnect_bandwidth_bytes_per_s * gpu.interconnect_efficiency_frac
    latency_s = gpu.engine.all_reduce_latency_s or gpu.interconnect_latency_s
    return latency_s + ring_factor * message_bytes / bandwidth


def send_recv_time_s(message_bytes: float, gpu: GpuSpec) -> float:
    """One point-to-point hand-off of activations between pipeline stages (same link as all-reduce)."""
    bandwidth = gpu.interconnect_bandwidth_bytes_per_s * gpu.interconnect_efficiency_frac
    return gpu.interconnect_latency_s + message_bytes / bandwidth


def graphed(batch: StepBatch, gpu: GpuSpec) -> bool:
    """Whether the step replays a captured CUDA graph: pure-decode steps of at most
    ``cuda_graph_max_seqs`` sequences, or with piecewise graphs any step of at most that many tokens."""
    engine = gpu.engine
    if engine.cuda_graph_mixed_steps:  # piecewise graphs, keyed by the step's tokens
        return 0 < batch.num_tokens <= engine.cuda_graph_max_seqs
    return not batch.prefill_new_tokens and 0 < batch.num_decode_seqs <= engine.cuda_graph_max_seqs


def padded_tokens(batch: StepBatch, gpu: GpuSpec) -> int:
    """The tokens a graphed step computes: its tokens rounded up to the next captured size (1, 2, 4,
    then multiples of ``cuda_graph_pad_tokens``); the step's own tokens when it is not graphed."""
    tokens, multiple = batch.num_tokens, gpu.engine.cuda_graph_pad_tokens
    if multiple <= 1 or tokens == 0 or not graphed(batch, gpu):
        return tokens
    if tokens <= 4:
        return 1 << (tokens - 1).bit_length()
    return -(-tokens // multiple) * multiple


def engine_overhead_s(batch: StepBatch, model: ModelShape, gpu: GpuSpec) -> float:
    """CPU and launch time the engine adds to a step.

    Pure-decode steps of at most ``cuda_graph_max_seqs`` sequences replay a captured CUDA graph
    (cheap launches, counted here), or with piecewise graphs any step of at most that many tokens;
    other steps launch every kernel eagerly (:func:`eager_launch_s`, not counted here). Every sequence
    samples one token.
    """
    engine = gpu.engine
    launch_s = engine.launch_overhead_per_layer_graph_s if graphed(batch, gpu) else 0.0  # eager: eager_launch_s
    return (
        gpu.step_overhead_s
        + batch.num_seqs * (engine.per_seq_overhead_s + engine.sampling_per_seq_s)
        + model.num_layers * launch_s
    )


def small_kernels(model: ModelShape, engine: EngineSpec) -> int:
    """The launch-bound kernels of one step that the op list does not price: the engine's
    ``small_kernels_per_moe_layer`` in each MoE layer and ``small_kernels_per_mla_layer`` in each MLA
    attention block (routing, expert alignment, activation quantisation, extra norms and copies). Each
    lasts at least a small kernel's latency whatever the batch, which is what a small-batch decode of
    these layers is made of."""
    precision = model.weight_precision
    moe = model.num_moe_layers * kernels_for(engine.small_kernels_per_moe_layer, precision) if model.is_moe else 0
    mla = model.num_layers * kernels_for(engine.small_kernels_per_mla_layer, precision) if model.is_mla else 0
    return moe + mla


def eager_kernels_beyond_dense(model: ModelShape, engine: EngineSpec) -> int:
    """The kernels one step's MoE layers and MLA attention blocks launch beyond as many dense
    grouped-query layers: an MoE layer's router and shared-expert GEMMs (its grouped expert GEMMs
    replace the dense MLP's two) and an MLA block's three projections beyond query-key-value and output,
    plus the small kernels of both (:func:`small_kernels`)."""
    moe = model.num_moe_layers * len(moe_dense_gemms(1, model, 1)) if model.is_moe else 0
    mla = model.num_layers * (len(attention_gemms(1, model, 1)) - 2) if model.is_mla else 0
    return moe + mla + small_kernels(model, engine)


def eager_launch_s(is_graphed: bool, model: ModelShape, gpu: GpuSpec) -> float:
    """The host time to launch an eager step's kernels one at a time (0 when it replays a graph):
    ``launch_overhead_per_layer_eager_s`` per layer and ``launch_overhead_per_kernel_eager_s`` per
    kernel of :func:`eager_kernels_beyond_dense`. Launches run ahead of the GPU (validation/kernels/host:
    a 2,048-token eager prefill lasts its graph's time; a one-token step lasts its launches): only what
    the step's kernels do not cover adds to it. An engine that compiles its model launches a dense
    layer's kernels from the compiled code instead (``launch_overhead_per_layer_compiled_s``); the
    kernels beyond, run outside it (the MoE custom op), still one at a time."""
    if is_graphed:
        return 0.0
    engine = gpu.engine
    extra_s = engine.launch_overhead_per_kernel_eager_s * eager_kernels_beyond_dense(model, engine)
    per_layer_s = engine.launch_overhead_per_layer_compiled_s or engine.launch_overhead_per_layer_eager_s
    return model.num_layers * per_layer_s + extra_s


def routing_tokens(batch: StepBatch, padded: int) -> int:
    """The tokens of a step that pick their experts independently: its own, and its CUDA-graph padding
    rows (copies of one dummy token, which all pick the same experts) as one more."""
    return batch.num_tokens + (1 if padded > batch.num_tokens else 0)


def price_step(
    batch: StepBatch,
    model: ModelShape,
    gpu: GpuSpec,
    tensor_parallel: int,
    pipeline_parallel: int = 1,
    *,
    routed_independently: int | None = None,
) -> StepCost:
    """Price one iteration of ``batch`` on a replica of ``tensor_parallel x pipeline_parallel`` GPUs.

    ``routed_independently``: the MoE tokens that pick experts independently (default
    :func:`routing_tokens`), for pricing a padded size as a batch of its own."""
    tp, pp = tensor_parallel, pipeline_parallel
    layers = model.num_layers
    ops: list[OpCost] = []
    tokens = padded_tokens(batch, gpu)  # a graphed step computes its padded size
    routed = routed_independently if routed_independently is not None else routing_tokens(batch, tokens)
    head_seqs = batch.num_seqs + (tokens - batch.num_tokens if not batch.prefill_new_tokens else 0)
    if tokens > 0:
        attention = [gemm_time(g, model, gpu) for g in attention_gemms(tokens, model, tp)]
        dense_mlp = [gemm_time(g, model, gpu) for g in mlp_gemms(tokens, model.intermediate_size, model, tp)]
        linear = _kernels("linear", attention, layers)
        if model.num_dense_mlp_layers:
            mlp = _kernels("linear", dense_mlp, model.num_dense_mlp_layers)
            linear = _merge("linear", (linear, mlp))
        ops.append(linear)
        if model.is_moe:
            moe_parts = [gemm_time(g, model, gpu) for g in moe_dense_gemms(tokens, model, tp)]
            moe_parts.append(grouped_time(moe_experts_work(tokens, model, tp, routed), model, gpu))
            ops.append(_kernels("moe", moe_parts, model.num_moe_layers))
        elementwise = [
            _kernels(
                "elementwise",
                [_memory_bound_time(elementwise_work(tokens, model, tp, False), gpu)],
                model.num_dense_mlp_layers,
                "memory",
            ),
            _kernels(
                "elementwise",
                [_memory_bound_time(elementwise_work(tokens, model, tp, True), gpu)],
                model.num_moe_layers,
                "memory",
            ),
        ]
        small_s = small_kernels(model, gpu.engine) * gpu.elementwise_kernel_latency_s
        if small_s:
            elementwise.append(OpCost("elementwise", 0.0, 0.0, small_s, "latency"))
        ops.append(_merge("elementwise", elementwise, "memory"))
        ops.append(_kernels("embedding", [_memory_bound_time(embedding_work(tokens, model), gpu)], 1, "memory"))
        head = gemm_time(lm_head_gemm(head_seqs, model, tp), model.head_shape(), gpu)
        logits = lm_head_logits_bytes(head_seqs, model, tp)
        logits_s = logits / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency_frac)
        ops.append(
            _kernels(
                "lm_head",
                [head, _Timed(0.0, logits, logits_s, 0.0, logits_s)],
            )
        )
    if batch.prefill_new_tokens:
        work = prefill_attention_work(batch.prefill_new_tokens, batch.prefill_context_tokens, model, tp)
        ops.append(_kernels("attention_prefill", [prefill_attention_layer_time(work, gpu)], layers))
    if batch.num_decode_seqs:
        work = decode_attention_work(batch.num_decode_seqs, batch.decode_context_tokens, model, tp)
        ops.append(
            _kernels("attention_decode", [decode_attention_layer_time(work, batch.num_decode_seqs, gpu)], layers)
        )
    message_bytes = tokens * model.hidden_size * model.activation_bytes_per_element
    if tp > 1 and tokens > 0:  # what the engine does not hide under other kernels
        comm_s = 2 * layers * all_reduce_time_s(message_bytes, tp, gpu) * (1.0 - gpu.engine.all_reduce_overlap_frac)
        ops.append(OpCost("all_reduce", 0.0, 2 * layers * message_bytes, comm_s, "latency"))
    if pp > 1 and tokens > 0:
        hops = pp - 1
        ops.append(
            OpCost("pp_send_recv", 0.0, hops * message_bytes, hops * send_recv_time_s(message_bytes, gpu), "latency")
        )
    host_s = engine_overhead_s(batch, model, gpu)
    overlap = gpu.engine.host_overlap_frac
    eager_s = eager_launch_s(graphed(batch, gpu), model, gpu)
    if overlap > 0.0 or eager_s > 0.0:  # the part of the host time the GPU work does not cover
        gpu_s = sum(op.time_s for op in ops)
        host_s = (1.0 - overlap) * host_s + max(0.0, overlap * host_s + eager_s - gpu_s)
    ops.append(OpCost("overhead", 0.0, 0.0, host_s, "fixed"))
    return StepCost(sum(op.time_s for op in ops), tuple(ops))


KERNEL_GROUPS = ("linear", "moe", "elementwise", "attention_prefill", "attention_decode")


def kernel_time_s(batch: StepBatch, model: ModelShape, gpu: GpuSpec, tensor_parallel: int) -> float:
    """The time of a step's layer kernels alone (:data:`KERNEL_GROUPS`): no embedding, LM head,
    collectives or host time, what a measured forward pass through the layers times."""
    return sum(op.time_s for op in price_step(batch, model, gpu, tensor_parallel).ops if op.name in KERNEL_GROUPS)


def overlapped_s(gpu_s: float, host_s: float, overlap_frac: float) -> float:
    """A step of ``gpu_s`` kernel time and ``host_s`` host time when ``overlap_frac`` of the host
    time runs while the GPU works: ``(1 - f) x host + max(f x host, gpu)``."""
    return (1.0 - overlap_frac) * host_s + max(overlap_frac * host_s, gpu_s)


def _merge(name: str, parts: Iterable[OpCost], bound: Bound | None = None) -> OpCost:
    parts = tuple(parts)
    flops = sum(p.flops for p in parts)
    num_bytes = sum(p.bytes for p in parts)
    time_s = sum(p.time_s for p in parts)
    if bound is None:
        # the bound of the part that takes longest
        bound = max(parts, key=lambda p: p.time_s).bound
    return OpCost(name, flops, num_bytes, time_s, bound)


_TOKEN_OPS = frozenset({"linear", "moe", "elementwise", "embedding", "all_reduce", "pp_send_recv"})


@dataclass(frozen=True, slots=True)
class RooflineCostModel:
    """The roofline model bound to one replica's model, GPU and parallelism.

    :meth:`price` gives the full breakdown; :meth:`step_duration_s` (the simulator's hot path) gives
    the same number faster: the op groups that depend only on the number of tokens, or only on the
    number of sequences, are priced once per distinct value and memoised.
    """

    model: ModelShape
    gpu: GpuSpec
    tensor_parallel: int
    pipeline_parallel: int = 1
    _token_ops_s: dict[tuple[int, int], float] = field(default_factory=dict, init=False, repr=False, compare=False)
    _lm_head_s: dict[int, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    _one_prompt_attention_s: dict[tuple[int, int], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _eager_s: dict[bool, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _eager_launch_s(self, is_graphed: bool) -> float:
        """:func:`eager_launch_s` of this replica, memoised (it depends on the model and engine only)."""
        found = self._eager_s.get(is_graphed)
        if found is None:
            found = self._eager_s[is_graphed] = eager_launch_s(is_graphed, self.model, self.gpu)
        return found

    def _prefill_attention_s(self, new_tokens: tuple[int, ...], context_tokens: tuple[int, ...]) -> float:
        """Prefill attention over every layer; memoised for steps with one prompt (chunk) in them."""
        key = (new_tokens[0], context_tokens[0]) if len(new_tokens) == 1 else None
        if key is not None and (cached := self._one_prompt_attention_s.get(key)) is not None:
            return cached
        model = self.model
        work = prefill_attention_work(new_tokens, context_tokens, model, self.tensor_parallel)
        time_s = model.num_layers * prefill_attention_layer_time(work, self.gpu).time_s
        if key is not None:
            self._one_prompt_attention_s[key] = time_s
        return time_s

    def _unpadded(self) -> GpuSpec:
        """The GPU without CUDA-graph padding: for pricing a size already padded."""
        return replace(self.gpu, engine=replace(self.gpu.engine, cuda_graph_pad_tokens=1))

    def step_duration_s(self, batch: StepBatch) -> float:
        if batch.num_tokens == 0:
            return self.price(batch).duration_s
        tokens = padded_tokens(batch, self.gpu)
        routed = routing_tokens(batch, tokens) if self.model.is_moe else tokens
        token_ops_s = self._token_ops_s.get((tokens, routed))
        if token_ops_s is None:  # the padded size, priced as is
            priced = price_step(
                StepBatch(prefill_new_tokens=(tokens,), prefill_context_tokens=(0,)),
                self.model, self._unpadded(), self.tensor_parallel, self.pipeline_parallel,
                routed_independently=routed,
            )  # fmt: skip
            token_ops_s = sum(op.time_s for op in priced.ops if op.name in _TOKEN_OPS)
            self._token_ops_s[(tokens, routed)] = token_ops_s
        num_seqs = batch.num_seqs + (tokens - batch.num_tokens if not batch.prefill_new_tokens else 0)
        lm_head_s = self._lm_head_s.get(num_seqs)
        if lm_head_s is None:
            priced = price_step(
                StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=num_seqs),
                self.model, self._unpadded(), self.tensor_parallel, self.pipeline_parallel,
            )  # fmt: skip
            lm_head_s = self._lm_head_s[num_seqs] = priced.op("lm_head").time_s
        model, gpu, tp = self.model, self.gpu, self.tensor_parallel
        overlap = gpu.engine.host_overlap_frac
        host_s = engine_overhead_s(batch, model, gpu)
        eager_s = self._eager_launch_s(graphed(batch, gpu))
        in_series = overlap == 0.0 and eager_s == 0.0
        total = token_ops_s + lm_head_s + (host_s if in_series else 0.0)
        if batch.prefill_new_tokens:
            total += self._prefill_attention_s(batch.prefill_new_tokens, batch.prefill_context_tokens)
        if batch.num_decode_seqs:
            work = decode_attention_work(batch.num_decode_seqs, batch.decode_context_tokens, model, tp)
            total += model.num_layers * decode_attention_layer_time(work, batch.num_decode_seqs, gpu).time_s
        if in_series:
            return total
        if eager_s == 0.0:
            return overlapped_s(total, host_s, overlap)
        return (1.0 - overlap) * host_s + max(overlap * host_s + eager_s, total)

    def price(self, batch: StepBatch) -> StepCost:
        return price_step(batch, self.model, self.gpu, self.tensor_parallel, self.pipeline_parallel)

    def verify_step_shape(self, num_seqs: int, tokens_per_seq: int) -> DecodeStepShape:
        """A step in which each of ``num_seqs`` sequences computes ``tokens_per_seq`` tokens against its
        context: speculative decoding's verify step (the k drafted tokens and one more). Every op but
        attention is priced for ``num_seqs x tokens_per_seq`` tokens (the LM head included: each
        position's logits are checked); attention reads each sequence's KV cache once, for
        ``tokens_per_seq`` times the FLOPs. Host time: the step's, per-sequence work for each
        sequence, sampling for every position. ``tokens_per_seq == 1`` is :meth:`decode_step_shape`."""
        if tokens_per_seq == 1:
            return self.decode_step_shape(num_seqs)
        tokens = num_seqs * tokens_per_seq
        empty = self.price(StepBatch(num_decode_seqs=tokens))
        model, gpu = self.model, self.gpu
        layers = model.num_layers
        engine = gpu.engine
        is_graphed = tokens <= engine.cuda_graph_max_seqs
        launch_s = engine.launch_overhead_per_layer_graph_s if is_graphed else 0.0  # eager: eager_launch_s
        eager_s = eager_launch_s(is_graphed, model, gpu)
        host_s = (
            gpu.step_overhead_s
            + num_seqs * engine.per_seq_overhead_s
            + tokens * engine.sampling_per_seq_s
            + layers * launch_s
        )
        gpu_s = sum(op.time_s for op in empty.ops if op.name not in ("overhead", "attention_decode"))
        overlap = engine.host_overlap_frac
        fixed_s = (1.0 - overlap) * host_s + gpu_s + layers * gpu.decode_attention_latency_s
        work0 = decode_attention_work(num_seqs, 0, model, self.tensor_parallel)
        work1 = decode_attention_work(num_seqs, 1, model, self.tensor_parallel)
        flops_per_s, bytes_per_s = decode_attention_rates(num_seqs, gpu)
        piece = (
            layers * tokens_per_seq * work0.flops / flops_per_s,
            layers * tokens_per_seq * (work1.flops - work0.flops) / flops_per_s,
            layers * work0.bytes / bytes_per_s,
            layers * (work1.bytes - work0.bytes) / bytes_per_s,
        )
        floor_s = host_s + eager_s if overlap > 0.0 or eager_s > 0.0 else 0.0
        return DecodeStepShape(fixed_s, (piece,), floor_s)

    def decode_step_shape(self, num_seqs: int) -> DecodeStepShape:
        """Every op but decode attention is independent of context; decode attention is, per layer,
        ``latency + max(compute(C), memory(C))`` with both affine in ``C`` for a fixed ``num_seqs``."""
        empty = self.price(StepBatch(num_decode_seqs=num_seqs))
        layers = self.model.num_layers
        overlap = self.gpu.engine.host_overlap_frac
        batch = StepBatch(num_decode_seqs=num_seqs)
        eager_s = eager_launch_s(graphed(batch, self.gpu), self.model, self.gpu)
        floor_s = 0.0
        if overlap == 0.0 and eager_s == 0.0:
            fixed_s = (
                empty.duration_s - empty.op("attention_decode").time_s + layers * self.gpu.decode_attention_latency_s
            )
        else:  # (1 - f) x host + max(f x host + eager launches, GPU) = max(host + launches, (1 - f) x host + GPU)
            host_s = engine_overhead_s(batch, self.model, self.gpu)
            gpu_s = sum(op.time_s for op in empty.ops if op.name not in ("overhead", "attention_decode"))
            fixed_s = (1.0 - overlap) * host_s + gpu_s + layers * self.gpu.decode_attention_latency_s
            floor_s = host_s + eager_s
        work0 = decode_attention_work(num_seqs, 0, self.model, self.tensor_parallel)
        work1 = decode_attention_work(num_seqs, 1, self.model, self.tensor_parallel)
        flops_per_s, bytes_per_s = decode_attention_rates(num_seqs, self.gpu)
        piece = (
            layers * work0.flops / flops_per_s,
            layers * (work1.flops - work0.flops) / flops_per_s,
            layers * work0.bytes / bytes_per_s,
            layers * (work1.bytes - work0.bytes) / bytes_per_s,
        )
        return DecodeStepShape(fixed_s, (piece,), floor_s)
