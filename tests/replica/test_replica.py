"""The replica loop: exact event traces on tiny unit-cost scenarios."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import SCENARIOS, explicit_scenario, read_requests, read_steps

from clustersim.config.loader import load_scenario
from clustersim.runner import run_scenario


@pytest.mark.parametrize(
    ("policy", "makespan_s", "short_waits_s"),
    [("continuous", 10.0, [4.0, 4.0]), ("static", 14.0, [10.0, 10.0])],
)
def test_worked_example_static_vs_continuous(
    tmp_path: Path, policy: str, makespan_s: float, short_waits_s: list[float]
):
    loaded = load_scenario(SCENARIOS / "static-vs-continuous.yaml", [f"scheduler.policy={policy}"])
    result = run_scenario(loaded, tmp_path)
    rows = sorted(pq.read_table(tmp_path / "requests.parquet").to_pylist(), key=lambda r: r["request_id"])
    assert result.summary["makespan_s"] == makespan_s
    assert max(r["finished_at_s"] for r in rows) == makespan_s
    # the last two short requests (ids 4 and 5) wait this long before they are first scheduled
    assert [r["first_scheduled_at_s"] - r["arrival_at_s"] for r in rows[4:]] == short_waits_s
    assert [r["output_tokens"] for r in rows] == [4, 4, 10, 10, 4, 4]
    assert all(r["status"] == "completed" for r in rows)


def test_exact_event_trace_three_requests(run_mapping):
    # A arrives at 0 (3 tokens), B at 0.5 (2 tokens), C at 5 (1 token); every step takes 1 s.
    result = run_mapping(explicit_scenario([(0.0, 8, 3), (0.5, 8, 2), (5.0, 8, 1)]))
    trace = [
        (r["request_id"], r["first_scheduled_at_s"], r["first_token_at_s"], r["finished_at_s"])
        for r in read_requests(result)
    ]
    assert trace == [(0, 0.0, 1.0, 3.0), (1, 1.0, 2.0, 3.0), (2, 5.0, 6.0, 6.0)]
    steps = [
        (s["started_at_s"], s["num_seqs"], s["num_prefill_tokens"], s["num_decode_tokens"], s["kv_used_blocks"])
        for s in read_steps(result)
    ]
    assert steps == [(0.0, 1, 8, 0, 1), (1.0, 2, 8, 1, 2), (2.0, 2, 0, 2, 2), (5.0, 1, 8, 0, 1)]


def test_arrival_at_step_boundary_is_admitted_at_that_boundary(run_mapping):
    # the second request arrives exactly when the first step ends: it joins the next step
    result = run_mapping(explicit_scenario([(0.0, 8, 3), (1.0, 8, 1)]))
    rows = read_requests(result)
    assert rows[1]["first_scheduled_at_s"] == 1.0
    assert rows[1]["finished_at_s"] == 2.0


def test_preemption_trace_under_memory_pressure(run_mapping):
    # 6 blocks of 4 tokens; two sequences of 8 + 10 tokens need 5 blocks each at the end.
    raw = explicit_scenario([(0.0, 8, 10), (0.0, 8, 10)], kv={"block_size_tokens": 4, "num_blocks": 6})
    result = run_mapping(raw)
    rows = read_requests(result)
    assert [(r["first_token_at_s"], r["finished_at_s"], r["num_preemptions"]) for r in rows] == [
        (1.0, 10.0, 0),
        (1.0, 15.0, 1),
    ]
    steps = read_steps(result)
    assert [s["started_at_s"] for s in steps if s["num_preemptions"]] == [5.0]
    # preempted at step 5, request 1 leaves its 3 computed blocks (12 tokens) cached; request 0's
    # growth to 5 blocks reuses 2 of them, last ones first, so at t=10 request 1 recomputes its
    # 8 prompt + 5 generated tokens less the 4 its first block still holds
    assert [(s["started_at_s"], s["num_prefill_tokens"]) for s in steps if s["num_prefill_tokens"]] == [
        (0.0, 16),
        (10.0, 9),
    ]
    assert max(s["kv_used_blocks"] for s in steps) == 6
    assert all(s["kv_used_blocks"] <= s["kv_total_blocks"] for s in steps)
    assert all(r["status"] == "completed" and r["num_emitted_tokens"] == 10 for r in rows)


def test_max_num_seqs_bounds_every_step(run_mapping):
    result = run_mapping(explicit_scenario([(0.0, 8, 5)] * 9))
    assert max(s["num_seqs"] for s in read_steps(result)) == 4
    assert result.summary["makespan_s"] == 15.0  # three waves of 5 steps


def test_token_budget_bounds_prefill(run_mapping):
    raw = explicit_scenario([(0.0, 100, 2)] * 3, scheduler={"max_num_batched_tokens": 250})
    steps = read_steps(run_mapping(raw))
    assert [s["num_prefill_tokens"] + s["num_decode_tokens"] for s in steps] == [200, 102, 1]


def test_single_token_output_finishes_at_first_token(run_mapping):
    rows = read_requests(run_mapping(explicit_scenario([(0.0, 8, 1)])))
    assert rows[0]["first_token_at_s"] == rows[0]["finished_at_s"] == 1.0


@pytest.mark.parametrize(
    ("request_tokens", "kv", "reason_part"),
    [
        ((5000, 10), {}, "exceeds max_num_batched_tokens"),
        ((100, 200), {"block_size_tokens": 16, "num_blocks": 10}, "needs 19 KV blocks, the replica has 10"),
        ((131_000, 1000), {}, "exceeds the model's max length 131072"),
    ],
)
def test_unservable_requests_are_rejected_with_a_reason(run_mapping, request_tokens, kv, reason_part):
    raw = explicit_scenario([(0.0, *request_tokens), (0.0, 8, 2)], kv=kv)
    rows = read_requests(run_mapping(raw))
    assert rows[0]["status"] == "rejected"
    assert reason_part in rows[0]["reject_reason"]
    assert rows[1]["status"] == "completed"


def test_static_reserves_whole_sequence_and_never_preempts(run_mapping):
    # each request needs ceil((8 + 10 - 1) / 4) = 5 blocks; only one fits in 6 blocks at a time
    raw = explicit_scenario([(0.0, 8, 10), (0.0, 8, 10)], policy="static", kv={"block_size_tokens": 4, "num_blocks": 6})
    result = run_mapping(raw)
    rows = read_requests(result)
    assert [(r["first_scheduled_at_s"], r["finished_at_s"]) for r in rows] == [(0.0, 10.0), (10.0, 20.0)]
    assert result.summary["replicas"]["num_preemptions"] == 0
