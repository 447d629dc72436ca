"""A corpus row becomes the scenario of its benchmark, or says why it cannot."""

from __future__ import annotations

import dataclasses

import pytest

from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import scenario_from_mapping
from clustersim.validation.corpus import CorpusRow
from clustersim.validation.rowscenario import (
    OVERLOAD_DETECT_FRAC,
    model_names,
    num_requests,
    resolve_model,
    row_scenario,
    sglang_random_lengths,
    stratified_uniform,
    with_rate_factor,
)

CATALOGUE = Catalogue.builtin()
ROW = CorpusRow(
    row_id="lab-a", publisher="lab", source_url="https://example.org", source_where="", source_date="",
    engine="vllm", engine_version="0.10.1", gpu="H100-SXM", num_gpus=1, tp=1, pp=1, ep=1, dp=1,
    model="meta-llama/Llama-3.1-8B-Instruct", weight_precision="bf16", kv_precision=None, dataset="random",
    prompt_tokens=1000, output_tokens=100, load_kind="concurrency", load=8, num_requests=80,
    max_num_seqs=None, max_num_batched_tokens=None, metrics={"output_tok_per_s": 1000.0},
)  # fmt: skip


def build(**changes):
    built = row_scenario(dataclasses.replace(ROW, **changes), CATALOGUE)
    if built.mapping is not None:
        scenario_from_mapping(built.mapping, "test")  # every mapping is a valid scenario
    return built


def test_a_closed_loop_served_over_http():
    mapping = build().mapping
    assert mapping["workload"]["tenants"][0]["arrival"] == {
        "kind": "closed_loop", "num_users": 8, "think_time": {"kind": "fixed", "time_s": 0.0}
    }  # fmt: skip
    assert mapping["cluster"]["engine"] == "vllm-v1" and mapping["cluster"]["frontend"] is True
    assert mapping["workload"]["tenants"][0]["prompt_tokens"] == {"kind": "fixed", "tokens": 1000}
    assert mapping["stop"] == {"max_requests": 80}


def test_offline_rows_are_queued_at_once_without_a_front_end():
    mapping = build(load_kind="offline", load=None, num_requests=None).mapping
    assert mapping["workload"]["tenants"][0]["arrival"]["rate_per_s"] == 1e6
    assert mapping["cluster"]["frontend"] is False
    assert mapping["stop"] == {"max_requests": 1000}  # the benchmark tools' usual 1,000 prompts


def test_a_harness_that_calls_the_engine_in_its_own_process_has_no_front_end():
    """MLPerf's LoadGen, linked into the submitter's harness, hands the engine token IDs: no API server
    parses, tokenizes or streams, though the load is a rate."""
    served = build(load_kind="rate", load=2.0).mapping
    in_process = build(load_kind="rate", load=2.0, features=frozenset({"in_process"})).mapping
    assert served["cluster"]["frontend"] is True and in_process["cluster"]["frontend"] is False


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"engine": "lmdeploy"}, "engine 'lmdeploy' has no profile"),
        ({"engine_version": "0.6.3"}, "vllm 0.6.3 is older than the modelled 0.8"),
        ({"gpu": "TPU-v5e"}, "no hardware profile for TPU-v5e"),
        ({"model": "acme/unknown-13b"}, "no model profile for acme/unknown-13b"),
        ({"ep": 8}, "expert parallelism is not modelled"),
        ({"features": frozenset({"dp_attention"})}, "data-parallel attention is not modelled"),
        ({"prompt_tokens": None}, "mean prompt and output lengths are not published"),
        ({"weight_precision": "int8"}, "int8 weights are not modelled"),
    ],
)
def test_rows_that_cannot_be_simulated_say_why(changes, reason):
    built = build(**changes)
    assert built.mapping is None and built.skip_reason == reason


def test_model_names_are_resolved_through_quantized_and_organisation_names():
    assert resolve_model("nvidia/Llama-3.3-70B-Instruct-FP8", CATALOGUE) == "Llama-3.1-70B"
    assert resolve_model("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", CATALOGUE) == "Llama-3.1-8B"
    assert resolve_model("amd/Llama-3.1-70B-Instruct-FP8-KV", CATALOGUE) == "Llama-3.1-70B"
    assert model_names("Qwen/Qwen2-7B-Instruct")[:3] == ["Qwen/Qwen2-7B-Instruct", "Qwen2-7B-Instruct", "Qwen2-7B"]


def test_trtllm_bench_rows_get_its_batch_limits_and_memory_fraction():
    built = build(engine="trtllm", engine_version="0.19.0", load_kind="offline", load=None, num_requests=30000,
                  weight_precision="fp8", kv_precision="fp8", prompt_tokens=128, output_tokens=2048)  # fmt: skip
    assert built.mapping["scheduler"] == {
        "max_num_seqs": 640, "max_num_batched_tokens": 2048, "policy": "trtllm_no_evict_chunked"
    }  # fmt: skip
    assert built.mapping["kv"] == {"gpu_memory_frac": 0.95}
    long = build(engine="trtllm", engine_version="0.19.0", load_kind="offline", load=None, num_requests=1000,
                 weight_precision="fp8", kv_precision="fp8", prompt_tokens=20000, output_tokens=2000)  # fmt: skip
    assert long.mapping["scheduler"]["policy"] == "trtllm_no_evict_chunked"  # 20,000 tokens over a smaller budget


@pytest.mark.parametrize(
    ("features", "prompt_tokens", "policy"),
    [
        (frozenset(), 1000, None),  # TensorRT-LLM's default: GUARANTEED_NO_EVICT, no chunking
        (frozenset({"chunked_context"}), 1000, "trtllm_no_evict_chunked"),
        (frozenset({"max_utilization"}), 1000, "trtllm_max_utilization"),
        (frozenset({"max_utilization", "chunked_context"}), 1000, "trtllm_max_utilization_chunked"),
        (frozenset({"max_utilization"}), 5000, "trtllm_max_utilization_chunked"),  # over the 4,096 budget
        (frozenset(), 5000, "trtllm_no_evict_chunked"),
    ],
)
def test_trtllm_rows_run_the_capacity_policy_and_chunking_they_state(features, prompt_tokens, policy):
    built = build(engine="trtllm", engine_version="1.0", load_kind="rate", load=10.0, max_num_batched_tokens=4096,
                  features=features, prompt_tokens=prompt_tokens)  # fmt: skip
    assert built.mapping["scheduler"].get("policy") == policy


def test_a_stated_memory_fraction_and_eager_engine_are_kept():
    mapping = build(gpu_memory_frac=0.5, features=frozenset({"eager"})).mapping
    assert mapping["kv"] == {"gpu_memory_frac": 0.5}
    assert mapping["cluster"]["cuda_graphs"] is False


@pytest.mark.parametrize(
    ("dispatch", "load_kind", "router"),
    [
        ("vllm_dp", "rate", "vllm_dp"),  # vllm serve --data-parallel-size: the engine's own balancer
        ("least_outstanding", "concurrency", "least_outstanding"),
        (None, "rate", None),  # no published rule: round robin, the simulator's default, said as assumed
        ("vllm_dp", "offline", None),  # no endpoint: queued requests split evenly (one replica simulated)
    ],
)
def test_data_parallel_replicas_are_spread_by_the_stated_rule(dispatch, load_kind, router):
    load = None if load_kind == "offline" else 8
    built = build(dp=4, num_gpus=4, load_kind=load_kind, load=load, dispatch=dispatch)
    assert built.mapping.get("router") == (None if router is None else {"kind": router})
    assert any("round robin" in a for a in built.assumptions) == (dispatch is None and load_kind != "offline")
    assert "router" not in build(load_kind=load_kind, load=load, dispatch=dispatch).mapping  # one replica


def test_a_harness_that_states_its_dispatch_rule_overrides_the_engines():
    stated = build(engine="trtllm", engine_version="1.0", dp=8, num_gpus=8, load_kind="rate", load=10.0,
                   dispatch="least_outstanding")  # fmt: skip
    assert stated.mapping["router"] == {"kind": "least_outstanding"}


def test_a_clients_stated_work_between_requests_reaches_the_closed_loop():
    arrival = build(client_gap=(1.4e-3, 4.26e-6)).mapping["workload"]["tenants"][0]["arrival"]
    assert arrival["client_time_per_request_s"] == 1.4e-3 and arrival["client_time_per_prompt_token_s"] == 4.26e-6
    assert arrival["think_time"] == {"kind": "fixed", "time_s": 0.0}


def test_a_per_prompt_step_cap_reaches_the_scheduler():
    assert build(long_prefill_tokens=256).mapping["scheduler"] == {"long_prefill_token_threshold": 256}
    assert "scheduler" not in build().mapping


def test_multi_step_runs_vllms_v0_scheduler_in_runs_of_that_many_steps():
    assert build(multi_step=9).mapping["scheduler"] == {"policy": "vllm_v0", "num_scheduler_steps": 9}


def test_long_poisson_benchmarks_are_cut_to_their_steady_state():
    row = dataclasses.replace(ROW, load_kind="rate", load=10.0, num_requests=500_000,
                              metrics={"output_tok_per_s": 1.0, "e2e_mean_ms": 30_000.0})  # fmt: skip
    # Little's law: 10 req/s x 30 s = 300 in flight; four times that, at least 2,000
    assert num_requests(row) == 2000
    built = row_scenario(row, CATALOGUE)
    assert built.steady and built.mapping["metrics"] == {"warmup_requests": 1000, "cooldown_requests": 200}


def test_a_bounded_row_runs_long_enough_for_overload_to_break_its_ttft_bound():
    row = dataclasses.replace(ROW, load_kind="rate", load=100.0, num_requests=500_000, p99_bounds_ms=(2000.0, 200.0),
                              metrics={"output_tok_per_s": 1.0, "e2e_mean_ms": 10_000.0})  # fmt: skip
    # arrivals over 2 s / 2% = 100 s (more than four 10 s lifetimes): falling 2% behind them queues 2 s
    assert OVERLOAD_DETECT_FRAC == 0.02 and num_requests(row) == 10_000
    long_lived = dataclasses.replace(row, metrics={"output_tok_per_s": 1.0, "e2e_mean_ms": 40_000.0})
    assert num_requests(long_lived) == 16_000  # four lifetimes of 40 s are longer still


def test_a_rate_factor_keeps_the_run_as_long():
    row = dataclasses.replace(ROW, load_kind="rate", load=10.0, num_requests=500_000,
                              metrics={"output_tok_per_s": 1.0, "e2e_mean_ms": 30_000.0})  # fmt: skip
    mapping = row_scenario(row, CATALOGUE).mapping
    faster = with_rate_factor(mapping, 1.5)
    assert faster["workload"]["tenants"][0]["arrival"]["rate_per_s"] == 15.0
    assert faster["stop"]["max_requests"] == 3000
    assert faster["metrics"] == {"warmup_requests": 1500, "cooldown_requests": 300}
    assert mapping["stop"]["max_requests"] == 2000  # the row's own scenario is left as it was
    scenario_from_mapping(faster, "test")


def test_datasets_draw_lengths_with_the_published_means():
    mapping = build(dataset="sharegpt", prompt_tokens=220, output_tokens=200).mapping
    prompt = mapping["workload"]["tenants"][0]["prompt_tokens"]
    assert prompt["kind"] == "lognormal" and prompt["sigma"] == 1.1
    assert prompt["median_tokens"] == round(220 / 1.8312)  # mean = median x exp(sigma^2 / 2)
    many = build(dataset="random-uniform", prompt_tokens=500, output_tokens=100, num_requests=5000).mapping
    assert many["workload"]["tenants"][0]["prompt_tokens"] == {"kind": "uniform", "min_tokens": 1, "max_tokens": 999}


def test_a_short_run_of_uniform_lengths_has_the_published_mean_and_median():
    tenant = build(dataset="random-uniform", prompt_tokens=4194, output_tokens=422, num_requests=10).mapping
    prompts, outputs = (
        tenant["workload"]["tenants"][0]["prompt_tokens"],
        tenant["workload"]["tenants"][0]["output_tokens"],
    )
    assert prompts["kind"] == outputs["kind"] == "empirical" and prompts["order"] == "sequence"
    values = prompts["values"]
    assert len(values) == 10 and min(values) >= 1 and max(values) <= 8387
    assert sum(values) / 10 == pytest.approx(4194, abs=1) and sum(outputs["values"]) / 10 == pytest.approx(422, abs=1)
    assert sorted(values) == [1 + (8387 * (2 * i + 1)) // 20 for i in range(10)]  # one per tenth of the range
    assert values != sorted(values) and prompts != outputs  # shuffled, the two independently
    again = build(dataset="random-uniform", prompt_tokens=4194, output_tokens=422, num_requests=10).mapping
    assert again == tenant  # the same order every time


def test_stratified_lengths_keep_the_mean_of_any_range():
    for low, high, num in [(1, 2, 7), (17000, 23000, 2000), (1, 999, 3), (5, 5, 4)]:
        values = stratified_uniform(low, high, num, 0)
        assert len(values) == num and low <= min(values) and max(values) <= high
        assert sum(values) / num == pytest.approx((low + high) / 2, abs=0.5)


def test_a_range_ratio_draws_lengths_within_it_of_the_nominal_ones():
    def tenant(dataset: str, prompt: int, output: int) -> dict:
        return build(dataset=dataset, prompt_tokens=prompt, output_tokens=output).mapping["workload"]["tenants"][0]

    ranged = tenant("random-range-0.15", 20000, 2000)
    prompts, outputs = ranged["prompt_tokens"]["values"], ranged["output_tokens"]["values"]  # 80 requests
    assert 17000 <= min(prompts) < 17000 + 6001 / 80 and 23000 - 6001 / 80 < max(prompts) <= 23000
    assert 1700 <= min(outputs) < 1700 + 601 / 80 and 2300 - 601 / 80 < max(outputs) <= 2300
    assert sum(prompts) / 80 == pytest.approx(20000, abs=0.5) and sum(outputs) / 80 == pytest.approx(2000, abs=0.5)
    assert max(tenant("random-range-1", 10, 1)["prompt_tokens"]["values"]) == 20


def test_repeated_prompts_keep_only_the_throughputs():
    hits = frozenset({"prefix_cache_hits"})
    row = dataclasses.replace(ROW, features=hits, metrics={"output_tok_per_s": 900.0, "ttft_mean_ms": 40.0})
    assert row.comparable_metrics == {"output_tok_per_s": 900.0}
    assert row_scenario(row, CATALOGUE).mapping is not None
    latencies_only = dataclasses.replace(row, metrics={"e2e_mean_ms": 900.0})
    assert row_scenario(latencies_only, CATALOGUE).skip_reason == (
        "its prompts repeat and it publishes only latencies, which prefix-cache hits decide"
    )


def test_the_rows_engine_release_reaches_the_scenario():
    assert build().mapping["cluster"]["engine_version"] == "0.10.1"
    assert "engine_version" not in build(engine_version="").mapping["cluster"]  # unknown: the current release
    old_rocm = build(engine="sglang", engine_version="0.4.2.post4", gpu="MI300X").mapping
    assert old_rocm["cluster"]["engine_version"] == "0.4.2.post4"


def test_a_dataset_of_published_prompt_lengths_draws_from_them():
    built = build(dataset="kvwarden-mixed", prompt_tokens=3911, output_tokens=512)
    tenant = built.mapping["workload"]["tenants"][0]
    values = tenant["prompt_tokens"]["values"]
    assert tenant["prompt_tokens"]["kind"] == "empirical" and sorted(set(values)) == [785, 3089, 6161, 12305]
    assert sum(values) / len(values) == pytest.approx(3911, abs=1)  # the row's mean
    assert tenant["output_tokens"] == {"kind": "fixed", "tokens": 512}
    assert any("kvwarden" in a for a in built.assumptions)
    # sent in the publisher's request order (vllm_c*_run1.csv by request_id): 3,089 x 3, then 785 x 2, ...
    assert tenant["prompt_tokens"]["order"] == "sequence"
    assert values[:6] == [3089, 3089, 3089, 785, 785, 3089] and len(values) == 200


def test_sglang_bench_serving_random_rows_replay_its_seeded_lengths_in_order():
    # the SGLang cookbook's one-client chat run: bench_serving printed 6,101 input and 4,220 output tokens
    prompts, outputs = sglang_random_lengths(1000, 1000, 10, outputs_from_zero=False)
    assert sum(prompts) == 6101 and sum(outputs) == 4220
    assert sglang_random_lengths(1000, 1000, 80, False)[0][:10] == prompts  # more requests: the same first ten
    assert sum(sglang_random_lengths(1000, 1000, 10, outputs_from_zero=True)[1]) == 4210  # a release drawing from 0
    row = dict(dataset="sglang-random-8000-1000", prompt_tokens=4194.1, output_tokens=422.0, num_requests=10)
    built = build(**row)
    tenant = built.mapping["workload"]["tenants"][0]
    assert tenant["prompt_tokens"] == {"kind": "empirical", "values": sglang_random_lengths(8000, 1000, 10, False)[0],
                                       "order": "sequence"}  # fmt: skip
    assert sum(tenant["output_tokens"]["values"]) == 4220 and any("seeded" in a for a in built.assumptions)
    mismatch = build(**{**row, "prompt_tokens": 4000.0})
    assert mismatch.mapping is None
    assert mismatch.skip_reason == (
        "sglang-random-8000-1000 draws a mean prompt of 4194.10 tokens over 10 requests, not the published 4000"
    )


def test_an_output_length_of_zero_drawn_by_sglang_runs_as_one():
    prompts, outputs = sglang_random_lengths(1000, 1000, 500, outputs_from_zero=True)
    assert outputs.count(0) == 1
    built = build(dataset="sglang-random-1000-1000-from0", prompt_tokens=sum(prompts) / 500,
                  output_tokens=sum(outputs) / 500, num_requests=500)  # fmt: skip
    assert min(built.mapping["workload"]["tenants"][0]["output_tokens"]["values"]) == 1
    assert any("1 output length(s) of 0 run as 1" in a for a in built.assumptions)


def test_a_seeded_row_runs_after_its_servers_earlier_runs_and_warm_up():
    """SGLang keeps its radix cache between bench_serving runs: the row's tenant reads document k as its
    k-th request, with the earlier runs' requests and then the warm-up request (request 0's prompt, at
    most 32 output tokens) in the prefix cache at the start, matched at the engine's block size."""
    prompts, outputs = sglang_random_lengths(8000, 1000, 10, False)
    row = dict(dataset="sglang-random-8000-1000", prompt_tokens=4194.1, output_tokens=422.0, num_requests=10,
               earlier_runs=((1000, 1000, 10), (1000, 1000, 80)))  # fmt: skip
    built = build(**row)
    tenant = built.mapping["workload"]["tenants"][0]
    runs = tenant["documents"]["earlier_runs"]
    assert [len(r["prompt_tokens"]) for r in runs] == [10, 80, 1]
    assert runs[1]["prompt_tokens"] == sglang_random_lengths(1000, 1000, 80, False)[0]
    assert runs[2] == {"prompt_tokens": [prompts[0]], "output_tokens": [min(outputs[0], 32)]}
    assert built.mapping["kv"]["prefix_block_tokens"] == 16
    assert any("10 x 1000/1000, 80 x 1000/1000" in a and "warm-up" in a for a in built.assumptions)
    cold = build(**{**row, "earlier_runs": ()})
    assert cold.mapping["workload"]["tenants"][0]["documents"]["earlier_runs"] == [runs[2]]  # the warm-up only


def test_an_engine_without_a_prefix_cache_runs_the_same_lengths_without_documents():
    row = dict(engine="trtllm", engine_version="1.0", dataset="sglang-random-8000-1000", prompt_tokens=4194.1,
               output_tokens=422.0, num_requests=10, earlier_runs=((1000, 1000, 10),))  # fmt: skip
    built = build(**row)
    assert "documents" not in built.mapping["workload"]["tenants"][0]
    assert not any("prefix cache" in a for a in built.assumptions)


def test_a_row_whose_command_turned_async_scheduling_on_runs_with_it():
    assert build(features=frozenset({"async_scheduling"})).mapping["cluster"]["async_scheduling"] is True
    assert "async_scheduling" not in build().mapping["cluster"]  # its release's default
