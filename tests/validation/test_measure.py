"""A row's metrics measured in its run as the benchmark tools measure them."""

from __future__ import annotations

import pytest
from conftest import explicit_scenario

from clustersim.validation.measure import measure_run


def test_throughputs_are_over_the_benchmark_from_its_start(run_mapping):
    # unit cost: 1 s per step; one replica, 4 requests of 4 output tokens each at t=0, batch of 4
    raw = explicit_scenario([(0.0, 8, 4)] * 4)
    raw["cost"] = {"kind": "unit", "step_time_s": 1.0}
    result = run_mapping(raw)
    measured = measure_run(result.out_dir)
    makespan = result.summary["makespan_s"]
    assert measured["output_tok_per_s"] == pytest.approx(16 / makespan)
    assert measured["total_tok_per_s"] == pytest.approx((16 + 32) / makespan)
    assert measured["req_per_s"] == pytest.approx(4 / makespan)
    assert measured["ttft_mean_ms"] == pytest.approx(1e3 * result.summary["ttft_s"]["mean"])
    # one simulated replica of four identical ones counts four times
    assert measure_run(result.out_dir, False, 4)["output_tok_per_s"] == pytest.approx(4 * 16 / makespan)


def test_a_steady_rate_run_counts_the_tokens_produced_not_the_requests_completing(run_mapping):
    # a request every 0.1 s for 20 s, each decoding 1,500 tokens at 0.01 s a step: 15 s per request, so
    # in the second half of the arrivals (10-20 s) no request that arrived there has finished yet
    raw = explicit_scenario(
        [(0.1 * i, 8, 1500) for i in range(200)],
        scheduler={"max_num_seqs": 512, "max_num_batched_tokens": 8192},
        kv={"num_blocks": 40000},
    )
    raw["cost"] = {"kind": "unit", "step_time_s": 0.01}
    result = run_mapping(raw)
    offered = 10 * 1500  # tokens per second the arrivals ask for
    measured = measure_run(result.out_dir, steady=True)
    # in flight: 10 per second of run time up to 15 s, so the 10-20 s window averages 137.5 of the 150
    # a long benchmark holds: 13,750 tokens/s; requests completing then would count 7,500
    assert measured["output_tok_per_s"] == pytest.approx(0.9167 * offered, rel=0.02)
    assert measured["req_per_s"] == pytest.approx(measured["output_tok_per_s"] / 1500)
    assert measured["total_tok_per_s"] - measured["output_tok_per_s"] == pytest.approx(10 * 8, rel=0.05)
