"""A roofline step-time model: each op group costs max(compute time, memory time).

For one replica of ``tensor_parallel`` GPUs, per step:

* ``linear``: QKV/O/MLP GEMMs of every layer. FLOPs ``2 x tokens x params``; bytes are the
  weight shard plus the activations read and written.
* ``lm_head``: logits for each sequence that emits a token this step.
* ``attention_prefill``: causal attention of each prefill chunk over its prior context and
  itself; reads the prior KV and writes the new KV.
* ``attention_decode``: each decode sequence reads its whole KV cache.
* ``all_reduce``: two per layer (after attention and after the MLP) when TP > 1, ring
  algorithm: ``latency + 2(n-1)/n x message / link bandwidth``.
* ``overhead``: the engine's fixed per-step time.

Compute time is FLOPs / (peak x compute efficiency); memory time is bytes / (HBM bandwidth x
memory efficiency); the step is the sum over groups (kernels run one after another).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from clustersim.architecture import GpuSpec, ModelShape, kv_bytes_per_token_per_gpu
from clustersim.cost.base import DecodeStepShape, StepBatch

Bound = Literal["compute", "memory", "latency", "fixed"]


@dataclass(frozen=True, slots=True)
class OpCost:
    """One op group of one step on one GPU of the replica."""

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


def _roofline(name: str, flops: float, num_bytes: float, gpu: GpuSpec) -> OpCost:
    compute_s = flops / (gpu.peak_flops_per_s * gpu.compute_efficiency_frac)
    memory_s = num_bytes / (gpu.hbm_bandwidth_bytes_per_s * gpu.memory_efficiency_frac)
    if compute_s >= memory_s:
        return OpCost(name, flops, num_bytes, compute_s, "compute")
    return OpCost(name, flops, num_bytes, memory_s, "memory")


def linear_flops_and_bytes(num_tokens: int, model: ModelShape, tensor_parallel: int) -> tuple[float, float]:
    """FLOPs and bytes of all layers' GEMMs for ``num_tokens`` tokens on one GPU."""
    tp = tensor_parallel
    b = model.weight_bytes_per_param
    d, ffn = model.hidden_size, model.intermediate_size
    params = model.num_layers * model.layer_linear_params()
    flops = 2.0 * num_tokens * params / tp
    # activations in and out of the QKV, O, up(+gate) and down GEMMs; the outer dims are sharded
    act_per_token = (
        (d + (model.q_dim + 2 * model.kv_dim) / tp)
        + (model.q_dim / tp + d)
        + (d + (2 if model.gated_mlp else 1) * ffn / tp)
        + (ffn / tp + d)
    )
    num_bytes = params * b / tp + model.num_layers * num_tokens * act_per_token * b
    return flops, num_bytes


def lm_head_flops_and_bytes(num_seqs: int, model: ModelShape, tensor_parallel: int) -> tuple[float, float]:
    """Logits for ``num_seqs`` positions (one per sequence that samples a token)."""
    d, v, b = model.hidden_size, model.vocab_size, model.weight_bytes_per_param
    flops = 2.0 * num_seqs * d * v / tensor_parallel
    num_bytes = (d * v + num_seqs * (d + v / tensor_parallel)) * b / tensor_parallel
    return flops, num_bytes


def prefill_attention_flops_and_bytes(
    new_tokens: tuple[int, ...], context_tokens: tuple[int, ...], model: ModelShape, tensor_parallel: int
) -> tuple[float, float]:
    """Causal attention of prefill chunks: each new token attends to the prior context and earlier new tokens."""
    heads = model.num_attention_heads / tensor_parallel
    kv_per_token = kv_bytes_per_token_per_gpu(model, tensor_parallel)  # all layers
    flops = 0.0
    kv_tokens = 0
    q_tokens = 0
    for n, p in zip(new_tokens, context_tokens, strict=True):
        # QK^T and PV: 2 matmuls x 2 FLOPs per MAC over n x (p + (n+1)/2) positions on average
        flops += 4.0 * heads * model.head_dim * n * (p + (n + 1) / 2.0)
        kv_tokens += p + n
        q_tokens += n
    flops *= model.num_layers
    q_and_out_bytes = 2.0 * q_tokens * heads * model.head_dim * model.weight_bytes_per_param * model.num_layers
    return flops, kv_tokens * kv_per_token + q_and_out_bytes


def decode_attention_flops_and_bytes(
    num_seqs: int, context_tokens: int, model: ModelShape, tensor_parallel: int
) -> tuple[float, float]:
    """Decode attention: every sequence reads its KV cache (``context_tokens`` summed over sequences)."""
    heads = model.num_attention_heads / tensor_parallel
    flops = 4.0 * heads * model.head_dim * context_tokens * model.num_layers
    q_and_out_bytes = 2.0 * num_seqs * heads * model.head_dim * model.weight_bytes_per_param * model.num_layers
    return flops, context_tokens * kv_bytes_per_token_per_gpu(model, tensor_parallel) + q_and_out_bytes


def all_reduce_time_s(message_bytes: float, tensor_parallel: int, gpu: GpuSpec) -> float:
    """One ring all-reduce of ``message_bytes`` over ``tensor_parallel`` GPUs."""
    if tensor_parallel <= 1:
        return 0.0
    ring_factor = 2.0 * (tensor_parallel - 1) / tensor_parallel
    return gpu.interconnect_latency_s + ring_factor * message_bytes / gpu.interconnect_bandwidth_bytes_per_s


def price_step(batch: StepBatch, model: ModelShape, gpu: GpuSpec, tensor_parallel: int) -> StepCost:
    """Price one iteration of ``batch`` on a replica of ``tensor_parallel`` ``gpu``s, with a breakdown."""
    tp = tensor_parallel
    ops: list[OpCost] = []
    num_tokens = batch.num_tokens
    if num_tokens > 0:
        ops.append(_roofline("linear", *linear_flops_and_bytes(num_tokens, model, tp), gpu))
        ops.append(_roofline("lm_head", *lm_head_flops_and_bytes(batch.num_seqs, model, tp), gpu))
    if batch.prefill_new_tokens:
        flops, num_bytes = prefill_attention_flops_and_bytes(
            batch.prefill_new_tokens, batch.prefill_context_tokens, model, tp
        )
        ops.append(_roofline("attention_prefill", flops, num_bytes, gpu))
    if batch.num_decode_seqs:
        flops, num_bytes = decode_attention_flops_and_bytes(
            batch.num_decode_seqs, batch.decode_context_tokens, model, tp
        )
        ops.append(_roofline("attention_decode", flops, num_bytes, gpu))
    if tp > 1 and num_tokens > 0:
        message_bytes = num_tokens * model.hidden_size * model.weight_bytes_per_param
        comm_s = 2 * model.num_layers * all_reduce_time_s(message_bytes, tp, gpu)
        ops.append(OpCost("all_reduce", 0.0, 2 * model.num_layers * message_bytes, comm_s, "latency"))
    ops.append(OpCost("overhead", 0.0, 0.0, gpu.step_overhead_s, "fixed"))
    return StepCost(sum(op.time_s for op in ops), tuple(ops))


@dataclass(frozen=True, slots=True)
class RooflineCostModel:
    """The roofline model bound to one replica's model, GPU and TP degree."""

    model: ModelShape
    gpu: GpuSpec
    tensor_parallel: int

    def step_duration_s(self, batch: StepBatch) -> float:
        return price_step(batch, self.model, self.gpu, self.tensor_parallel).duration_s

    def price(self, batch: StepBatch) -> StepCost:
        return price_step(batch, self.model, self.gpu, self.tensor_parallel)

    def decode_step_shape(self, num_seqs: int) -> DecodeStepShape:
        """Every op but decode attention is independent of context; decode attention is max(compute, memory)."""
        empty = price_step(StepBatch(num_decode_seqs=num_seqs), self.model, self.gpu, self.tensor_parallel)
        fixed_s = empty.duration_s - empty.op("attention_decode").time_s
        flops0, bytes0 = decode_attention_flops_and_bytes(num_seqs, 0, self.model, self.tensor_parallel)
        flops1, bytes1 = decode_attention_flops_and_bytes(num_seqs, 1, self.model, self.tensor_parallel)
        flops_per_s = self.gpu.peak_flops_per_s * self.gpu.compute_efficiency_frac
        bytes_per_s = self.gpu.hbm_bandwidth_bytes_per_s * self.gpu.memory_efficiency_frac
        piece = (
            flops0 / flops_per_s,
            (flops1 - flops0) / flops_per_s,
            bytes0 / bytes_per_s,
            (bytes1 - bytes0) / bytes_per_s,
        )
        return DecodeStepShape(fixed_s, (piece,))
