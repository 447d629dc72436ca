"""An engine's scheduler and KV defaults fill what a scenario leaves unset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import explicit_scenario

from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.errors import ConfigError
from clustersim.runplan import plan_run


def planned(raw: dict[str, Any]) -> Any:
    scenario = scenario_from_mapping(raw, "test.yaml")
    return plan_run(LoadedScenario(scenario, "test.yaml", Path(".")), Catalogue.builtin()).scenario


def bare(engine: str, hardware: str = "H100-SXM", **sections: Any) -> dict[str, Any]:
    raw = explicit_scenario([(0.0, 8, 3)])
    del raw["scheduler"], raw["kv"]
    raw["cluster"] = {"hardware": hardware, "model": "Llama-3.1-8B", "engine": engine}
    raw.update(sections)
    return raw


def test_vllm_v1_defaults_on_an_h100():
    scenario = planned(bare("vllm-v1"))
    assert (scenario.scheduler.policy, scenario.scheduler.max_num_seqs, scenario.scheduler.max_num_batched_tokens) == (
        "vllm_v1",
        1024,
        8192,
    )
    assert scenario.kv.prefix_caching and scenario.kv.watermark_frac == 0.0


def test_vllm_is_v1_and_small_gpus_get_smaller_budgets():
    scenario = planned(bare("vllm", hardware="A100-80GB"))
    assert (scenario.scheduler.policy, scenario.scheduler.max_num_seqs, scenario.scheduler.max_num_batched_tokens) == (
        "vllm_v1",
        256,
        2048,
    )


def test_vllm_v0_and_trtllm_defaults():
    v0 = planned(bare("vllm-v0.6"))
    assert (v0.scheduler.policy, v0.scheduler.max_num_seqs, v0.kv.watermark_frac, v0.kv.prefix_caching) == (
        "vllm_v0",
        256,
        0.01,
        False,
    )
    trt = planned(bare("trtllm"))
    assert (trt.scheduler.policy, trt.scheduler.max_num_seqs, trt.scheduler.max_num_batched_tokens) == (
        "trtllm_no_evict",
        2048,
        8192,
    )
    assert not trt.kv.prefix_caching
    sgl = planned(bare("sglang"))
    assert (sgl.scheduler.policy, sgl.scheduler.max_num_batched_tokens) == ("sglang", 8192)


def test_what_the_scenario_sets_wins():
    raw = bare("vllm-v1", scheduler={"policy": "continuous", "max_num_seqs": 64}, kv={"prefix_caching": False})
    scenario = planned(raw)
    assert (scenario.scheduler.policy, scenario.scheduler.max_num_seqs, scenario.scheduler.max_num_batched_tokens) == (
        "continuous",
        64,
        8192,
    )
    assert not scenario.kv.prefix_caching


def test_a_default_that_contradicts_the_scenario_is_left_out():
    # a contiguous allocator cannot cache prefixes: V1's prefix caching default is not applied
    scenario = planned(bare("vllm-v1", scheduler={"policy": "continuous"}, kv={"allocator": "contiguous"}))
    assert not scenario.kv.prefix_caching


def test_a_budget_below_the_engines_default_seats_names_the_field_to_set():
    with pytest.raises(ConfigError) as info:
        planned(bare("vllm-v1", scheduler={"max_num_batched_tokens": 512}))
    message = str(info.value)
    assert "test.yaml: scheduler:" in message
    assert "max_num_batched_tokens (512) must be at least max_num_seqs (1024)" in message
    assert "engine vllm-v1 sets" in message and "set the field in the scenario" in message


@pytest.mark.parametrize(("tp", "frac"), [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81)])
def test_sglang_before_0_5_3_memory_fraction_falls_with_tensor_parallelism(tp: int, frac: float) -> None:
    raw = bare("sglang")
    raw["cluster"].update(tensor_parallel=tp, engine_version="0.5.2")
    assert planned(raw).kv.gpu_memory_frac == frac
    assert planned(raw).scheduler.max_num_batched_tokens == 8192
    raw["kv"] = {"gpu_memory_frac": 0.7}
    assert planned(raw).kv.gpu_memory_frac == 0.7  # the scenario's own wins


@pytest.mark.parametrize(
    ("hardware", "tp", "chunk", "graphs", "frac"),
    [
        # 79.2 GiB reported: reserved 512 + 1.5 x 8192 + 2 x 256 + 128 = 13,440 MiB of 81,100
        ("H100-SXM", 1, 8192, 256, 0.834),
        ("H100-SXM", 8, 8192, 512, 0.817),  # 512 + 12,288 + 1,024 + 1,024 = 14,848 MiB
        ("B200", 8, 16384, 512, 0.851),  # 512 + 24,576 + 1,024 + 1,024 = 27,136 MiB of 182,581
    ],
)
def test_sglang_from_0_5_3_sizes_chunks_graphs_and_memory_by_the_gpus_memory(hardware, tp, chunk, graphs, frac):
    raw = bare("sglang", hardware)
    raw["cluster"]["tensor_parallel"] = tp
    scenario = planned(raw)
    assert (scenario.scheduler.max_num_batched_tokens, scenario.kv.gpu_memory_frac) == (chunk, frac)
    plan = plan_run(LoadedScenario(scenario_from_mapping(raw, "t.yaml"), "t.yaml", Path(".")), Catalogue.builtin())
    assert plan.groups[0].gpu.engine.cuda_graph_max_seqs == graphs
    raw["cluster"]["engine_version"] = "0.5.6"
    assert planned(raw).kv.gpu_memory_frac == frac
    raw["scheduler"] = {"max_num_batched_tokens": 4096}
    raw["kv"] = {"gpu_memory_frac": 0.7}
    scenario = planned(raw)  # the scenario's own settings win
    assert (scenario.scheduler.max_num_batched_tokens, scenario.kv.gpu_memory_frac) == (4096, 0.7)


def test_a_memory_rule_needs_ordered_tiers():
    from clustersim.config.memorytiers import GpuMemoryRule

    common = {"since_version": "0.5.3", "reserved_base_mib": 0, "reserved_per_chunk_token_mib": 0,
              "reserved_min_chunk_tokens": 1, "reserved_per_graph_seq_mib": 0, "reserved_per_gpu_mib": 0}  # fmt: skip
    tier = {"chunk_tokens": 8, "graph_seqs": 8}
    with pytest.raises(ValueError, match="increase"):
        GpuMemoryRule.model_validate({**common, "tiers": [{**tier, "below_gib": 80}, {**tier, "below_gib": 40}, tier]})
    with pytest.raises(ValueError, match="the last has none"):
        GpuMemoryRule.model_validate({**common, "tiers": [{**tier, "below_gib": 80}]})
    with pytest.raises(ValueError, match="release number"):
        GpuMemoryRule.model_validate({**common, "since_version": "soon", "tiers": [tier]})


def test_sglang_caps_its_running_requests_by_the_kv_pool_not_at_256():
    raw = bare("sglang")
    plan = plan_run(LoadedScenario(scenario_from_mapping(raw, "t.yaml"), "t.yaml", Path(".")), Catalogue.builtin())
    group = plan.groups[0]
    kv_tokens = group.num_kv_blocks * plan.scenario.kv.block_size_tokens
    # Llama-3.1-8B on an H100: ~470,000 KV tokens over a 131,072-token context: 512 x 3.6 = 1,8xx -> 2,048
    assert kv_tokens > 400_000 and group.model.max_model_len_tokens == 131_072
    assert plan.group_limits(group).max_num_seqs == 2048
    raw["scheduler"] = {"max_num_seqs": 64}
    plan = plan_run(LoadedScenario(scenario_from_mapping(raw, "t.yaml"), "t.yaml", Path(".")), Catalogue.builtin())
    assert plan.seqs_rule is None and plan.group_limits(plan.groups[0]).max_num_seqs == 64  # the scenario's wins
    vllm = plan_run(LoadedScenario(scenario_from_mapping(bare("vllm"), "t.yaml"), "t.yaml", Path(".")))
    assert vllm.seqs_rule is None and vllm.group_limits(vllm.groups[0]).max_num_seqs == 1024


def test_the_running_request_rule_is_sglangs_formula():
    from clustersim.config.reserve import SeqsRule

    rule = SeqsRule(kv_tokens_per_seq=2, pool_seqs_per_context_len=512, pool_min_seqs=2048, pool_max_seqs=4096)
    assert rule.max_seqs(1_000_000, 40_960) == 4096  # 12,500 by the pool formula, clamped to 4,096
    assert rule.max_seqs(250_000, 40_960) == 3125  # int(250,000 / 40,960 x 512)
    assert rule.max_seqs(500_000, 163_840) == 2048  # 1,562 raised to the pool's least
    assert rule.max_seqs(3_000, 40_960) == 1500  # a small pool: half its tokens
    assert rule.max_seqs(1, 40_960) == 1
    with pytest.raises(ValueError, match="at most pool_max_seqs"):
        SeqsRule(kv_tokens_per_seq=2, pool_seqs_per_context_len=512, pool_min_seqs=4096, pool_max_seqs=2048)
