"""The settings benchmark tools choose for themselves, as their sources compute them (pure).

``trtllm-bench throughput`` builds its runtime with a max batch size and a max token budget it
derives from the dataset and the GPU memory (``tensorrt_llm/bench/build/tuning.py``
``calc_engine_setting`` and ``finetune_setting``); a row that does not state them ran with these. Its
``--enable_chunked_context`` defaults to true and ``--scheduler_policy`` to ``guaranteed_no_evict``
(``tensorrt_llm/bench/benchmark/throughput.py``): the ``trtllm_no_evict_chunked`` policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from clustersim.architecture import ModelShape

GIB = 2.0**30
TRTLLM_BENCH_KV_FRAC = 0.95  # calc_engine_setting's kv_cache_gpu_mem_fraction (the perf overview's runs too)


@dataclass(frozen=True)
class BenchSettings:
    """A benchmark's batch limits: sequences per step and tokens per step."""

    max_num_seqs: int
    max_num_batched_tokens: int


def trtllm_bench_settings(
    model: ModelShape,
    total_memory_bytes: float,
    tensor_parallel: int,
    pipeline_parallel: int,
    input_tokens: float,
    output_tokens: float,
) -> BenchSettings:
    """``calc_engine_setting``: KV memory = 0.95 x (GPUs x memory - parameters x bytes per weight), requests
    that fit at ``input + output`` tokens each, then ``finetune_setting``'s rounding (batch at least 64,
    rounded up to 32/128/256; tokens ``batch x (1 + input / output)``, at least 2,048, at most 32,768)."""
    kv_heads = max(tensor_parallel, model.num_kv_heads)
    kv_gib_per_token = 2 * model.num_layers * kv_heads * model.head_dim * model.kv_bytes_per_element / GIB
    if model.is_mla:
        kv_gib_per_token = model.kv_bytes_per_token() / GIB
    num_gpus = tensor_parallel * pipeline_parallel
    engine_gib = model.num_params() * model.weight_bytes_per_param / GIB
    available_gib = total_memory_bytes / GIB * num_gpus - engine_gib
    cache_gib = available_gib * TRTLLM_BENCH_KV_FRAC
    max_requests = cache_gib / (kv_gib_per_token * (input_tokens + output_tokens))
    raw_bs = min(max_requests, 4096) / pipeline_parallel
    raw_tokens = min(raw_bs * (1 + input_tokens / output_tokens), 32768)
    if raw_bs < 256:
        batch = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        batch = 128 * math.ceil(raw_bs / 128)
    else:
        batch = 256 * math.ceil(raw_bs / 256)
    if raw_tokens < 4096:
        tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        tokens = 1024 * math.ceil(raw_tokens / 1024)
    return BenchSettings(batch, tokens)
