"""The roofline model against hand-computed numbers on toy models and a toy GPU."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.architecture import EngineSpec, GpuSpec, ModelShape, weight_bytes_per_gpu
from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.config.profiles import Cited, EfficiencyScales, EngineProfile, engine_scales
from clustersim.cost import RooflineCostModel, StepBatch, UnitCostModel, price_step
from clustersim.cost.ops import expected_experts_touched, mlp_gemms, moe_experts_work
from clustersim.cost.pipeline import PipelinedCostModel
from clustersim.cost.roofline import (
    all_reduce_time_s,
    blend_s,
    eager_kernels_beyond_dense,
    eager_launch_s,
    engine_overhead_s,
    overlapped_s,
    padded_tokens,
    send_recv_time_s,
    small_kernels,
)
from clustersim.runplan import plan_run

# Toy model: 2 layers, d=8, 2 query heads and 1 KV head of dim 4, gated MLP of 16, vocab 10, 2-byte weights.
TOY = ModelShape(
    name="toy",
    num_layers=2,
    hidden_size=8,
    num_attention_heads=2,
    num_kv_heads=1,
    head_dim=4,
    intermediate_size=16,
    vocab_size=10,
    gated_mlp=True,
    tied_embeddings=False,
    max_model_len_tokens=1024,
    weight_bytes_per_param=2,
    kv_bytes_per_element=2,
)
# Toy GPU: 1000 FLOP/s and 100 B/s at 50% efficiency, 10 B/s links with 1 s latency, 0.25 s step overhead.
GPU = GpuSpec(
    name="toy",
    memory_bytes=1e6,
    hbm_bandwidth_bytes_per_s=100.0,
    peak_flops_per_s=1000.0,
    interconnect_bandwidth_bytes_per_s=10.0,
    interconnect_latency_s=1.0,
    compute_efficiency_frac=0.5,
    memory_efficiency_frac=0.5,
    step_overhead_s=0.25,
)
DECODE_1 = StepBatch(num_decode_seqs=1, decode_context_tokens=10)


def test_toy_parameter_counts():
    # attention: Q 8x8 + K,V 2 x 8x4 + O 8x8 = 192; MLP: 3 x 8 x 16 = 384
    assert TOY.attention_params_per_layer() == 192
    assert TOY.mlp_params_per_layer() == 384
    # 2 layers x (576 + two norms of 8) + final norm 8 + embedding and LM head 2 x 10 x 8
    assert TOY.num_params() == 2 * (576 + 16) + 8 + 160
    assert TOY.num_active_params() == TOY.num_params()
    # K and V, 2 layers, 1 head of 4, 2 bytes
    assert TOY.kv_bytes_per_token() == 2 * 2 * 4 * 2


# per layer, one decode token, TP 1:   (FLOPs, bytes = weights x 2 B + tokens x (k + n) x 2 B)
#   qkv  8 -> 8 + 2x4 = 16:   2x8x16 = 256,   128x2 + 24x2 = 304
#   o    8 -> 8:              2x8x8  = 128,    64x2 + 16x2 = 160
#   up   8 -> 2x16 = 32:      2x8x32 = 512,   256x2 + 40x2 = 592
#   down 16 -> 8:             2x16x8 = 256,   128x2 + 24x2 = 304
# every GEMM is memory-bound (bytes / 50 B/s > FLOPs / 500 FLOP/s)
def test_decode_step_by_hand():
    cost = price_step(DECODE_1, TOY, GPU, 1)
    linear = cost.op("linear")
    assert linear.flops == 2 * (256 + 128 + 512 + 256)
    assert linear.bytes == 2 * (304 + 160 + 592 + 304)
    assert linear.time_s == pytest.approx(2720 / 50.0) and linear.bound == "memory"
    lm_head = cost.op("lm_head")
    assert lm_head.flops == 2 * 8 * 10
    # weights 80 x 2 B + activations (8 + 10) x 2 B + float32 logits 10 x 4 B
    assert lm_head.bytes == 160 + 36 + 40
    assert lm_head.time_s == pytest.approx(236 / 50.0)
    # per layer per token: two add+norms 2 x 4 x 8 = 64, rotary q+k 2 x (8 + 4) = 24, act 2x16 + 16 = 48 elements
    elementwise = cost.op("elementwise")
    assert elementwise.bytes == 2 * (64 + 24 + 48) * 2
    assert elementwise.time_s == pytest.approx(544 / 50.0) and elementwise.bound == "memory"
    assert cost.op("embedding").bytes == 8 * (2 + 2)
    attention = cost.op("attention_decode")
    assert attention.flops == 4 * 2 * 4 * 10 * 2  # 4 x heads x head_dim x context x layers
    assert attention.bytes == (10 * 16 + 2 * 1 * 8 * 2) * 2  # KV of 10 tokens + q and output vectors, 2 layers
    assert attention.time_s == pytest.approx(384 / 50.0)
    assert cost.op("overhead").time_s == 0.25
    assert cost.duration_s == pytest.approx(54.4 + 4.72 + 10.88 + 0.64 + 7.68 + 0.25)


def test_prefill_attention_is_causal():
    cost = price_step(StepBatch(prefill_new_tokens=(4,), prefill_context_tokens=(0,)), TOY, GPU, 1)
    attention = cost.op("attention_prefill")
    # each of 4 new tokens attends on average to (4 + 1) / 2 positions
    assert attention.flops == 4 * 2 * 4 * 4 * 2.5 * 2
    assert attention.bytes == (4 * 16 + 4 * 2 * 8 * 2) * 2  # new KV written + q read and output written
    chunk = price_step(StepBatch(prefill_new_tokens=(4,), prefill_context_tokens=(6,)), TOY, GPU, 1)
    assert chunk.op("attention_prefill").flops == 4 * 2 * 4 * 4 * (6 + 2.5) * 2
    assert chunk.op("attention_prefill").bytes == ((6 + 4) * 16 + 4 * 32) * 2


def test_prefill_attention_efficiency_rises_with_the_keys_a_chunk_spans():
    # with h = 10 tokens, a chunk spanning L keys runs at L / (L + 10) of the plateau rate
    batch = StepBatch(prefill_new_tokens=(4, 2), prefill_context_tokens=(6, 0))
    fast_memory = replace(GPU, hbm_bandwidth_bytes_per_s=1e12)  # so attention is compute-bound
    flat = price_step(batch, TOY, fast_memory, 1).op("attention_prefill")
    curved = price_step(batch, TOY, replace(fast_memory, prefill_attention_half_efficiency_tokens=10.0), 1)
    long_chunk = 4 * 2 * 4 * 4 * (6 + 2.5) * 2  # spans 10 keys: twice the time at half the rate
    short_chunk = 2 * 2 * 4 * 4 * 1.5 * 2  # spans 2 keys: 6 times the time
    assert curved.op("attention_prefill").flops == flat.flops == long_chunk + short_chunk
    compute_rate = flat.flops / flat.time_s
    assert curved.op("attention_prefill").time_s == pytest.approx((2 * long_chunk + 6 * short_chunk) / compute_rate)


def test_prefill_attention_slows_with_few_query_blocks():
    # 2 heads; chunks of 4 and 2 tokens are one 128-row block per head each: 4 blocks in the kernel; with
    # t = 4 blocks at half speed the compute time doubles, and a thousand-token chunk (16 blocks) is 1.25x
    batch = StepBatch(prefill_new_tokens=(4, 2), prefill_context_tokens=(6, 0))
    fast_memory = replace(GPU, hbm_bandwidth_bytes_per_s=1e12)
    flat = price_step(batch, TOY, fast_memory, 1).op("attention_prefill")
    slowed = price_step(batch, TOY, replace(fast_memory, prefill_attention_half_occupancy_tiles=4.0), 1)
    assert slowed.op("attention_prefill").time_s == pytest.approx(2 * flat.time_s)
    long_batch = StepBatch(prefill_new_tokens=(1000,), prefill_context_tokens=(0,))
    long_flat = price_step(long_batch, TOY, fast_memory, 1).op("attention_prefill")
    long_slowed = price_step(long_batch, TOY, replace(fast_memory, prefill_attention_half_occupancy_tiles=4.0), 1)
    assert long_slowed.op("attention_prefill").time_s == pytest.approx(1.25 * long_flat.time_s)


def test_tensor_parallel_all_reduce_by_hand():
    # one token of 8 x 2 bytes; ring factor 2(2-1)/2 = 1; latency 1 s + 16 B / 10 B/s
    assert all_reduce_time_s(16, 2, GPU) == pytest.approx(2.6)
    assert all_reduce_time_s(16, 1, GPU) == 0.0
    # 4 GPUs: ring factor 1.5, at 50% link efficiency
    assert all_reduce_time_s(16, 4, replace(GPU, interconnect_efficiency_frac=0.5)) == pytest.approx(1 + 1.5 * 16 / 5)
    cost = price_step(DECODE_1, TOY, GPU, 2)
    assert cost.op("all_reduce").time_s == pytest.approx(4 * 2.6)  # two per layer
    # the single KV head is replicated on both GPUs: qkv 8 -> 8/2 + 2x4 = 12, o 4 -> 8, up 8 -> 16, down 8 -> 8
    assert cost.op("linear").flops == 2 * 2 * (8 * 12 + 4 * 8 + 8 * 16 + 8 * 8)


@pytest.mark.parametrize(
    ("compute", "memory", "exponent", "expected"), [(3, 4, math.inf, 4), (3, 4, 2, 5), (3, 4, 1, 7), (0, 0, 2, 0)]
)
def test_blend(compute, memory, exponent, expected):
    assert blend_s(compute, memory, exponent) == pytest.approx(expected)


def test_gemm_latency_and_blend_apply_per_gemm():
    gpu = replace(GPU, gemm_kernel_latency_s=1.0, roofline_blend_exponent=1.0)
    linear = price_step(DECODE_1, TOY, gpu, 1).op("linear")
    # 4 GEMMs x 2 layers of latency; with exponent 1 each GEMM costs compute + memory
    assert linear.time_s == pytest.approx(8 + 2 * (1152 / 500.0 + 1360 / 50.0))


def test_elementwise_kernel_latency():
    gpu = replace(GPU, elementwise_kernel_latency_s=1.0)
    assert price_step(DECODE_1, TOY, gpu, 1).op("elementwise").time_s == pytest.approx(8 + 544 / 50.0)


def test_decode_attention_latency_and_occupancy():
    gpu = replace(GPU, decode_attention_latency_s=1.0, decode_attention_half_occupancy_seqs=1.0)
    # one sequence: bandwidth x 1 / (1 + 1); per layer 1 s + 192 B / 25 B/s
    assert price_step(DECODE_1, TOY, gpu, 1).op("attention_decode").time_s == pytest.approx(2 * (1 + 192 / 25.0))


def test_fp8_weights_and_kv_halve_bytes_and_use_fp8_peak():
    fp8 = TOY.with_precision("fp8", "fp8")
    embedding = TOY.embedding_params()  # the embedding and LM head stay 16-bit
    assert fp8.weight_bytes() == (TOY.num_params() - embedding) * 1 + embedding * 2
    assert fp8.kv_bytes_per_token() == TOY.kv_bytes_per_token() / 2
    attention = price_step(DECODE_1, fp8, GPU, 1).op("attention_decode")
    assert attention.bytes == (10 * 8 + 32) * 2  # KV in 1 byte, q/output vectors stay 16-bit
    # weights 1 B, activations 2 B: the decode GEMMs read 1152 B of weights + 2 x 104 x 2 B activations
    assert price_step(DECODE_1, fp8, GPU, 1).op("linear").bytes == 1152 + 416
    # a compute-bound prefill runs at the FP8 peak when the GPU has one
    gpu = replace(GPU, peak_fp8_flops_per_s=2000.0, hbm_bandwidth_bytes_per_s=1e9)
    prefill = StepBatch(prefill_new_tokens=(1000,), prefill_context_tokens=(0,))
    bf16_s = price_step(prefill, TOY, gpu, 1).op("linear").time_s
    fp8_s = price_step(prefill, fp8, gpu, 1).op("linear").time_s
    assert price_step(prefill, fp8, gpu, 1).op("linear").bound == "compute"
    assert fp8_s == pytest.approx(bf16_s / 2)
    # FP4 weights without FP4 tensor cores meet 16-bit activations (vLLM's MXFP4 on Hopper), not FP8 ones
    assert gpu.gemm_peak_flops_per_s("fp4") == 1000.0
    assert replace(gpu, peak_fp4_flops_per_s=4000.0).gemm_peak_flops_per_s("fp4") == 4000.0
    assert GPU.gemm_peak_flops_per_s("fp8") == 1000.0  # no FP8 tensor cores: weight-only quantization


# Toy MoE: 4 experts of width 8, top-2, every layer MoE.
MOE = replace(TOY, num_experts=4, num_experts_per_token=2, moe_intermediate_size=8)


def test_moe_parameter_counts():
    # per layer: attention 192 + 4 experts x 3x8x8 + router 8x4 + norms 16
    assert MOE.num_params() == 2 * (192 + 4 * 192 + 32 + 16) + 8 + 160
    assert MOE.num_active_params() == 2 * (192 + 2 * 192 + 32 + 16) + 8 + 160


@pytest.mark.parametrize(("num_tokens", "touched"), [(1, 2.0), (2, 3.0), (3, 3.5), (100, 4.0)])
def test_moe_reads_only_touched_experts(num_tokens, touched):
    cost = price_step(StepBatch(num_decode_seqs=num_tokens, decode_context_tokens=num_tokens), MOE, GPU, 1)
    moe = cost.op("moe")
    routed = 2 * num_tokens
    # router GEMM 8 -> 4 per token; experts: up 8 -> 16 and down 8 -> 8 per routed token copy
    assert moe.flops == pytest.approx(2 * (2 * num_tokens * 8 * 4 + 2 * routed * (8 * 16 + 8 * 8)))
    expert_bytes = touched * 192 * 2 + routed * (8 + 16 + 8 + 8) * 2
    router_bytes = 32 * 2 + num_tokens * 12 * 2
    assert moe.bytes == pytest.approx(2 * (expert_bytes + router_bytes))
    # MoE layers have no dense MLP: the linear group holds only attention projections
    assert cost.op("linear").flops == 2 * 2 * num_tokens * (8 * 16 + 8 * 8)


# Toy MLA: 1 layer, d 8, 2 heads, q rank 4, kv rank 4, no-position 2 + rotary 2, value 2.
MLA = replace(
    TOY,
    num_layers=1,
    q_lora_rank=4,
    kv_lora_rank=4,
    qk_nope_head_dim=2,
    qk_rope_head_dim=2,
    v_head_dim=2,
    num_kv_heads=2,
)


def test_mla_parameters_and_compressed_kv():
    # q: 8x4 + norm 4 + 4 x 2x(2+2); kv down 8 x (4+2) + norm 4; kv up 4 x 2x(2+2); o 2x2 x 8
    assert MLA.attention_params_per_layer() == (32 + 4 + 32) + (48 + 4) + 32 + 32
    assert MLA.kv_bytes_per_token() == 1 * (4 + 2) * 2  # one latent of kv_rank + rotary per layer
    attention = price_step(StepBatch(num_decode_seqs=1, decode_context_tokens=10), MLA, GPU, 1).op("attention_decode")
    # scores over the 6-wide latent, values over the 4-wide latent, per head
    assert attention.flops == 2 * 2 * 10 * (6 + 4)
    assert attention.bytes == 10 * 6 * 2 + 1 * 2 * (6 + 4) * 2


def test_pipeline_parallel_adds_send_recv_and_splits_weights():
    one = price_step(DECODE_1, TOY, GPU, 1)
    two = price_step(DECODE_1, TOY, GPU, 1, pipeline_parallel=2)
    # one hand-off of one token's 8 x 2 B activations: latency 1 s + 16 B / 10 B/s
    assert send_recv_time_s(16, GPU) == pytest.approx(2.6)
    assert two.op("pp_send_recv").time_s == pytest.approx(2.6)
    assert two.duration_s == pytest.approx(one.duration_s + 2.6)
    # one layer of 592 params per stage + embedding, LM head and final norm (worst stage holds both ends)
    assert weight_bytes_per_gpu(TOY, 1, 2) == (592 + 160 + 8) * 2


def test_engine_overheads():
    engine = EngineSpec(
        per_seq_overhead_s=0.01,
        launch_overhead_per_layer_eager_s=0.1,
        launch_overhead_per_layer_graph_s=0.001,
        cuda_graph_max_seqs=4,
        sampling_per_seq_s=0.02,
    )
    gpu = replace(GPU, engine=engine)
    # decode of 4 sequences: graph replay
    assert engine_overhead_s(StepBatch(num_decode_seqs=4, decode_context_tokens=40), TOY, gpu) == pytest.approx(
        0.25 + 4 * 0.03 + 2 * 0.001
    )
    # 5 sequences, or any prefill: eager launches, which run ahead of the GPU (eager_launch_s), not in here
    five = StepBatch(num_decode_seqs=5, decode_context_tokens=50)
    assert engine_overhead_s(five, TOY, gpu) == pytest.approx(0.25 + 5 * 0.03)
    mixed = StepBatch(prefill_new_tokens=(3,), prefill_context_tokens=(0,), num_decode_seqs=1, decode_context_tokens=5)
    assert engine_overhead_s(mixed, TOY, gpu) == pytest.approx(0.25 + 2 * 0.03)
    assert eager_launch_s(False, TOY, gpu) == pytest.approx(2 * 0.1) and eager_launch_s(True, TOY, gpu) == 0.0
    # the step lasts its host time and the longer of its launches and its kernels
    kernels_s = sum(op.time_s for op in price_step(five, TOY, gpu, 1).ops if op.name != "overhead")
    expected_s = 0.25 + 5 * 0.03 + max(2 * 0.1, kernels_s)
    assert price_step(five, TOY, gpu, 1).duration_s == pytest.approx(expected_s)


def test_overlapped_host_time_by_hand():
    # f = 0.75 of 4 ms host time can hide: GPU 1 ms -> 1 + 3 = 4 ms (host-bound); GPU 10 ms -> 1 + 10 ms
    assert overlapped_s(1e-3, 4e-3, 0.75) == pytest.approx(4e-3)
    assert overlapped_s(10e-3, 4e-3, 0.75) == pytest.approx(11e-3)
    assert overlapped_s(10e-3, 4e-3, 1.0) == pytest.approx(10e-3)  # fully hidden: max(host, GPU)


def test_overlap_shows_as_the_visible_overhead_in_the_breakdown():
    gpu = replace(GPU, step_overhead_s=1000.0, engine=EngineSpec(host_overlap_frac=0.5))
    priced = price_step(StepBatch(num_decode_seqs=2, decode_context_tokens=20), TOY, gpu, 1)
    kernels_s = sum(op.time_s for op in priced.ops if op.name != "overhead")
    assert kernels_s < 500  # the toy's kernels (~107 s) take less than the 500 s that can hide
    assert priced.op("overhead").time_s == pytest.approx(1000.0 - kernels_s)  # the step takes the host time
    assert priced.duration_s == pytest.approx(1000.0)


def test_engine_all_reduce_latency_replaces_the_link_latency():
    engine_gpu = replace(GPU, engine=EngineSpec(all_reduce_latency_s=1e-6))
    assert all_reduce_time_s(0.0, 2, engine_gpu) == pytest.approx(1e-6)
    assert all_reduce_time_s(0.0, 2, GPU) == pytest.approx(GPU.interconnect_latency_s)


def test_linear_layers_turn_compute_bound_with_many_tokens():
    catalogue = Catalogue.builtin()
    model = ModelShape.from_profile(catalogue.model("Llama-3.1-8B"))
    gpu = GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine("vllm"))
    prefill = price_step(StepBatch(prefill_new_tokens=(4096,), prefill_context_tokens=(0,)), model, gpu, 1)
    decode = price_step(StepBatch(num_decode_seqs=8, decode_context_tokens=8000), model, gpu, 1)
    assert prefill.op("linear").bound == "compute"
    assert decode.op("linear").bound == "memory"
    assert decode.op("attention_decode").bound == "memory"


@pytest.mark.parametrize("num_decode", [1, 8, 64, 256])
def test_cost_is_monotone_in_tokens_and_context(num_decode):
    base = price_step(StepBatch(num_decode_seqs=num_decode, decode_context_tokens=num_decode * 100), TOY, GPU, 1)
    more_seqs = price_step(
        StepBatch(num_decode_seqs=num_decode + 1, decode_context_tokens=num_decode * 100), TOY, GPU, 1
    )
    more_context = price_step(
        StepBatch(num_decode_seqs=num_decode, decode_context_tokens=num_decode * 200), TOY, GPU, 1
    )
    assert more_seqs.duration_s >= base.duration_s
    assert more_context.duration_s > base.duration_s


def test_unit_cost_ignores_batch():
    assert UnitCostModel(2.0).step_duration_s(StepBatch(num_decode_seqs=100, decode_context_tokens=10**6)) == 2.0


def _catalogue_model(
    model: str, hardware: str, tp: int, pp: int = 1, precision: str | None = None
) -> RooflineCostModel:
    catalogue = Catalogue.builtin()
    shape = ModelShape.from_profile(catalogue.model(model))
    if precision is not None:
        shape = shape.with_precision(precision, precision)  # type: ignore[arg-type]
    return RooflineCostModel(
        shape, GpuSpec.from_profiles(catalogue.hardware(hardware), catalogue.engine("vllm")), tp, pp
    )


SHAPE_CASES = {
    "llama70b-tp1": lambda tp: _catalogue_model("Llama-3.1-70B", "H100-SXM", tp),
    "llama70b-fp8": lambda tp: _catalogue_model("Llama-3.1-70B", "H100-SXM", tp, precision="fp8"),
    "llama70b-pp2": lambda tp: _catalogue_model("Llama-3.1-70B", "A100-80GB", tp, pp=2),
    # a micro-batch per stage in flight: the largest one's trip, its share of the context
    "llama70b-pp4-pipelined": lambda tp: PipelinedCostModel(_catalogue_model("Llama-3.1-70B", "H100-SXM", tp, 4), 4),
    "mixtral": lambda tp: _catalogue_model("Mixtral-8x7B", "H200", tp),
    "deepseek-mla-moe": lambda tp: _catalogue_model("DeepSeek-V3", "B200", tp, precision="fp4"),
    "toy": lambda tp: RooflineCostModel(TOY, GPU, tp),
    "toy-moe": lambda tp: RooflineCostModel(MOE, GPU, tp),
    "toy-mla": lambda tp: RooflineCostModel(MLA, GPU, tp),
    # an engine that hides 80% of its host time (2 ms + 0.1 ms per sequence) under the kernels
    "toy-overlap": lambda tp: RooflineCostModel(
        TOY, replace(GPU, step_overhead_s=2e-3, engine=EngineSpec(per_seq_overhead_s=1e-4, host_overlap_frac=0.8)), tp
    ),
    # SGLang: an MoE layer's extra launches in eager steps (decode above its graphed sequences) under the kernels
    "sglang-moe-eager": lambda tp: RooflineCostModel(
        MOE,
        replace(GPU, engine=EngineSpec(cuda_graph_max_seqs=16, launch_overhead_per_kernel_eager_s=1e-3)),
        tp,
    ),
    "sglang-moe-eager-overlap": lambda tp: RooflineCostModel(
        MOE,
        replace(
            GPU,
            step_overhead_s=2e-3,
            engine=EngineSpec(cuda_graph_max_seqs=16, launch_overhead_per_kernel_eager_s=1e-3, host_overlap_frac=0.5),
        ),
        tp,
    ),
    # MLA and MoE layers with the engine's small routing/quantisation kernels, graphed and eager
    "deepseek-small-kernels": lambda tp: RooflineCostModel(
        _catalogue_model("DeepSeek-V3", "H200", tp).model,
        replace(
            _catalogue_model("DeepSeek-V3", "H200", tp).gpu,
            engine=EngineSpec(
                cuda_graph_max_seqs=16,
                small_kernels_per_moe_layer=(("bf16", 9),),
                small_kernels_per_mla_layer=(("bf16", 7),),
                host_overlap_frac=0.5,
                launch_overhead_per_layer_eager_s=2e-4,
                launch_overhead_per_kernel_eager_s=3e-5,
            ),
        ),
        tp,
    ),
    "llama8b-overlap": lambda tp: RooflineCostModel(
        _catalogue_model("Llama-3.1-8B", "H100-SXM", tp).model,
        replace(
            _catalogue_model("Llama-3.1-8B", "H100-SXM", tp).gpu,
            engine=EngineSpec(per_seq_overhead_s=3e-5, host_overlap_frac=1.0),
        ),
        tp,
    ),
}


@pytest.mark.parametrize("case", sorted(SHAPE_CASES))
@pytest.mark.parametrize("tensor_parallel", [1, 2])
@pytest.mark.parametrize("num_seqs", [1, 7, 64, 300])
@pytest.mark.parametrize("context_per_seq", [0, 1, 100, 5000, 100_000])
def test_decode_step_shape_matches_step_price(case, tensor_parallel, num_seqs, context_per_seq):
    model = SHAPE_CASES[case](tensor_parallel)
    context = num_seqs * context_per_seq
    direct = model.step_duration_s(StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=context))
    assert model.decode_step_shape(num_seqs).duration_s(context) == pytest.approx(direct, rel=1e-12)


def test_eager_launches_add_only_what_the_kernels_do_not_cover():
    catalogue = Catalogue.builtin()
    shape = ModelShape.from_profile(catalogue.model("DeepSeek-V3"))  # MLA in 61 layers, MoE in 58
    # the measured launches alone, without the corpus fit's scales (its eager scale for SGLang, 1.5, is set by
    # one-client rows whose extra cost is not named yet: docs/validation.md)
    measured = catalogue.engine("sglang").model_copy(update={"efficiency": None})
    sglang = GpuSpec.from_profiles(catalogue.hardware("H200"), measured)
    no_launches = replace(sglang.engine, launch_overhead_per_layer_eager_s=0.0, launch_overhead_per_kernel_eager_s=0.0)
    without = replace(sglang, engine=no_launches)
    layer_s, kernel_s = (
        sglang.engine.launch_overhead_per_layer_eager_s,
        sglang.engine.launch_overhead_per_kernel_eager_s,
    )
    assert (layer_s, kernel_s) == (pytest.approx(483e-6), pytest.approx(39e-6))  # measured (validation/kernels/host)
    fitted = GpuSpec.from_profiles(catalogue.hardware("H200"), catalogue.engine("sglang")).engine
    scale = engine_scales(catalogue.engine("sglang"), "hopper").eager_launch_scale
    assert scale is not None and fitted.launch_overhead_per_layer_eager_s == pytest.approx(483e-6 * scale.value)

    def extra_s(batch: StepBatch, model: ModelShape = shape) -> float:
        return RooflineCostModel(model, sglang, 8).step_duration_s(batch) - RooflineCostModel(
            model, without, 8
        ).step_duration_s(batch)

    def kernels_s(batch: StepBatch, model: ModelShape = shape) -> float:
        return RooflineCostModel(model, without, 8).price(batch).duration_s - engine_overhead_s(batch, model, without)

    one_token = StepBatch(prefill_new_tokens=(1,), prefill_context_tokens=(6,))
    # DeepSeek-V3 in SGLang with FP8 weights: beyond a dense layer's, each MoE layer launches its router and
    # shared-expert GEMMs and 6 small kernels, each MLA block 3 more projections and 8 small kernels
    assert eager_kernels_beyond_dense(shape, sglang.engine) == 58 * (3 + 6) + 61 * (3 + 8)
    launches_s = 61 * layer_s + (58 * 9 + 61 * 11) * kernel_s
    assert extra_s(one_token) == pytest.approx(launches_s - kernels_s(one_token), rel=1e-9)
    # a one-token prefill is all launches: sglang PR #12160 logged 82.6 ms for it, 8% more than measured here
    assert RooflineCostModel(shape, sglang, 8).step_duration_s(one_token) == pytest.approx(82.64e-3, rel=0.1)
    big = StepBatch(prefill_new_tokens=(32_000,), prefill_context_tokens=(0,))
    assert extra_s(big) == pytest.approx(0.0, abs=1e-12)  # the kernels cover it (to rounding)
    assert extra_s(StepBatch(num_decode_seqs=8, decode_context_tokens=8000)) == pytest.approx(0.0, abs=1e-12)  # graphed
    # a dense model launches its layers alone; an MoE model without MLA adds its MoE layers' kernels
    dense = ModelShape.from_profile(catalogue.model("Llama-3.1-70B"))
    assert extra_s(one_token, dense) == pytest.approx(80 * layer_s - kernels_s(one_token, dense), rel=1e-9)
    qwen = ModelShape.from_profile(catalogue.model("Qwen3-30B-A3B"))  # bf16: router + 4 small kernels per layer
    assert eager_kernels_beyond_dense(qwen, sglang.engine) == 48 * (1 + 4)
    qwen_launches_s = 48 * layer_s + 48 * 5 * kernel_s
    assert extra_s(one_token, qwen) == pytest.approx(qwen_launches_s - kernels_s(one_token, qwen), rel=1e-9)


def test_small_kernels_of_moe_and_mla_layers_take_a_kernel_latency_each_at_any_batch():
    catalogue = Catalogue.builtin()
    deepseek = ModelShape.from_profile(catalogue.model("DeepSeek-V3"))  # MLA in 61 layers, MoE in 58
    mixtral = ModelShape.from_profile(catalogue.model("Mixtral-8x7B"))  # MoE in 32 layers, no MLA
    dense = ModelShape.from_profile(catalogue.model("Llama-3.1-70B"))
    base = GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine("vllm"))
    none = replace(base, engine=replace(base.engine, small_kernels_per_moe_layer=(), small_kernels_per_mla_layer=()))
    some = replace(
        base,
        engine=replace(
            base.engine,
            small_kernels_per_moe_layer=(("bf16", 9), ("fp8", 11)),
            small_kernels_per_mla_layer=(("bf16", 7),),
        ),
    )
    assert deepseek.weight_precision == "fp8"
    assert small_kernels(deepseek, some.engine) == 58 * 11  # no FP8 count for MLA: none
    deepseek = deepseek.with_precision("bf16", None)
    assert small_kernels(deepseek, some.engine) == 58 * 9 + 61 * 7
    assert small_kernels(deepseek.with_precision("fp16", None), some.engine) == 58 * 9 + 61 * 7
    assert small_kernels(mixtral, some.engine) == 32 * 9
    assert small_kernels(dense, some.engine) == 0
    for batch in (
        StepBatch(num_decode_seqs=1, decode_context_tokens=900),
        StepBatch(num_decode_seqs=256, decode_context_tokens=9e5),
    ):
        for model, kernels in ((deepseek, 58 * 9 + 61 * 7), (mixtral, 32 * 9), (dense, 0)):
            with_s = price_step(batch, model, some, 8).op("elementwise").time_s
            without_s = price_step(batch, model, none, 8).op("elementwise").time_s
            assert with_s - without_s == pytest.approx(kernels * base.elementwise_kernel_latency_s, rel=1e-12)
            assert RooflineCostModel(model, some, 8).step_duration_s(batch) >= RooflineCostModel(
                model, none, 8
            ).step_duration_s(batch)


FAST_CATALOGUE = Catalogue.builtin()


@settings(max_examples=150, deadline=None)
@given(
    model_name=st.sampled_from(["Llama-3.1-8B", "Llama-3.1-70B", "Mixtral-8x7B", "DeepSeek-V3"]),
    tp=st.sampled_from([1, 2, 8]),
    prefills=st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 8192)), max_size=4),
    num_decode=st.integers(0, 300),
    context_per_seq=st.integers(1, 20_000),
    engine=st.sampled_from(["vllm", "sglang", "trtllm"]),
)
def test_fast_step_duration_equals_full_price(model_name, tp, prefills, num_decode, context_per_seq, engine):
    catalogue = FAST_CATALOGUE
    cost = RooflineCostModel(
        ModelShape.from_profile(catalogue.model(model_name)),
        GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine(engine)),
        tp,
    )
    batch = StepBatch(
        prefill_new_tokens=tuple(n for n, _ in prefills),
        prefill_context_tokens=tuple(c for _, c in prefills),
        num_decode_seqs=num_decode,
        decode_context_tokens=num_decode * context_per_seq,
    )
    expected = cost.price(batch).duration_s
    assert cost.step_duration_s(batch) == pytest.approx(expected, rel=1e-12)
    assert cost.step_duration_s(batch) == pytest.approx(expected, rel=1e-12)  # memoised the second time


@pytest.mark.parametrize(("tokens", "padded"), [(1, 1), (3, 4), (4, 4), (5, 8), (9, 16), (16, 16), (17, 24)])
def test_graphed_decode_steps_run_at_the_next_captured_size(tokens, padded):
    engine = replace(GPU.engine, cuda_graph_max_seqs=512, cuda_graph_pad_tokens=8)
    gpu = replace(GPU, engine=engine)
    decode = StepBatch(num_decode_seqs=tokens, decode_context_tokens=tokens)
    assert padded_tokens(decode, gpu) == padded
    # the linear layers compute the padded batch; attention only the real sequences
    assert (
        price_step(decode, TOY, gpu, 1).op("linear").flops
        == price_step(
            StepBatch(num_decode_seqs=padded, decode_context_tokens=padded), TOY, replace(GPU, engine=engine), 1
        )
        .op("linear")
        .flops
    )
    unpadded = replace(GPU, engine=replace(engine, cuda_graph_pad_tokens=1))
    assert price_step(decode, TOY, gpu, 1).op("attention_decode") == price_step(decode, TOY, unpadded, 1).op(
        "attention_decode"
    )
    # a step too large for a graph is not padded
    eager = replace(GPU, engine=replace(engine, cuda_graph_max_seqs=2))
    assert padded_tokens(decode, eager) == (tokens if tokens > 2 else padded)


@pytest.mark.parametrize(("tokens", "padded"), [(3, 4), (9, 16), (16, 16)])
def test_graph_padding_rows_route_to_the_same_experts(tokens, padded):
    # padding rows are copies of one dummy token: they read the experts of one more token, not of padded - tokens
    mixtral = ModelShape.from_profile(FAST_CATALOGUE.model("Mixtral-8x7B"))
    gpu = GpuSpec.from_profiles(FAST_CATALOGUE.hardware("H100-SXM"), FAST_CATALOGUE.engine("vllm"))
    assert gpu.engine.cuda_graph_pad_tokens == 8
    decode = StepBatch(num_decode_seqs=tokens, decode_context_tokens=tokens * 100)
    assert padded_tokens(decode, gpu) == padded
    moe = price_step(decode, mixtral, gpu, 2).op("moe")
    independent = tokens + (1 if padded > tokens else 0)
    work = moe_experts_work(padded, mixtral, 2, independent)
    assert work.flops == moe_experts_work(padded, mixtral, 2).flops  # every padded row computes
    if padded > tokens + 1:
        assert work.bytes < moe_experts_work(padded, mixtral, 2).bytes
    up, down = mlp_gemms(1, mixtral.moe_intermediate_size, mixtral, 2)
    expert_bytes = (up.weight_elements() + down.weight_elements()) * mixtral.weight_bytes_per_param
    touched = expected_experts_touched(independent, 8, 2) - expected_experts_touched(padded, 8, 2)
    assert work.bytes - moe_experts_work(padded, mixtral, 2).bytes == pytest.approx(touched * expert_bytes)
    expected = price_step(
        StepBatch(prefill_new_tokens=(padded,), prefill_context_tokens=(0,)),
        mixtral,
        replace(gpu, engine=replace(gpu.engine, cuda_graph_pad_tokens=1)),
        2,
        routed_independently=independent,
    ).op("moe")
    assert moe.time_s == pytest.approx(expected.time_s, rel=1e-12) and moe.bytes == pytest.approx(expected.bytes)


def test_block_scaled_fp8_weights_run_their_gemms_at_the_engines_block_efficiency():
    catalogue = Catalogue.builtin()
    deepseek = ModelShape.from_profile(catalogue.model("DeepSeek-V3"))  # its published FP8 checkpoint
    assert (deepseek.weight_precision, deepseek.weight_scaling) == ("fp8", "block")
    assert deepseek.with_precision("fp4", None).weight_scaling == "tensor"  # another format: per tensor
    assert deepseek.head_shape().weight_scaling == "tensor"  # the LM head keeps 16-bit weights
    assert ModelShape.from_profile(catalogue.model("DeepSeek-V3"), "fp4").weight_scaling == "tensor"
    llama = catalogue.model("Llama-3.1-70B")
    assert ModelShape.from_profile(llama, "fp8").weight_scaling == "tensor"
    block = ModelShape.from_profile(llama, "fp8", None, "block")
    with pytest.raises(ValueError, match="block scales are FP8 weights', not bf16"):
        ModelShape.from_profile(llama, None, None, "block")
    base = replace(
        GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine("vllm")), block_efficiency_scale=1.0
    )
    half = replace(base, block_efficiency_scale=0.5)
    prefill = StepBatch(prefill_new_tokens=(4096,), prefill_context_tokens=(0,))
    decode = StepBatch(num_decode_seqs=8, decode_context_tokens=8000)
    for batch in (prefill, decode):  # compute-bound and memory-bound GEMMs alike
        slow, fast = price_step(batch, block, half, 8).op("linear"), price_step(batch, block, base, 8).op("linear")
        no_latency = replace(base, gemm_kernel_latency_s=0.0)
        latency_s = fast.time_s - price_step(batch, block, no_latency, 8).op("linear").time_s
        assert slow.time_s - latency_s == pytest.approx(2 * (fast.time_s - latency_s), rel=1e-9)
        per_tensor = ModelShape.from_profile(llama, "fp8")
        assert price_step(batch, per_tensor, half, 8).op("linear").time_s == fast.time_s  # not block-scaled
    moe = replace(half, block_efficiency_scale=1.0)
    slow_experts = price_step(prefill, deepseek, half, 8).op("moe").time_s
    assert slow_experts > price_step(prefill, deepseek, moe, 8).op("moe").time_s


def test_weights_no_tensor_core_takes_run_at_the_engines_weight_only_compute_rate():
    """GPT-OSS's MXFP4 experts on an H100 (no FP4 tensor cores) are dequantized inside a weight-only
    kernel: a compute-bound prefill's expert GEMMs take twice as long at a scale of 0.5, a decode step's
    weight reads do not, and a B200 (FP4 tensor cores) or BF16 weights are not touched."""
    catalogue = Catalogue.builtin()
    oss = ModelShape.from_profile(catalogue.model("openai/gpt-oss-120b"))
    h100 = GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine("vllm"))
    b200 = GpuSpec.from_profiles(catalogue.hardware("B200"), catalogue.engine("vllm"))
    assert h100.runs_weight_only("fp4") and not b200.runs_weight_only("fp4") and not h100.runs_weight_only("fp8")
    assert GpuSpec.from_profiles(catalogue.hardware("A100-80GB"), catalogue.engine("vllm")).runs_weight_only("fp8")
    assert 0.0 < h100.weight_only_compute_scale < 1.0  # the corpus fit's (docs/validation.md)
    h100 = replace(h100, weight_only_compute_scale=1.0)
    prefill = StepBatch(prefill_new_tokens=(8192,), prefill_context_tokens=(0,))
    decode = StepBatch(num_decode_seqs=2, decode_context_tokens=2000)
    half = replace(h100, weight_only_compute_scale=0.5)
    for op in ("moe", "linear"):
        slow, fast = price_step(prefill, oss, half, 1).op(op), price_step(prefill, oss, h100, 1).op(op)
        assert slow.time_s > 1.5 * fast.time_s  # compute-bound: near twice (latencies and blending aside)
    assert price_step(decode, oss, half, 1).op("moe").time_s == pytest.approx(
        price_step(decode, oss, h100, 1).op("moe").time_s, rel=0.05
    )  # memory-bound: the 4-bit weight reads decide
    b200_half = replace(b200, weight_only_compute_scale=0.5)
    assert price_step(prefill, oss, b200_half, 1).op("moe").time_s == price_step(prefill, oss, b200, 1).op("moe").time_s
    llama = ModelShape.from_profile(catalogue.model("Llama-3.1-8B"))
    assert price_step(prefill, llama, half, 1).duration_s == price_step(prefill, llama, h100, 1).duration_s


def test_a_cited_weight_only_kernel_rate_times_the_fitted_scale_is_the_rate_a_family_runs_at():
    """An engine's ``weight_only_rate_frac`` (a kernel benchmark's rate against 16-bit GEMMs) is the
    family's own; the fitted ``weight_only_scale`` multiplies it; a family without one runs at the fitted
    scale alone, and a bad rate is refused naming the family."""
    catalogue = Catalogue.builtin()
    fitted = EfficiencyScales(weight_only_scale=Cited[float](value=0.8, source="test"))
    engine = catalogue.engine("vllm-v1").model_copy(
        update={
            "efficiency": {"ampere": fitted, "hopper": fitted},
            "weight_only_rate_frac": {"ampere": Cited[float](value=0.6, source="test")},
        }
    )
    a100 = GpuSpec.from_profiles(catalogue.hardware("A100-80GB"), engine)
    h100 = GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), engine)
    assert a100.weight_only_compute_scale == pytest.approx(0.48)
    assert h100.weight_only_compute_scale == pytest.approx(0.8)
    bare = engine.model_copy(update={"efficiency": None})
    assert GpuSpec.from_profiles(catalogue.hardware("A100-80GB"), bare).weight_only_compute_scale == pytest.approx(0.6)
    raw = catalogue.engine("vllm-v1").model_dump(mode="json", exclude_none=True)
    with pytest.raises(ValueError, match=r"hopper: 1\.5 must be within"):
        EngineProfile.model_validate({**raw, "weight_only_rate_frac": {"hopper": {"value": 1.5, "source": "a test"}}})


def test_a_compiled_engine_launches_an_ungraphed_step_from_its_compiled_code():
    """vLLM V1 runs a step over its largest captured graph through torch.compile's code: each dense
    layer costs ``launch_overhead_per_layer_compiled_s``, not the eager 483 us, which applies only with
    ``cluster.cuda_graphs: false`` (enforce_eager compiles nothing); the MoE layers' extra kernels
    (a custom op outside the compiled code) stay eager."""
    catalogue = Catalogue.builtin()
    measured = catalogue.engine("vllm-v1").model_copy(update={"efficiency": None})
    vllm = GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), measured)
    compiled_s, eager_s = (
        vllm.engine.launch_overhead_per_layer_compiled_s,
        vllm.engine.launch_overhead_per_layer_eager_s,
    )
    assert 0.0 < compiled_s < eager_s
    dense = ModelShape.from_profile(catalogue.model("Llama-3.1-8B"))
    assert eager_launch_s(False, dense, vllm) == pytest.approx(32 * compiled_s)
    assert eager_launch_s(True, dense, vllm) == 0.0
    qwen = ModelShape.from_profile(catalogue.model("Qwen3-30B-A3B"))
    beyond = eager_kernels_beyond_dense(qwen, vllm.engine) * vllm.engine.launch_overhead_per_kernel_eager_s
    assert eager_launch_s(False, qwen, vllm) == pytest.approx(48 * compiled_s + beyond)
    eager = replace(vllm, engine=replace(vllm.engine, launch_overhead_per_layer_compiled_s=0.0))
    assert eager_launch_s(False, dense, eager) == pytest.approx(32 * eager_s)


def test_without_cuda_graphs_a_compiled_engine_launches_eagerly():
    raw = {
        "name": "eager",
        "workload": {
            "tenants": [
                {
                    "name": "t",
                    "arrival": {
                        "kind": "explicit",
                        "requests": [{"arrival_at_s": 0.0, "prompt_tokens": 4, "output_tokens": 2}],
                    },
                }
            ]
        },
        "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B", "engine": "vllm-v1", "cuda_graphs": False},
        "stop": {"max_requests": 1},
    }
    loaded = LoadedScenario(scenario_from_mapping(raw, "t.yaml"), "t.yaml", Path("."))
    engine = plan_run(loaded, Catalogue.builtin()).groups[0].gpu.engine
    assert engine.cuda_graph_max_seqs == 0 and engine.launch_overhead_per_layer_compiled_s == 0.0


def test_gemms_never_run_faster_than_the_gpu_holds_at_its_power_limit():
    catalogue = Catalogue.builtin()
    h100 = GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine("vllm"))
    assert (h100.sustained_flops_per_s, h100.sustained_fp8_flops_per_s) == (6.9711e14, 1.315e15)  # measured
    llama = ModelShape.from_profile(catalogue.model("Llama-3.1-8B"))
    prefill = StepBatch(prefill_new_tokens=(8192,), prefill_context_tokens=(0,))
    decode = StepBatch(num_decode_seqs=8, decode_context_tokens=8000)
    fast = replace(h100, compute_efficiency_frac=1.0)  # an engine scaled past what the power limit allows
    for model, limit in ((llama, 6.9711e14), (llama.with_precision("fp8", None), 1.315e15)):
        linear = price_step(prefill, model, fast, 1).op("linear")
        assert linear.time_s == pytest.approx(linear.flops / limit, rel=1e-9)  # every GEMM at the limit
        assert linear.bound == "power"  # what `clustersim step` prints: the power limit decides
        assert price_step(prefill, model, fast.in_bursts(), 1).op("linear").bound == "compute"
        assert price_step(prefill, model, fast.in_bursts(), 1).op("linear").time_s < 0.8 * linear.time_s
        slow = replace(h100, compute_efficiency_frac=0.5)  # below the limit: the roofline decides
        assert price_step(prefill, model, slow, 1).op("linear") == price_step(prefill, model, slow.in_bursts(), 1).op(
            "linear"
        )
        assert price_step(decode, model, fast, 1).op("linear") == price_step(decode, model, fast.in_bursts(), 1).op(
            "linear"
        )  # memory-bound decode GEMMs are far below it


def test_the_power_limit_of_a_precision_follows_the_path_its_gemms_run():
    gpu = replace(GPU, peak_fp8_flops_per_s=2000.0, sustained_flops_per_s=300.0, sustained_fp8_flops_per_s=600.0)
    assert gpu.gemm_sustained_flops_per_s("bf16") == 300.0
    assert gpu.gemm_sustained_flops_per_s("fp8") == 600.0
    assert gpu.gemm_sustained_flops_per_s("fp4") == 300.0  # no FP4 tensor cores: dequantized to 16 bits
    assert replace(gpu, peak_fp4_flops_per_s=4000.0).gemm_sustained_flops_per_s("fp4") == math.inf  # none measured
    assert replace(gpu, peak_fp8_flops_per_s=None).gemm_sustained_flops_per_s("fp8") == 300.0  # 16-bit path
    assert GPU.gemm_sustained_flops_per_s("bf16") == math.inf  # no limit measured: none applied
    assert gpu.in_bursts().gemm_sustained_flops_per_s("fp8") == math.inf
