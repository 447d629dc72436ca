"""The measurement window resolved before a run: arrival times known in advance are replayed exactly as
the clock creates them, the bounds follow from them, and a window holding no request is refused at the
run's start (before any output)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import SCENARIOS, explicit_scenario

from clustersim.config.loader import LoadedScenario, load_scenario, scenario_from_mapping
from clustersim.errors import ConfigError
from clustersim.runner import run_scenario
from clustersim.workload.request import Request
from clustersim.workload.traces import load_workload_data
from clustersim.workload.window import (
    ArrivalWindow,
    WindowMarks,
    created_times_s,
    known_arrivals_s,
    resolve_window,
)


def resolved(raw: dict[str, Any]) -> ArrivalWindow | None:
    return resolve_window(scenario_from_mapping(raw, "s.yaml"), {}, "s.yaml")


@pytest.mark.parametrize(
    ("times", "horizon_s", "created"),
    [
        ([0.0, 1.0, 1.0, 2.0], None, [0.0, 1.0, 1.0, 2.0]),
        ([0.0, 1.0, 1.0, 2.0], 2.0, [0.0, 1.0, 1.0]),  # the clock stops at the horizon before an arrival then
        ([0.5, 3.0], 1.5, [0.5]),
        # now + (t - now) rounds: 3.823 is created an ulp early (inside a horizon at 3.823), 14.391 an ulp
        # late (outside a horizon at 14.391)
        ([0.252, 3.823], 3.823, [0.252, 3.8229999999999995]),
        ([0.274, 14.391], 14.391, [0.274]),
    ],
)
def test_created_times_replay_the_clock(times, horizon_s, created):
    assert created_times_s(times, horizon_s) == created


@pytest.mark.parametrize("horizon_s", [None, 3.823, 14.391, 14.4])
def test_known_arrivals_are_the_runs_arrivals(tmp_path: Path, horizon_s: float | None):
    """The arrival times predicted before the run are exactly those the run records (two tenants)."""
    raw = explicit_scenario([(0.252, 10, 2), (3.823, 10, 2), (14.391, 10, 2)], stop={"max_requests": 5})
    second = {**raw["workload"]["tenants"][0], "name": "u"}
    second["arrival"] = {
        "kind": "explicit",
        "requests": [{"arrival_at_s": 0.274, "prompt_tokens": 5, "output_tokens": 1}],
    }
    raw["workload"] = {"tenants": [*raw["workload"]["tenants"], second]}
    if horizon_s is not None:
        raw["stop"] = {"horizon_s": horizon_s}
    scenario = scenario_from_mapping(raw, "s.yaml")
    result = run_scenario(LoadedScenario(scenario, "s.yaml", tmp_path), tmp_path / "run")
    arrivals = sorted(pq.read_table(result.out_dir / "requests.parquet").column("arrival_at_s").to_pylist())
    assert known_arrivals_s(scenario, {}) == arrivals


def test_max_requests_cuts_the_known_arrivals():
    raw = explicit_scenario([(0.0, 10, 2), (1.0, 10, 2), (2.0, 10, 2)], stop={"max_requests": 2})
    assert known_arrivals_s(scenario_from_mapping(raw, "s.yaml"), {}) == [0.0, 1.0]


def test_bounds_of_an_explicit_list():
    requests = [(0.0, 10, 2), (1.0, 10, 2), (2.0, 10, 2), (6.0, 10, 2)]
    window = resolved(explicit_scenario(requests, metrics={"cooldown_s": 1.5, "cooldown_requests": 1}))
    assert window is not None and window.end_s == 4.5 and window.end_index == 3
    assert [window.measured(i, t, 0.0) for i, (t, _, _) in enumerate(requests)] == [True, True, True, False]
    assert resolved(explicit_scenario(requests)) is None  # no window: nothing to resolve


def test_bounds_from_the_stop_condition():
    raw = explicit_scenario([(0.0, 10, 2)], metrics={"cooldown_s": 10, "cooldown_requests": 5})
    raw["workload"]["tenants"][0] = {
        "name": "t",
        "arrival": {"kind": "poisson", "rate_per_s": 1.0},
        "prompt_tokens": {"kind": "fixed", "tokens": 10},
        "output_tokens": {"kind": "fixed", "tokens": 2},
    }
    raw["metrics"] = {"cooldown_requests": 5}
    raw["stop"] = {"max_requests": 50}
    window = resolved(raw)
    assert window is not None and window.end_index == 45 and window.end_s == math.inf
    raw["metrics"] = {"warmup_s": 2, "cooldown_s": 10}
    raw["stop"] = {"horizon_s": 60}
    window = resolved(raw)
    assert window is not None and window.end_s == 50.0 and window.end_index is None and window.start_s(0.5) == 2.5


def test_a_trace_bounds_the_window_once_read(tmp_path: Path):
    loaded = load_scenario(SCENARIOS / "trace-replay.yaml", ["metrics.cooldown_requests=100", "metrics.cooldown_s=1"])
    data = load_workload_data(loaded.scenario.workload, loaded.base_dir, loaded.source)
    window = resolve_window(loaded.scenario, data, loaded.source)
    known = known_arrivals_s(loaded.scenario, data)
    assert known is not None and len(known) == 400
    assert window is not None and window.end_index == 300 and window.end_s == known[-1] - 1


def test_a_window_holding_no_request_is_refused_before_any_output(tmp_path: Path):
    loaded = load_scenario(SCENARIOS / "trace-replay.yaml", ["metrics.warmup_s=1000"])
    with pytest.raises(
        ConfigError, match=r"metrics\.warmup_s: leaves none of the run's 400 requests arriving from 0 s"
    ):
        run_scenario(loaded, tmp_path / "never")
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(
    ("arrivals_s", "metrics", "field"),
    [
        ([0.0, 1.0], {"warmup_requests": 1, "cooldown_requests": 1}, "cooldown_requests"),  # 2 requests, 2 left out
        ([0.0, 1.0, 3.0], {"warmup_s": 1.5, "cooldown_s": 1.0}, "cooldown_s"),  # [1.5, 2.0] holds none
        ([0.0, 1.0], {"warmup_s": 0.5, "cooldown_requests": 1}, "cooldown_requests"),  # time: 1 only; count: 0 only
        ([0.0, 1.0, 3.0], {"warmup_s": 1.5, "cooldown_s": 1.0, "warmup_requests": 1}, "cooldown_s"),
    ],
)
def test_the_refusal_names_the_field_that_empties_the_window(
    arrivals_s: list[float], metrics: dict[str, Any], field: str
):
    raw = explicit_scenario([(t, 10, 2) for t in arrivals_s], metrics=metrics, stop={"horizon_s": 5})
    with pytest.raises(ConfigError, match=rf"s\.yaml: metrics\.{field}: leaves none of the run's"):
        resolved(raw)


def test_marks_take_the_first_arrival_from_the_first_request():
    marks = WindowMarks(resolved(explicit_scenario([(0.0, 1, 1), (9.0, 1, 1)], metrics={"warmup_s": 1.0})))
    requests = [Request(i, "t", t, 1, 1) for i, t in enumerate([0.25, 1.0, 1.25, 3.0])]
    for request in requests:
        marks.mark(request)
    assert marks.first_arrival_s == 0.25
    assert [r.gap_key for r in requests] == [("t", False), ("t", False), ("t", True), ("t", True)]
    assert [r.measured for r in requests] == [False, False, True, True]
