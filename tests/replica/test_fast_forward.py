"""The fast path (runs of decode steps in one event) gives the step-by-step mode's answers."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from conftest import explicit_scenario, read_requests, read_steps

CHAT: dict[str, Any] = {
    "name": "ff",
    "seed": 3,
    "workload": {
        "tenants": [
            {
                "name": "chat",
                "arrival": {"kind": "poisson", "rate_per_s": 25.0},
                "prompt_tokens": {"kind": "lognormal", "median_tokens": 900, "sigma": 0.6, "max_tokens": 6000},
                "output_tokens": {"kind": "lognormal", "median_tokens": 120, "sigma": 1.0, "max_tokens": 1200},
            },
            {
                "name": "docs",
                "arrival": {"kind": "poisson", "rate_per_s": 2.0},
                "prompt_tokens": {"kind": "uniform", "min_tokens": 3000, "max_tokens": 7000},
                "output_tokens": {"kind": "fixed", "tokens": 300},
            },
        ]
    },
    "cluster": {"num_replicas": 2, "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
    "scheduler": {"policy": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 16384},
    "stop": {"max_requests": 400},
}


def variant(**changes: Any) -> dict[str, Any]:
    raw = copy.deepcopy(CHAT)
    for path, value in changes.items():
        node = raw
        keys = path.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return raw


SCENARIOS = {
    "chat-roofline": CHAT,
    "memory-pressure": variant(kv__num_blocks=900, kv__block_size_tokens=16),
    "tiny-blocks": variant(kv__num_blocks=3000, kv__block_size_tokens=4),
    "static": variant(scheduler__policy="static", kv__num_blocks=4000),
    "seat-limit": variant(scheduler__max_num_seqs=8),
    "tp2-70b": variant(
        cluster={"num_replicas": 1, "hardware": "H100-SXM", "model": "Llama-3.1-70B", "tensor_parallel": 2}
    ),
    "vllm": variant(scheduler__policy="vllm_v0", kv__num_blocks=1500),
    "chunked-prefill": variant(scheduler__policy="chunked_prefill", scheduler__max_num_batched_tokens=512),
    "chunked-pressure": variant(
        scheduler__policy="chunked_prefill", scheduler__max_num_batched_tokens=1024, kv__num_blocks=900
    ),
    "spf-aging": variant(scheduler__ordering={"kind": "shortest_prompt_first", "aging_tokens_per_s": 200}),
    "fair-share": variant(
        scheduler__ordering={"kind": "fair_share", "weights": {"docs": 3}}, scheduler__max_num_seqs=6
    ),
    "slo-shed": variant(scheduler__slo_admission="shed", scheduler__max_num_seqs=6, slo={"ttft_s": 0.6}),
    "slo-defer": variant(scheduler__slo_admission="defer", scheduler__max_num_seqs=6, slo={"ttft_s": 0.6}),
    "static-wait": variant(scheduler__policy="static", scheduler__batch_wait_s=0.4, kv__num_blocks=4000),
    "contiguous": variant(kv__allocator="contiguous", kv__max_output_tokens=2048, kv__num_blocks=9000),
    "contiguous-model-len": variant(
        kv__allocator="contiguous", kv__reserve="max_model_len", kv__max_model_len_tokens=8192, kv__num_blocks=9000
    ),
    "watermark": variant(kv__num_blocks=900, kv__watermark_frac=0.05),
    "swap": variant(kv__num_blocks=900, kv__preemption="swap"),
    "swap-vllm": variant(kv__num_blocks=900, kv__preemption="swap", scheduler__policy="vllm_v0"),
    "vllm-v1": variant(scheduler__policy="vllm_v1", scheduler__max_num_batched_tokens=2048),
    "vllm-v1-pressure": variant(
        scheduler__policy="vllm_v1", scheduler__max_num_batched_tokens=1024, kv__num_blocks=700
    ),
    "vllm-v1-engine": variant(scheduler={}, kv={"prefix_caching": True}, cluster__engine="vllm-v1"),
    "trtllm-no-evict": variant(scheduler__policy="trtllm_no_evict", kv__num_blocks=4000),
    "trtllm-no-evict-chunked": variant(
        scheduler__policy="trtllm_no_evict_chunked", scheduler__max_num_batched_tokens=1024, kv__num_blocks=4000
    ),
    "horizon": variant(stop={"horizon_s": 6.0}),
    "horizon-pressure": variant(stop={"horizon_s": 8.0}, kv__num_blocks=700),
    "unit-boundaries": explicit_scenario(
        [(0.0, 8, 30), (0.0, 40, 12), (3.0, 8, 5), (7.0, 30, 9), (7.5, 8, 20), (20.0, 8, 3), (21.0, 16, 7)],
        kv={"block_size_tokens": 4, "num_blocks": 40},
    ),
}

TIME_COLUMNS = ("arrival_at_s", "first_scheduled_at_s", "first_token_at_s", "finished_at_s")
EXACT_COLUMNS = ("request_id", "tenant", "replica", "status", "num_preemptions", "num_emitted_tokens", "reject_reason")


def totals(steps: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "iterations": sum(s["num_steps"] for s in steps),
        "tokens": sum(s["num_steps"] * (s["num_decode_tokens"] + s["num_prefill_seqs"]) for s in steps),
        "prefill_tokens": sum(s["num_prefill_tokens"] for s in steps),
        "preemptions": sum(s["num_preemptions"] for s in steps),
        "busy_s": sum(s["duration_s"] for s in steps),
    }


@pytest.mark.parametrize("name", SCENARIOS)
def test_fast_forward_matches_step_by_step(run_mapping, name):
    raw = SCENARIOS[name]
    fast = run_mapping({**raw, "simulation": {"fast_forward": True}})
    slow = run_mapping({**raw, "simulation": {"fast_forward": False}})
    fast_rows, slow_rows = read_requests(fast), read_requests(slow)
    assert len(fast_rows) == len(slow_rows) > 0
    for f, s in zip(fast_rows, slow_rows, strict=True):
        assert {c: f[c] for c in EXACT_COLUMNS} == {c: s[c] for c in EXACT_COLUMNS}
        for column in TIME_COLUMNS:
            if s[column] is None:
                assert f[column] is None
            else:
                assert math.isclose(f[column], s[column], rel_tol=1e-9, abs_tol=1e-9), (column, f, s)
    fast_steps, slow_steps = read_steps(fast), read_steps(slow)
    assert all(s["num_steps"] == 1 for s in slow_steps)
    fast_totals, slow_totals = totals(fast_steps), totals(slow_steps)
    assert fast_totals["busy_s"] == pytest.approx(slow_totals["busy_s"], rel=1e-9)
    assert {k: v for k, v in fast_totals.items() if k != "busy_s"} == {
        k: v for k, v in slow_totals.items() if k != "busy_s"
    }
    assert fast.summary["makespan_s"] == pytest.approx(slow.summary["makespan_s"], rel=1e-9)
    assert fast.summary["num_requests"] == slow.summary["num_requests"]
    if name not in ("unit-boundaries",):
        assert len(fast_steps) < len(slow_steps)  # the point of it


def test_memory_pressure_scenario_really_preempts(run_mapping):
    result = run_mapping(SCENARIOS["memory-pressure"])
    assert result.summary["replicas"]["num_preemptions"] > 0
    assert result.summary["num_requests"]["completed"] == 400


def test_arrival_mid_run_cuts_the_run_at_the_next_boundary(run_mapping):
    # A decodes alone from t=1; B arrives at 3.5 and must be admitted at the boundary at t=4.
    result = run_mapping(explicit_scenario([(0.0, 8, 10), (3.5, 8, 3)]))
    rows = read_requests(result)
    assert [(r["first_scheduled_at_s"], r["first_token_at_s"], r["finished_at_s"]) for r in rows] == [
        (0.0, 1.0, 10.0),
        (4.0, 5.0, 7.0),
    ]
    steps = [(s["started_at_s"], s["num_steps"], s["num_seqs"], s["num_prefill_tokens"]) for s in read_steps(result)]
    assert steps == [(0.0, 1, 1, 8), (1.0, 3, 1, 0), (4.0, 1, 2, 8), (5.0, 2, 2, 0), (7.0, 3, 1, 0)]


def test_a_new_waiting_head_does_not_end_the_run_while_every_seat_is_taken(run_mapping):
    # one seat, taken by A: B becomes the waiting head at 3.5 but no plan can admit any head until A
    # finishes at t=10 (admission is closed), so A's run goes on
    raw = explicit_scenario([(0.0, 8, 10), (3.5, 8, 3)], scheduler={"max_num_seqs": 1})
    result = run_mapping(raw)
    steps = [(s["started_at_s"], s["num_steps"]) for s in read_steps(result)]
    assert steps == [(0.0, 1), (1.0, 9), (10.0, 1), (11.0, 2)]
    assert read_requests(result)[1]["first_scheduled_at_s"] == 10.0


def test_a_new_waiting_head_ends_the_run_at_the_next_boundary_even_if_it_cannot_join(run_mapping):
    # two seats, one free: B becomes the waiting head at 3.5, so the plan looks again at the boundary
    # at t=4 (one rule for both modes); B's KV does not fit until A finishes, and A's run goes on
    raw = explicit_scenario(
        [(0.0, 8, 10), (3.5, 300, 3)], scheduler={"max_num_seqs": 2}, kv={"block_size_tokens": 1, "num_blocks": 310}
    )
    result = run_mapping(raw)
    steps = [(s["started_at_s"], s["num_steps"]) for s in read_steps(result)]
    assert steps[:3] == [(0.0, 1), (1.0, 3), (4.0, 6)]
    assert read_requests(result)[1]["first_scheduled_at_s"] == 10.0


def test_an_arrival_behind_the_waiting_head_does_not_end_the_run(run_mapping):
    # C queues behind B (FCFS), which could not be admitted at the last plan: nothing changes
    raw = explicit_scenario([(0.0, 8, 10), (0.5, 8, 3), (3.5, 8, 3)], scheduler={"max_num_seqs": 1})
    steps = [(s["started_at_s"], s["num_steps"]) for s in read_steps(run_mapping(raw))]
    assert steps == [(0.0, 1), (1.0, 9), (10.0, 1), (11.0, 2), (13.0, 1), (14.0, 2)]
