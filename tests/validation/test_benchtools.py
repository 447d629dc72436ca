"""trtllm-bench's own batch limits, computed by hand from tensorrt_llm/bench/build/tuning.py."""

from __future__ import annotations

import pytest

from clustersim.architecture import ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.validation.benchtools import trtllm_bench_settings

CATALOGUE = Catalogue.builtin()
GIB = 2.0**30


def test_llama_8b_fp8_on_h100_by_hand():
    model = ModelShape.from_profile(CATALOGUE.model("Llama-3.1-8B"), "fp8", "fp8")
    # KV: 2 x 32 layers x 8 heads x 128 x 1 B = 65,536 B per token; engine 8,030,261,248 B
    # 0.95 x (79.2 GiB - 7.479 GiB) = 68.135 GiB over 2,176 tokens x 65,536 B = 513.0 requests
    # batch: 128 x ceil(513 / 128) = 640; tokens: 513 x (1 + 128 / 2048) = 545 -> the 2,048 floor
    settings = trtllm_bench_settings(model, 79.2 * GIB, 1, 1, 128, 2048)
    assert (settings.max_num_seqs, settings.max_num_batched_tokens) == (640, 2048)


@pytest.mark.parametrize(("isl", "osl"), [(5000, 500), (20000, 2000), (1000, 1000)])
def test_rounding_of_the_estimates(isl, osl):
    model = ModelShape.from_profile(CATALOGUE.model("Llama-3.1-8B"), "fp8", "fp8")
    cache_gib = 0.95 * (79.2 - 8_030_261_248 / GIB)
    raw = cache_gib / (65_536 / GIB * (isl + osl))  # requests whose KV fits
    raw_tokens = min(raw * (1 + isl / osl), 32768)
    if raw < 256:
        seqs = max(64, 32 * -(-raw // 32))
    elif raw < 1024:
        seqs = 128 * -(-raw // 128)
    else:
        seqs = 256 * -(-raw // 256)
    if raw_tokens < 4096:
        tokens = max(2048, 256 * -(-raw_tokens // 256))
    elif raw_tokens < 8192:
        tokens = 512 * -(-raw_tokens // 512)
    else:
        tokens = 1024 * -(-raw_tokens // 1024)
    settings = trtllm_bench_settings(model, 79.2 * GIB, 1, 1, isl, osl)
    assert (settings.max_num_seqs, settings.max_num_batched_tokens) == (seqs, tokens)
