"""Each way the fast path once disagreed with the step-by-step mode, kept as a regression test.

The step-by-step mode is the reference; every case runs in both modes and must give the same
requests (bit for bit) and the same summary (to float rounding: per-step rows sum in another order).
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import assert_same_summary, explicit_scenario, read_requests


def both_modes(run_mapping, raw: dict[str, Any]):
    fast = run_mapping({**raw, "simulation": {"fast_forward": True}})
    step = run_mapping({**raw, "simulation": {"fast_forward": False}})
    assert read_requests(fast) == read_requests(step)
    assert_same_summary(fast.summary, step.summary)
    return step


def test_least_kv_sees_the_blocks_the_step_path_holds(run_mapping):
    # the first run of decode steps used to take all its blocks up front, so at 5.5 s replica 0
    # looked fuller than it was and the third request went to replica 1
    raw = explicit_scenario(
        [(0.0, 10, 80), (0.0, 40, 20), (5.5, 5, 5)],
        cluster={"num_replicas": 2},
        router={"kind": "least_kv"},
        kv={"block_size_tokens": 1, "num_blocks": 100},
    )
    step = both_modes(run_mapping, raw)
    # at 5.5 s replica 0 holds 10 + 6 blocks (16%), replica 1 holds 40 + 5 (45%)
    assert [r["replica"] for r in read_requests(step)] == [0, 1, 0]


def test_a_preempted_request_is_readmitted_at_the_next_boundary_with_prefix_caching(run_mapping):
    # vllm + prefix caching + recompute: the preempted request's prompt stays cached, so it fits
    # at the next boundary; the fast path used to keep it waiting until the decode run ended
    raw = explicit_scenario(
        [(0.0, 300, 117), (0.0, 172, 117), (0.5, 144, 117)],
        policy="vllm_v0",
        scheduler={"max_num_seqs": 2},
        kv={"num_blocks": 30, "prefix_caching": True, "prefix_block_tokens": 16},
    )
    raw["workload"]["tenants"][0]["shared_prefix_tokens"] = 200
    step = both_modes(run_mapping, raw)
    assert any(r["num_preemptions"] for r in read_requests(step))


@pytest.mark.parametrize("allocator", ["paged", "contiguous"])
def test_the_kv_ledger_of_a_run_is_the_mean_of_its_steps(run_mapping, allocator):
    # one request of 16 prompt / 160 output tokens: the fast path logged the run as one row with
    # the last step's tokens (stored_frac 0.544 instead of 0.298)
    raw = explicit_scenario([(0.0, 16, 160)], kv={"block_size_tokens": 16, "num_blocks": 20, "allocator": allocator})
    step = both_modes(run_mapping, raw)
    if allocator == "paged":
        assert step.summary["kv"]["stored_frac"] == pytest.approx(0.298, abs=5e-4)


def test_closed_loop_users_finishing_at_once_are_served_in_one_order(run_mapping):
    raw = explicit_scenario([(0.0, 8, 4)], cluster={"num_replicas": 3}, router={"kind": "affinity"})
    raw["workload"] = {
        "tenants": [
            {
                "name": "users",
                "arrival": {"kind": "closed_loop", "num_users": 7, "think_time": {"kind": "fixed", "time_s": 0.0}},
                "prompt_tokens": {"kind": "fixed", "tokens": 8},
                "output_tokens": {"kind": "uniform", "min_tokens": 2, "max_tokens": 9},
            }
        ]
    }
    raw["stop"] = {"max_requests": 80}
    both_modes(run_mapping, raw)


def test_an_arrival_exactly_on_a_step_boundary_is_admitted_there_in_both_modes(run_mapping):
    # boundaries at 0.01 s steps: 0.01 + 0.01 + 0.01 != 0.03 in floating point, so the two modes
    # used to disagree; now both time every step from one decode anchor
    requests = [(0.0, 8, 40), *((round(0.01 * k, 2), 8, 5) for k in range(1, 30, 3))]
    raw = explicit_scenario(requests, cost={"kind": "unit", "step_time_s": 0.01})
    step = both_modes(run_mapping, raw)
    boundary_arrivals = [r for r in read_requests(step)[1:] if r["first_scheduled_at_s"] == r["arrival_at_s"]]
    assert boundary_arrivals  # some arrivals land exactly on a boundary and are admitted at it
