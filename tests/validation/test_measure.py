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
