"""Model architecture arithmetic on the real catalogue: parameter counts match published totals."""

from __future__ import annotations

import json

import pytest
from conftest import SHARED

from clustersim.architecture import GpuSpec, ModelShape, blocks_for_tokens, kv_capacity_blocks
from clustersim.config.catalogue import Catalogue

CATALOGUE = Catalogue.builtin()


@pytest.mark.parametrize("name", CATALOGUE.names("model"))
def test_parameter_count_matches_published_total(name):
    profile = CATALOGUE.model(name)
    assert ModelShape.from_profile(profile).num_params() == pytest.approx(profile.published_params.value, rel=0.005)


@pytest.mark.parametrize("name", [n for n in CATALOGUE.names("model") if CATALOGUE.model(n).published_active_params])
def test_active_parameter_count_matches_published(name):
    profile = CATALOGUE.model(name)
    assert profile.published_active_params is not None
    shape = ModelShape.from_profile(profile)
    assert shape.num_active_params() == pytest.approx(profile.published_active_params.value, rel=0.01)


def test_every_issue_model_and_gpu_is_catalogued():
    models = {
        "Llama-2-7B",
        "Llama-2-13B",
        "Llama-2-70B",
        "Llama-3.1-8B",
        "Llama-3.1-70B",
        "Llama-3.1-405B",
        "Mistral-7B-v0.1",
        "Mixtral-8x7B",
        "Qwen2.5-7B",
        "Qwen2.5-72B",
        "DeepSeek-V3",
    }
    gpus = {"A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H100-NVL", "H200", "B200", "L40S", "MI300X"}
    assert models <= set(CATALOGUE.names("model"))
    assert gpus <= set(CATALOGUE.names("hardware"))
    assert {"vllm-v1", "vllm-v0.6", "trtllm", "sglang"} <= set(CATALOGUE.names("engine"))
    assert CATALOGUE.engine("vllm").name == "vllm-v1"  # today's vLLM


@pytest.mark.parametrize("name", CATALOGUE.names("model"))
def test_kv_bytes_match_reference(name):
    reference_file = SHARED / "reference" / "model_architectures.json"
    if not reference_file.exists():
        pytest.skip(f"{reference_file} is absent (shared ground truth not mounted)")
    reference = json.loads(reference_file.read_text())[name]
    assert ModelShape.from_profile(CATALOGUE.model(name)).kv_bytes_per_token() == reference["kv_bytes_per_token_bf16"]


@pytest.mark.parametrize(("tokens", "block", "blocks"), [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (33, 16, 3)])
def test_blocks_for_tokens(tokens, block, blocks):
    assert blocks_for_tokens(tokens, block) == blocks


def test_kv_capacity_by_hand():
    model = ModelShape.from_profile(CATALOGUE.model("Llama-3.1-8B"))
    gpu = GpuSpec.from_profiles(CATALOGUE.hardware("H100-SXM"), CATALOGUE.engine("vllm"))
    # 0.9 x 80e9 - 8,030,261,248 params x 2 B; 131,072 B per token x 16 tokens per block
    expected = int((0.9 * 80e9 - 8_030_261_248 * 2) // (131_072 * 16))
    assert kv_capacity_blocks(model, gpu, 1, 0.9, 16) == expected
    # TP 2 halves the weights per GPU and the KV bytes per token per GPU (8 KV heads shard)
    assert kv_capacity_blocks(model, gpu, 2, 0.9, 16) == int((0.9 * 80e9 - 8_030_261_248) // (65_536 * 16))


def test_pipeline_parallel_and_reserve_shrink_kv_capacity():
    model = ModelShape.from_profile(CATALOGUE.model("Llama-3.1-8B"))
    gpu = GpuSpec.from_profiles(CATALOGUE.hardware("H100-SXM"), CATALOGUE.engine("vllm"))
    # PP 2: 16 layers per GPU, so half the KV bytes per token; weights: half the layers + both embeddings
    layer_params = 8_030_261_248 - 2 * 128_256 * 4096 - 4096
    stage_bytes = (layer_params / 2 + 2 * 128_256 * 4096 + 4096) * 2
    assert kv_capacity_blocks(model, gpu, 1, 0.9, 16, 2) == int((0.9 * 80e9 - stage_bytes) // (65_536 * 16))
    reserve = 1e9
    assert kv_capacity_blocks(model, gpu, 1, 0.9, 16, 1, reserve) == int(
        (0.9 * 80e9 - 8_030_261_248 * 2 - reserve) // (131_072 * 16)
    )


def test_fp8_kv_cache_halves_bytes_per_token():
    model = ModelShape.from_profile(CATALOGUE.model("Llama-2-70B"), "fp8", "fp8")
    assert model.kv_bytes_per_token() == 327_680 / 2
    assert model.weight_bytes() == model.num_params()


def test_every_profile_number_cites_a_source():
    for kind in ("hardware", "model", "engine"):
        for name in CATALOGUE.names(kind):
            profile = getattr(CATALOGUE, kind)(name)
            for field, value in profile:
                if hasattr(value, "source"):
                    assert len(value.source) > 10, f"{kind} {name}.{field} has no real source"
