"""Scheduling policies and orderings: exact event traces of tiny unit-cost scenarios (1 s per step)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import explicit_scenario, read_requests, read_steps

from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.errors import ConfigError
from clustersim.runplan import plan_run


def times(result) -> list[tuple[float, float, float]]:
    return [(r["first_scheduled_at_s"], r["first_token_at_s"], r["finished_at_s"]) for r in read_requests(result)]


def admission_order(result) -> list[int]:
    rows = [r for r in read_requests(result) if r["first_scheduled_at_s"] is not None]
    return [r["request_id"] for r in sorted(rows, key=lambda r: (r["first_scheduled_at_s"], r["request_id"]))]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_vllm_pauses_decodes_for_a_prefill_step(run_mapping, fast_forward):
    # B arrives at 2.5; at t=3 a prefill-only step runs B while A waits one step
    raw = explicit_scenario([(0.0, 8, 5), (2.5, 8, 3)], policy="vllm_v0", simulation={"fast_forward": fast_forward})
    result = run_mapping(raw)
    assert times(result) == [(0.0, 1.0, 6.0), (3.0, 4.0, 6.0)]
    steps = [(s["started_at_s"], s["num_decode_tokens"], s["num_prefill_tokens"]) for s in read_steps(result)]
    assert (3.0, 0, 8) in steps  # the prefill-only step


def test_continuous_mixes_the_same_prefill_into_a_decode_step(run_mapping):
    result = run_mapping(explicit_scenario([(0.0, 8, 5), (2.5, 8, 3)]))
    assert times(result) == [(0.0, 1.0, 5.0), (3.0, 4.0, 6.0)]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_chunked_prefill_splits_a_long_prompt_and_keeps_decoding(run_mapping, fast_forward):
    raw = explicit_scenario(
        [(0.0, 8, 4), (0.0, 25, 2)],
        policy="chunked_prefill",
        scheduler={"max_num_batched_tokens": 10},
        simulation={"fast_forward": fast_forward},
    )
    result = run_mapping(raw)
    assert times(result) == [(0.0, 1.0, 4.0), (0.0, 4.0, 5.0)]
    steps = [
        (s["started_at_s"], s["num_seqs"], s["num_prefill_tokens"], s["num_decode_tokens"], s["num_emitted_tokens"])
        for s in read_steps(result)
    ]
    # budget 10: decodes first, then B's prompt in chunks of 2, 9, 9, 5
    assert steps == [(0.0, 2, 10, 0, 1), (1.0, 2, 9, 1, 1), (2.0, 2, 9, 1, 1), (3.0, 2, 5, 1, 2), (4.0, 1, 0, 1, 1)]


def test_chunked_prefill_serves_prompts_longer_than_the_budget(run_mapping):
    raw = explicit_scenario([(0.0, 35, 2)], policy="chunked_prefill", scheduler={"max_num_batched_tokens": 10})
    result = run_mapping(raw)
    assert times(result) == [(0.0, 4.0, 5.0)]  # 10 + 10 + 10 + 5 prompt tokens, then one decode
    assert read_requests(result)[0]["status"] == "completed"


def test_static_waits_for_a_fuller_batch(run_mapping):
    raw = explicit_scenario([(0.0, 8, 3), (1.0, 8, 3), (5.0, 8, 3)], policy="static", scheduler={"batch_wait_s": 2.0})
    assert times(run_mapping(raw)) == [(2.0, 3.0, 5.0), (2.0, 3.0, 5.0), (7.0, 8.0, 10.0)]


def test_batch_wait_is_for_static_only(run_mapping):
    with pytest.raises(Exception, match="batch_wait_s applies to policy static only, not continuous"):
        run_mapping(explicit_scenario([(0.0, 8, 3)], scheduler={"batch_wait_s": 1.0}))


ONE_SEAT_QUEUE = [(0.0, 8, 5), (1.0, 500, 2), (2.0, 10, 2)]


@pytest.mark.parametrize(
    ("ordering", "expected"),
    [
        ({"kind": "fcfs"}, [0, 1, 2]),
        ({"kind": "shortest_prompt_first", "aging_tokens_per_s": 0}, [0, 2, 1]),
        # 500 + 1000 x 1 s < 10 + 1000 x 2 s: aging lets the long prompt go first
        ({"kind": "shortest_prompt_first", "aging_tokens_per_s": 1000}, [0, 1, 2]),
    ],
)
def test_orderings(run_mapping, ordering, expected):
    raw = explicit_scenario(ONE_SEAT_QUEUE, scheduler={"max_num_seqs": 1, "ordering": ordering})
    assert admission_order(run_mapping(raw)) == expected


def two_tenants(a_requests, b_requests, **overrides):
    raw = explicit_scenario(a_requests, **overrides)
    tenant_b = {
        "name": "b",
        "arrival": {
            "kind": "explicit",
            "requests": [{"arrival_at_s": t, "prompt_tokens": p, "output_tokens": o} for t, p, o in b_requests],
        },
    }
    raw["workload"] = {"tenants": [{**raw["workload"]["tenants"][0], "name": "a"}, tenant_b]}
    return raw


def test_fair_share_follows_the_weights(run_mapping):
    raw = two_tenants(
        [(0.0, 8, 2)] * 6,
        [(0.0, 8, 2)] * 6,
        scheduler={"max_num_seqs": 1, "ordering": {"kind": "fair_share", "weights": {"a": 2.0}}},
    )
    result = run_mapping(raw)
    rows = {r["request_id"]: r["tenant"] for r in read_requests(result)}
    assert [rows[i] for i in admission_order(result)][:9] == ["a", "b", "a", "a", "b", "a", "a", "b", "a"]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_slo_admission_sheds_a_request_that_can_no_longer_make_its_ttft(run_mapping, fast_forward):
    # one seat; B waits from 0.5 and would miss 3.5 s TTFT if admitted after t = 3: shed at t = 4
    raw = explicit_scenario(
        [(0.0, 8, 6), (0.5, 8, 2), (5.0, 8, 2)],
        scheduler={"max_num_seqs": 1, "slo_admission": "shed"},
        slo={"ttft_s": 3.5},
        simulation={"fast_forward": fast_forward},
    )
    result = run_mapping(raw)
    rows = read_requests(result)
    assert [r["status"] for r in rows] == ["completed", "rejected", "completed"]
    assert rows[1]["reject_reason"] == "shed: predicted TTFT above the 3.5 s target"
    assert (rows[2]["first_scheduled_at_s"], rows[2]["first_token_at_s"]) == (6.0, 7.0)
    assert result.summary["num_requests"]["rejected"] == 1


@pytest.mark.parametrize("fast_forward", [True, False])
def test_slo_admission_defers_behind_requests_that_can_still_make_it(run_mapping, fast_forward):
    raw = explicit_scenario(
        [(0.0, 8, 6), (0.5, 8, 2), (5.0, 8, 2)],
        scheduler={"max_num_seqs": 1, "slo_admission": "defer"},
        slo={"ttft_s": 3.5},
        simulation={"fast_forward": fast_forward},
    )
    assert times(run_mapping(raw)) == [(0.0, 1.0, 6.0), (8.0, 9.0, 10.0), (6.0, 7.0, 8.0)]


def test_slo_admission_needs_a_target(run_mapping):
    with pytest.raises(Exception, match=r"scheduler\.slo_admission: 'shed' needs a TTFT target"):
        run_mapping(explicit_scenario([(0.0, 8, 2)], scheduler={"slo_admission": "shed"}))


@pytest.mark.parametrize("fast_forward", [True, False])
def test_vllm_v1_takes_blocks_per_chunk_so_a_prompt_starts_sooner(run_mapping, fast_forward):
    # blocks of 4 tokens, 5 of them; A (8 tokens) holds 2 and grows a 3rd at its decode step (t=1),
    # leaving 2 free. B's 12-token prompt needs 3 blocks whole but 2 for its first chunk (7 tokens)
    requests = [(0.0, 8, 2), (0.0, 12, 1)]
    common = {
        "scheduler": {"max_num_batched_tokens": 8},
        "kv": {"block_size_tokens": 4, "num_blocks": 5},
        "simulation": {"fast_forward": fast_forward},
    }
    chunked = run_mapping(explicit_scenario(requests, policy="chunked_prefill", **common))
    v1 = run_mapping(explicit_scenario(requests, policy="vllm_v1", **common))
    assert times(chunked) == [(0.0, 1.0, 2.0), (2.0, 4.0, 4.0)]  # B waits for A's blocks
    assert times(v1) == [(0.0, 1.0, 2.0), (1.0, 3.0, 3.0)]  # chunks of 7 (t=1) and 5 (t=2)


def _preemption_steps(run_mapping, fast_forward, prefix_caching):
    raw = explicit_scenario(
        [(0.0, 4, 9), (0.0, 12, 1)],
        policy="vllm_v1",
        scheduler={"max_num_batched_tokens": 8},
        kv={"block_size_tokens": 4, "num_blocks": 4, "prefix_caching": prefix_caching},
        simulation={"fast_forward": fast_forward},
    )
    result = run_mapping(raw)
    steps = [
        (s["started_at_s"], s["num_prefill_tokens"], s["num_decode_tokens"], s["num_preemptions"])
        for s in read_steps(result)
    ]
    rows = read_requests(result)
    assert [r["status"] for r in rows] == ["completed", "completed"]
    assert rows[1]["num_preemptions"] >= 1
    assert rows[1]["first_scheduled_at_s"] == 0.0
    return steps, rows


@pytest.mark.parametrize("fast_forward", [True, False])
def test_vllm_v1_preempts_a_half_prefilled_prompt_and_admits_nothing_that_step(run_mapping, fast_forward):
    # 4 blocks of 4 tokens. t=0: A (4 tokens) and B's first chunk (4) take a block each. t=1: A's
    # decode grows a block (1 free), B's next chunk of 7 needs 2: B (the newest) is preempted and,
    # as in vLLM V1, nothing is admitted in that step, not even B again. Without prefix caching B
    # recomputes its whole prompt from t=2 (chunks of 7 and 5)
    steps, _ = _preemption_steps(run_mapping, fast_forward, prefix_caching=False)
    assert steps[:3] == [(0.0, 8, 0, 0), (1.0, 0, 1, 1), (2.0, 7, 1, 0)]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_vllm_v1_preempted_blocks_stay_cached_and_only_the_rest_is_recomputed(run_mapping, fast_forward):
    # as above, with prefix caching (vLLM V1's default): B's computed block is freed still cached.
    # At t=2 B's 7-token chunk needs 2 new blocks plus its cached one back (vLLM counts a free
    # cached block it reuses against the free blocks), 3 > 2 free: it waits for A (done at t=9),
    # then prefills only the 8 tokens it had not computed
    steps, rows = _preemption_steps(run_mapping, fast_forward, prefix_caching=True)
    assert steps[:3] == [(0.0, 8, 0, 0), (1.0, 0, 1, 1), (2.0, 0, 1, 0)]
    assert (9.0, 8, 0, 0) in steps
    assert rows[1]["first_token_at_s"] == 10.0
    assert rows[1]["num_preemptions"] == 1  # recomputing from scratch, it is preempted again


def test_vllm_policy_name_is_ambiguous(run_mapping):
    with pytest.raises(Exception, match="'vllm' is ambiguous: use vllm_v1"):
        run_mapping(explicit_scenario([(0.0, 8, 3)], policy="vllm"))


def test_vllm_v1_needs_paged_recompute(run_mapping):
    with pytest.raises(Exception, match="vllm_v1 preempts by recompute only"):
        run_mapping(explicit_scenario([(0.0, 8, 3)], policy="vllm_v1", kv={"preemption": "swap"}))
    with pytest.raises(Exception, match="needs allocator: paged"):
        run_mapping(explicit_scenario([(0.0, 8, 3)], policy="vllm_v1", kv={"allocator": "contiguous"}))


@pytest.mark.parametrize("fast_forward", [True, False])
def test_trtllm_no_evict_admits_only_what_can_finish(run_mapping, fast_forward):
    # blocks of 4 tokens, 6 of them. A reserves prompt + output (8 + 8 - 1 = 15 tokens: 4 blocks);
    # B (4 + 8 - 1 = 11: 3 blocks) would fit its prompt now but not its whole output: it waits for A
    requests = [(0.0, 8, 9), (0.0, 4, 8)]
    common = {"kv": {"block_size_tokens": 4, "num_blocks": 6}, "simulation": {"fast_forward": fast_forward}}
    no_evict = run_mapping(explicit_scenario(requests, policy="trtllm_no_evict", **common))
    assert times(no_evict) == [(0.0, 1.0, 9.0), (9.0, 10.0, 17.0)]
    assert all(r["num_preemptions"] == 0 for r in read_requests(no_evict))
    # MAX_UTILIZATION starts both and pauses (recomputes) the newer when blocks run out
    packed = run_mapping(explicit_scenario(requests, policy="trtllm_max_utilization", **common))
    rows = read_requests(packed)
    assert rows[1]["first_scheduled_at_s"] == 0.0
    assert sum(r["num_preemptions"] for r in rows) >= 1


@pytest.mark.parametrize("fast_forward", [True, False])
def test_sglang_runs_prompt_chunks_ahead_of_the_decodes(run_mapping, fast_forward):
    # budget 10: A's prompt (8) at t=0, A decodes at t=1 and t=2; B (25 tokens) arrives at 2.5 and its
    # chunks of 10, 10, 5 run alone at t=3, 4, 5 while A pauses; then both decode (B done at 7, A at 8)
    raw = explicit_scenario(
        [(0.0, 8, 5), (2.5, 25, 2)],
        policy="sglang",
        scheduler={"max_num_batched_tokens": 10},
        simulation={"fast_forward": fast_forward},
    )
    result = run_mapping(raw)
    assert times(result) == [(0.0, 1.0, 8.0), (3.0, 6.0, 7.0)]
    steps = [(s["started_at_s"], s["num_prefill_tokens"], s["num_decode_tokens"]) for s in read_steps(result)]
    assert [s for s in steps if 3.0 <= s[0] < 6.0] == [(3.0, 10, 0), (4.0, 10, 0), (5.0, 5, 0)]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_long_prefill_threshold_caps_each_prompts_chunk(run_mapping, fast_forward):
    # vLLM's --long-prefill-token-threshold 4 with a budget of 10: A (9 tokens) and B (6) prefill side by
    # side, 4 tokens each a step, where without the cap A would take 9 and B the 1 left
    raw = explicit_scenario(
        [(0.0, 9, 2), (0.0, 6, 2)],
        policy="vllm_v1",
        scheduler={"max_num_batched_tokens": 10, "long_prefill_token_threshold": 4},
        simulation={"fast_forward": fast_forward},
    )
    result = run_mapping(raw)
    steps = [(s["started_at_s"], s["num_prefill_tokens"], s["num_decode_tokens"]) for s in read_steps(result)]
    assert steps == [(0.0, 8, 0), (1.0, 6, 0), (2.0, 1, 1), (3.0, 0, 1)]
    assert times(result) == [(0.0, 3.0, 4.0), (0.0, 2.0, 3.0)]
    uncapped = run_mapping(explicit_scenario([(0.0, 9, 2), (0.0, 6, 2)], policy="vllm_v1",
                                             scheduler={"max_num_batched_tokens": 10}))  # fmt: skip
    assert times(uncapped) == [(0.0, 1.0, 2.0), (0.0, 2.0, 3.0)]


def test_long_prefill_threshold_needs_a_policy_that_chunks(run_mapping):
    raw = explicit_scenario([(0.0, 8, 3)], policy="continuous", scheduler={"long_prefill_token_threshold": 4})
    with pytest.raises(Exception, match="long_prefill_token_threshold: caps each prompt's chunk in a step: continuous"):
        run_mapping(raw)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_multi_step_scheduling_holds_a_new_prompt_until_the_runs_boundary(run_mapping, fast_forward):
    """vLLM V0 with --num-scheduler-steps 8: A's decodes run from t=1 in runs of 8 steps; B, arriving
    at 2.5 s, is scheduled at the first run's end (t=9, not t=3): its prefill-only step 9 -> 10 pauses A,
    then a new run decodes both."""
    raw = explicit_scenario(
        [(0.0, 8, 20), (2.5, 8, 3)],
        policy="vllm_v0",
        scheduler={"num_scheduler_steps": 8},
        simulation={"fast_forward": fast_forward},
    )
    assert times(run_mapping(raw)) == [(0.0, 1.0, 21.0), (9.0, 10.0, 12.0)]  # (scheduled, first token, end)
    every_step = explicit_scenario([(0.0, 8, 20), (2.5, 8, 3)], policy="vllm_v0")
    assert times(run_mapping(every_step)) == [(0.0, 1.0, 21.0), (3.0, 4.0, 6.0)]


def test_multi_step_is_vllm_v0s(run_mapping):
    raw = explicit_scenario([(0.0, 8, 2)], scheduler={"num_scheduler_steps": 4})
    with pytest.raises(ConfigError, match=r"scheduler\.num_scheduler_steps.*continuous schedules every step"):
        run_mapping(raw)


def test_multi_step_pays_the_schedulers_host_time_once_per_run():
    def gpu(steps: int):
        raw = explicit_scenario([(0.0, 8, 2)], policy="vllm_v0", scheduler={"num_scheduler_steps": steps})
        del raw["cost"]
        raw["cluster"]["engine"] = "vllm-v1"
        loaded = LoadedScenario(scenario_from_mapping(raw, "t.yaml"), "t.yaml", Path("."))
        return plan_run(loaded, Catalogue.builtin()).groups[0].gpu

    every, runs = gpu(1), gpu(4)
    assert runs.step_overhead_s == pytest.approx(every.step_overhead_s / 4)
    assert runs.engine.per_seq_overhead_s == pytest.approx(every.engine.per_seq_overhead_s / 4)
    assert runs.engine.sampling_per_seq_s == every.engine.sampling_per_seq_s  # sampled every step
