"""The highest rate meeting p99 bounds: the search on closed-form stand-ins for a run."""

from __future__ import annotations

import dataclasses
import math

import pytest

from clustersim.validation.boundrate import BISECTIONS, GROWTH, MAX_STEPS, excess, search_rate


def p99s(ttft_ms: float, tpot_ms: float) -> dict[str, float]:
    return {"ttft_p99_ms": ttft_ms, "tpot_p99_ms": tpot_ms}


def test_excess_is_the_binding_bound_and_a_failed_run_exceeds_it():
    assert excess(p99s(1000.0, 150.0), 2000.0, 200.0) == 0.75  # TPOT binds
    assert excess(p99s(3000.0, 100.0), 2000.0, 200.0) == 1.5  # TTFT binds
    assert excess(None, 2000.0, 200.0) == math.inf
    assert excess({"ttft_p99_ms": 1.0}, 2000.0, 200.0) == math.inf


@pytest.mark.parametrize("capacity", [0.37, 0.9, 1.0, 1.6, 4.2])
def test_the_rate_found_is_where_the_binding_bound_is_met(capacity):
    # p99 TPOT proportional to the rate, meeting its 200 ms bound at `capacity` times the published rate
    calls = []

    def trial(factor: float) -> dict[str, float]:
        calls.append(factor)
        return p99s(100.0, 200.0 * factor / capacity)

    found = search_rate(trial, 2000.0, 200.0)
    assert found.met and found.factor == pytest.approx(capacity, rel=1e-9)  # exact for a power law
    steps = math.ceil(abs(math.log(capacity)) / math.log(GROWTH))  # to bracket it from the published rate
    assert found.num_runs == len(set(calls)) <= 2 + steps + BISECTIONS


def test_a_search_that_never_meets_the_bounds_reports_the_lowest_rate_tried():
    found = search_rate(lambda f: p99s(1e9, 1e9), 2000.0, 200.0)
    assert not found.met and found.factor == pytest.approx(GROWTH**-MAX_STEPS)
    failing = search_rate(lambda f: None, 2000.0, 200.0)  # every run failed
    assert not failing.met


def test_a_search_that_always_meets_the_bounds_stops_at_the_highest_rate_tried():
    found = search_rate(lambda f: p99s(1.0, 1.0), 2000.0, 200.0)
    assert found.met and found.factor == pytest.approx(GROWTH**MAX_STEPS)


def test_the_factor_moves_smoothly_with_the_deployment():
    # a 1% faster deployment moves the answer by about 1%, not by a bisection step (what finite differences need)
    def at(capacity: float) -> float:
        return search_rate(lambda f: p99s(100.0, 150.0 / (1.0 - 0.8 * f / capacity)), 2000.0, 200.0).factor

    base, faster = at(1.0), at(1.01)
    assert faster / base == pytest.approx(1.01, rel=2e-3)


def test_a_row_no_rate_meets_is_run_at_the_published_rate(monkeypatch):
    from clustersim.validation import predict

    tried = []

    def fake_run(task, mapping, root):
        rate = mapping["workload"]["tenants"][0]["arrival"]["rate_per_s"]
        tried.append(rate)
        return {"ttft_p99_ms": 100.0, "tpot_p99_ms": 300.0, "output_tok_per_s": rate}, ""  # TPOT never met

    monkeypatch.setattr(predict, "run_metrics", fake_run)
    mapping = {"workload": {"tenants": [{"arrival": {"kind": "poisson", "rate_per_s": 10.0}}]}, "stop": {}}
    task = predict.RowTask("row", mapping, True, 0, (2000.0, 200.0))
    row_id, found, error = predict.predict_task(task, "")
    assert row_id == "row" and error == ""
    assert found == {"ttft_p99_ms": 100.0, "tpot_p99_ms": 300.0, "output_tok_per_s": 10.0,
                     "rate_factor": 1.0, "bounds_met": 0.0}  # fmt: skip
    assert min(tried) == pytest.approx(10.0 * GROWTH**-MAX_STEPS)  # it searched down before giving up
    tried.clear()  # a fixed factor (what a fit holds) runs once, at that factor
    _, fixed, _ = predict.predict_task(dataclasses.replace(task, rate_factor=0.5), "")
    assert tried == [5.0] and fixed["rate_factor"] == 0.5 and fixed["bounds_met"] == 1.0
