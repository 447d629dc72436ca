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


def test_every_profile_number_cites_a_source():
    for kind in ("hardware", "model", "engine"):
        for name in CATALOGUE.names(kind):
            profile = getattr(CATALOGUE, kind)(name)
            for field, value in profile:
                if hasattr(value, "source"):
                    assert len(value.source) > 10, f"{kind} {name}.{field} has no real source"
