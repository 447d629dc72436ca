"""The roofline model against hand-computed numbers on a toy model and GPU."""

from __future__ import annotations

import pytest

from clustersim.architecture import GpuSpec, ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.cost import RooflineCostModel, StepBatch, UnitCostModel, price_step
from clustersim.cost.roofline import all_reduce_time_s

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


def test_toy_parameter_counts():
    # attention: Q 8x8 + K,V 2 x 8x4 + O 8x8 = 192; MLP: 3 x 8 x 16 = 384
    assert TOY.attention_params_per_layer() == 192
    assert TOY.mlp_params_per_layer() == 384
    # 2 layers x (576 + two norms of 8) + final norm 8 + embedding and LM head 2 x 10 x 8
    assert TOY.num_params() == 2 * (576 + 16) + 8 + 160
    # K and V, 2 layers, 1 head of 4, 2 bytes
    assert TOY.kv_bytes_per_token() == 2 * 2 * 4 * 2


def test_decode_step_by_hand():
    cost = price_step(StepBatch(num_decode_seqs=1, decode_context_tokens=10), TOY, GPU, 1)
    linear = cost.op("linear")
    assert linear.flops == 2 * 1 * 1152  # 2 x tokens x 2 layers x 576 params
    # weights 1152 x 2 B + activations 2 layers x 104 elements x 2 B (QKV 8+16, O 8+8, up 8+32, down 16+8)
    assert linear.bytes == 2304 + 2 * 104 * 2
    assert linear.time_s == pytest.approx(2720 / 50.0) and linear.bound == "memory"
    lm_head = cost.op("lm_head")
    assert lm_head.flops == 2 * 8 * 10
    assert lm_head.bytes == (80 + 8 + 10) * 2
    assert lm_head.time_s == pytest.approx(196 / 50.0)
    attention = cost.op("attention_decode")
    assert attention.flops == 4 * 2 * 4 * 10 * 2  # 4 x heads x head_dim x context x layers
    assert attention.bytes == 10 * 32 + 2 * 1 * 8 * 2 * 2  # KV of 10 tokens + q and output vectors
    assert attention.time_s == pytest.approx(384 / 50.0)
    assert cost.op("overhead").time_s == 0.25
    assert cost.duration_s == pytest.approx(54.4 + 3.92 + 7.68 + 0.25)


def test_prefill_attention_is_causal():
    cost = price_step(StepBatch(prefill_new_tokens=(4,), prefill_context_tokens=(0,)), TOY, GPU, 1)
    attention = cost.op("attention_prefill")
    # each of 4 new tokens attends on average to (4 + 1) / 2 positions
    assert attention.flops == 4 * 2 * 4 * 4 * 2.5 * 2
    assert attention.bytes == 4 * 32 + 2 * 4 * 8 * 2 * 2
    chunk = price_step(StepBatch(prefill_new_tokens=(4,), prefill_context_tokens=(6,)), TOY, GPU, 1)
    assert chunk.op("attention_prefill").flops == 4 * 2 * 4 * 4 * (6 + 2.5) * 2


def test_tensor_parallel_all_reduce_by_hand():
    # one token of 8 x 2 bytes; ring factor 2(2-1)/2 = 1; latency 1 s + 16 B / 10 B/s
    assert all_reduce_time_s(16, 2, GPU) == pytest.approx(2.6)
    assert all_reduce_time_s(16, 1, GPU) == 0.0
    cost = price_step(StepBatch(num_decode_seqs=1, decode_context_tokens=10), TOY, GPU, 2)
    assert cost.op("all_reduce").time_s == pytest.approx(4 * 2.6)  # two per layer
    assert cost.op("linear").flops == 2304 / 2


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


@pytest.mark.parametrize("tensor_parallel", [1, 2])
@pytest.mark.parametrize("num_seqs", [1, 7, 64, 300])
@pytest.mark.parametrize("context_per_seq", [0, 1, 100, 5000, 100_000])
def test_decode_step_shape_matches_step_price(tensor_parallel, num_seqs, context_per_seq):
    catalogue = Catalogue.builtin()
    model = RooflineCostModel(
        ModelShape.from_profile(catalogue.model("Llama-3.1-70B")),
        GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), catalogue.engine("vllm")),
        tensor_parallel,
    )
    context = num_seqs * context_per_seq
    direct = model.step_duration_s(StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=context))
    assert model.decode_step_shape(num_seqs).duration_s(context) == pytest.approx(direct, rel=1e-12)
    toy = RooflineCostModel(TOY, GPU, tensor_parallel)
    direct = toy.step_duration_s(StepBatch(num_decode_seqs=num_seqs, decode_context_tokens=context))
    assert toy.decode_step_shape(num_seqs).duration_s(context) == pytest.approx(direct, rel=1e-12)
