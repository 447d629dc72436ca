"""Model architecture arithmetic on the real catalogue: parameter counts match published totals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SCENARIOS, SHARED, explicit_scenario

from clustersim.architecture import GpuSpec, ModelShape, blocks_for_tokens, engine_kv_memory, kv_capacity_blocks
from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.errors import ConfigError
from clustersim.runplan import plan_run

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
    references = json.loads(reference_file.read_text())
    if name not in references:
        pytest.skip(f"{name} is not in {reference_file.name}")
    reference = references[name]
    assert ModelShape.from_profile(CATALOGUE.model(name)).kv_bytes_per_token() == reference["kv_bytes_per_token_bf16"]


@pytest.mark.parametrize(("tokens", "block", "blocks"), [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (33, 16, 3)])
def test_blocks_for_tokens(tokens, block, blocks):
    assert blocks_for_tokens(tokens, block) == blocks


def test_kv_capacity_by_hand():
    model = ModelShape.from_profile(CATALOGUE.model("Llama-3.1-8B"))
    gpu = GpuSpec.from_profiles(CATALOGUE.hardware("H100-SXM"), CATALOGUE.engine("vllm"))
    memory = 79.2 * 2**30  # what the driver reports on an H100 80GB (the profile's memory_reported_bytes)
    assert gpu.usable_memory_bytes == pytest.approx(memory, rel=1e-4)
    # 0.9 x memory - 8,030,261,248 params x 2 B; 131,072 B per token x 16 tokens per block
    expected = int((0.9 * gpu.usable_memory_bytes - 8_030_261_248 * 2) // (131_072 * 16))
    assert kv_capacity_blocks(model, gpu, 1, 0.9, 16) == expected
    # TP 2 halves the weights per GPU and the KV bytes per token per GPU (8 KV heads shard)
    expected = int((0.9 * gpu.usable_memory_bytes - 8_030_261_248) // (65_536 * 16))
    assert kv_capacity_blocks(model, gpu, 2, 0.9, 16) == expected


def test_pipeline_parallel_and_reserve_shrink_kv_capacity():
    model = ModelShape.from_profile(CATALOGUE.model("Llama-3.1-8B"))
    gpu = GpuSpec.from_profiles(CATALOGUE.hardware("H100-SXM"), CATALOGUE.engine("vllm"))
    usable = 0.9 * gpu.usable_memory_bytes
    # PP 2: 16 layers per GPU, so half the KV bytes per token; weights: half the layers + both embeddings
    layer_params = 8_030_261_248 - 2 * 128_256 * 4096 - 4096
    stage_bytes = (layer_params / 2 + 2 * 128_256 * 4096 + 4096) * 2
    assert kv_capacity_blocks(model, gpu, 1, 0.9, 16, 2) == int((usable - stage_bytes) // (65_536 * 16))
    reserve = 1e9
    assert kv_capacity_blocks(model, gpu, 1, 0.9, 16, 1, reserve) == int(
        (usable - 8_030_261_248 * 2 - reserve) // (131_072 * 16)
    )


def test_fp8_kv_cache_halves_bytes_per_token():
    model = ModelShape.from_profile(CATALOGUE.model("Llama-2-70B"), "fp8", "fp8")
    assert model.kv_bytes_per_token() == 327_680 / 2
    # quantized checkpoints keep the embedding and the LM head at 16 bits
    embedding = 2 * 32_000 * 8192
    assert model.embedding_params() == embedding
    assert model.weight_bytes() == model.num_params() - embedding + 2 * embedding


GIB = 2.0**30


@pytest.mark.parametrize(
    ("engine", "expected_gib"),
    [
        # vLLM V1: 0.9 x 79.2 GiB - weights - activation peak - 0.35 GiB outside torch
        ("vllm-v1", lambda w, a: 0.9 * 79.2 - w - a - 3.758e8 / GIB),
        # SGLang: 0.88 x 79.2 GiB - weights (activations fit in the other 12%)
        ("sglang", lambda w, a: 0.88 * 79.2 - w),
        # TensorRT-LLM: 0.9 of what is free after weights and activations
        ("trtllm", lambda w, a: 0.9 * (79.2 - w - a)),
    ],
)
def test_engine_kv_memory_rules_by_hand(engine, expected_gib):
    model = ModelShape.from_profile(CATALOGUE.model("Llama-3.1-8B"))
    profile = CATALOGUE.engine(engine)
    gpu = GpuSpec.from_profiles(CATALOGUE.hardware("H100-SXM"), profile)
    frac = profile.kv.gpu_memory_frac.value
    activations = 1.0 * GIB
    memory = engine_kv_memory(model, gpu, 1, 1, frac, activations)
    weights_gib = 8_030_261_248 * 2 / GIB
    assert memory.kv_bytes / GIB == pytest.approx(expected_gib(weights_gib, 1.0), rel=1e-3)
    # a vLLM log line reads 54.62 GiB for this model on an H100 (0.35 GiB outside torch, 1.24 GiB activations)
    if engine == "vllm-v1":
        logged = engine_kv_memory(model, gpu, 1, 1, frac, 1.24 * GIB)
        assert logged.kv_bytes / GIB == pytest.approx(54.62, abs=0.15)


def test_tensorrt_llm_weights_may_fill_more_than_its_kv_fraction_of_memory():
    """TensorRT-LLM's free_gpu_memory_fraction is of what the weights leave: DeepSeek-R1 at TP 4 on B200s
    (157 GiB of weights a GPU, more than 0.8 of 178 GiB) runs, as SemiAnalysis's InferenceX served it."""

    raw = explicit_scenario([(0.0, 8, 3)])
    del raw["scheduler"], raw["kv"]
    raw["cluster"] = {"hardware": "B200", "model": "deepseek-ai/DeepSeek-R1-0528", "engine": "trtllm",
                      "tensor_parallel": 4}  # fmt: skip
    raw["kv"] = {"gpu_memory_frac": 0.8}
    plan = plan_run(LoadedScenario(scenario_from_mapping(raw, "t.yaml"), "t.yaml", Path(".")), CATALOGUE)
    memory = plan.groups[0].kv_memory
    assert memory is not None and memory.weight_bytes > 0.8 * memory.total_bytes
    left = memory.total_bytes - memory.weight_bytes - memory.activation_bytes - memory.runtime_bytes
    assert memory.kv_bytes == pytest.approx(0.8 * left) and plan.groups[0].num_kv_blocks > 0
    raw["cluster"]["engine"] = "vllm"  # vLLM's fraction is of the total: the same weights do not fit
    with pytest.raises(ConfigError, match=r"does not fit on B200 .* usable \(0.8 x"):
        plan_run(LoadedScenario(scenario_from_mapping(raw, "t.yaml"), "t.yaml", Path(".")), CATALOGUE)


def test_a_measured_load_sets_the_weights_memory_at_the_published_precision_only():
    """gpt-oss-120b takes 65.97 GiB on one H100 as vLLM loads it (its MXFP4 experts repacked), not the
    56 GiB its parameters at 0.5 byte come to; served at another precision it is counted again."""
    from clustersim.architecture import weight_bytes_per_gpu

    model = ModelShape.from_profile(CATALOGUE.model("openai/gpt-oss-120b"))
    assert model.weight_bytes() / GIB == pytest.approx(65.97, abs=0.01)
    assert model.computed_weight_bytes() / GIB == pytest.approx(56.0, abs=0.1)
    assert weight_bytes_per_gpu(model, 2) == pytest.approx(model.weight_bytes() / 2)
    assert sum(weight_bytes_per_gpu(model, 1, 2) for _ in range(2)) == pytest.approx(model.weight_bytes(), rel=0.05)
    bf16 = ModelShape.from_profile(CATALOGUE.model("openai/gpt-oss-120b"), weight_precision="bf16")
    assert bf16.loaded_weight_bytes == 0.0 and bf16.weight_bytes() == bf16.computed_weight_bytes()
    assert model.with_precision("fp8", None).loaded_weight_bytes == 0.0


def test_vllm_tensor_parallel_buffers_come_off_every_gpu():
    model = ModelShape.from_profile(CATALOGUE.model("Llama-3.1-8B"))
    gpu = GpuSpec.from_profiles(CATALOGUE.hardware("H100-SXM"), CATALOGUE.engine("vllm-v1"))
    one = engine_kv_memory(model, gpu, 1, 1, 0.9, 0.0)
    two = engine_kv_memory(model, gpu, 2, 1, 0.9, 0.0)
    assert two.runtime_bytes - one.runtime_bytes == pytest.approx(1.92e9)
    assert two.weight_bytes == pytest.approx(one.weight_bytes / 2)


def test_every_profile_number_cites_a_source():
    for kind in ("hardware", "model", "engine"):
        for name in CATALOGUE.names(kind):
            profile = getattr(CATALOGUE, kind)(name)
            for field, value in profile:
                if hasattr(value, "source"):
                    assert len(value.source) > 10, f"{kind} {name}.{field} has no real source"


def test_engine_efficiency_scales_multiply_the_gpus_fractions_capped_at_one():
    from clustersim.config.profiles import Cited, EfficiencyScales

    def cited(value):
        return Cited[float](value=value, source="test scale")

    hardware = CATALOGUE.hardware("H100-SXM")
    scales = EfficiencyScales(gemm_compute_scale=cited(0.5), decode_attention_scale=cited(2.0), moe_scale=cited(0.25))
    engine = CATALOGUE.engine("vllm-v1").model_copy(
        update={"efficiency": {"hopper": scales}, "frontend_fitted_per_request_s": cited(0.01)}
    )
    plain = GpuSpec.from_profiles(
        hardware,
        CATALOGUE.engine("vllm-v1").model_copy(update={"efficiency": None, "frontend_fitted_per_request_s": None}),
    )
    gpu = GpuSpec.from_profiles(hardware, engine)
    assert gpu.compute_efficiency_frac == pytest.approx(0.5 * hardware.compute_efficiency_frac.value)
    assert gpu.decode_attention_memory_efficiency_frac == 1.0  # 2 x 0.777, capped
    assert gpu.memory_efficiency_frac == plain.memory_efficiency_frac  # no scale: unchanged
    assert gpu.moe_efficiency_scale == 0.25
    assert gpu.engine.frontend_per_request_s == pytest.approx(plain.engine.frontend_per_request_s + 0.01)
    a100 = GpuSpec.from_profiles(CATALOGUE.hardware("A100-80GB"), engine)  # another family: untouched
    assert a100.compute_efficiency_frac == CATALOGUE.hardware("A100-80GB").compute_efficiency_frac.value


def test_an_engines_all_reduce_latency_replaces_nccls_and_its_fitted_scale_multiplies_it():
    from clustersim.config.profiles import Cited, EfficiencyScales
    from clustersim.cost.roofline import all_reduce_time_s

    hardware = CATALOGUE.hardware("H100-SXM")
    own = CATALOGUE.engine("vllm-v1").model_copy(update={"efficiency": None})
    nccl = own.model_copy(update={"all_reduce_latency_s": None})
    assert GpuSpec.from_profiles(hardware, nccl).engine.all_reduce_latency_s == 0.0  # the link's (NCCL) latency
    gpu = GpuSpec.from_profiles(hardware, own)
    assert gpu.engine.all_reduce_latency_s == own.all_reduce_latency_s.value < hardware.interconnect_latency_s.value
    assert all_reduce_time_s(0.0, 8, gpu) == pytest.approx(own.all_reduce_latency_s.value)
    assert all_reduce_time_s(0.0, 8, GpuSpec.from_profiles(hardware, nccl)) == hardware.interconnect_latency_s.value
    scales = EfficiencyScales(comm_latency_scale=Cited[float](value=3.0, source="test scale"))
    scaled = GpuSpec.from_profiles(hardware, own.model_copy(update={"efficiency": {"hopper": scales}}))
    assert scaled.engine.all_reduce_latency_s == pytest.approx(3.0 * own.all_reduce_latency_s.value)  # not capped
    fitted_nccl = GpuSpec.from_profiles(hardware, nccl.model_copy(update={"efficiency": {"hopper": scales}}))
    assert fitted_nccl.engine.all_reduce_latency_s == pytest.approx(3.0 * hardware.interconnect_latency_s.value)


def test_an_older_release_runs_without_the_kernels_later_ones_gained():
    from clustersim.config.profiles import Cited, EfficiencyScales, KernelRelease

    def cited(value):
        return Cited[float](value=value, source="test factor")

    hardware = CATALOGUE.hardware("MI300X")
    release = KernelRelease(
        gpu_family="cdna3",
        since_version="0.4.7",
        before=EfficiencyScales(gemm_compute_scale=cited(0.5), decode_attention_scale=cited(0.25)),
    )
    fitted = EfficiencyScales(gemm_compute_scale=cited(0.8))
    engine = CATALOGUE.engine("sglang").model_copy(
        update={"efficiency": {"cdna3": fitted}, "kernel_releases": (release,)}
    )
    current = GpuSpec.from_profiles(hardware, engine)
    for version in (None, "0.4.7", "v0.5.0rc1", "1.0"):
        assert GpuSpec.from_profiles(hardware, engine, version) == current
    old = GpuSpec.from_profiles(hardware, engine, "0.4.2.post4")
    assert old.compute_efficiency_frac == pytest.approx(0.5 * current.compute_efficiency_frac)  # 0.8 x 0.5
    decode_frac = hardware.decode_attention_memory_efficiency_frac or hardware.memory_efficiency_frac
    assert old.decode_attention_memory_efficiency_frac == pytest.approx(0.25 * decode_frac.value)  # no fitted scale
    assert old.memory_efficiency_frac == current.memory_efficiency_frac  # no factor: unchanged
    nvidia = CATALOGUE.hardware("H100-SXM")  # the release's family only
    assert GpuSpec.from_profiles(nvidia, engine, "0.4.2") == GpuSpec.from_profiles(nvidia, engine)


def test_a_kernel_release_and_a_scenarios_engine_version_must_be_release_numbers():
    from pydantic import ValidationError

    from clustersim.config.loader import load_scenario
    from clustersim.config.profiles import EfficiencyScales, KernelRelease
    from clustersim.errors import ConfigError

    with pytest.raises(ValidationError, match="not a release number"):
        KernelRelease(gpu_family="cdna3", since_version="latest", before=EfficiencyScales())
    with pytest.raises(ConfigError, match=r"cluster\.engine_version.*not a release number"):
        load_scenario(SCENARIOS / "default.yaml", ["cluster.engine_version=nightly"])
