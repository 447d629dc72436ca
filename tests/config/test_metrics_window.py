"""The ``metrics`` section: its values and every window that cannot be resolved before the run are
refused at load, in one line naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from conftest import explicit_scenario

from clustersim.config.loader import scenario_from_mapping
from clustersim.config.window import Metrics, stages_end_s
from clustersim.config.workload import StagedArrivals
from clustersim.errors import ConfigError

POISSON: dict[str, Any] = {
    "name": "p",
    "workload": {
        "tenants": [
            {
                "name": "chat",
                "arrival": {"kind": "poisson", "rate_per_s": 2.0},
                "prompt_tokens": {"kind": "fixed", "tokens": 100},
                "output_tokens": {"kind": "fixed", "tokens": 10},
            }
        ]
    },
    "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B"},
    "stop": {"max_requests": 100},
}
STAGES = {"kind": "stages", "stages": [{"duration_s": 30, "rate_per_s": 2}, {"duration_s": 10, "rate_per_s": 0}]}


def scenario(metrics: dict[str, Any], stop: dict[str, Any] | None = None, arrival: dict[str, Any] | None = None):
    raw = copy.deepcopy(POISSON)
    raw["metrics"] = metrics
    if stop is not None:
        raw["stop"] = stop
    if arrival is not None:
        raw["workload"]["tenants"][0]["arrival"] = arrival
    return raw


def error_of(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        scenario_from_mapping(raw, "bad.yaml")
    return str(info.value)


def test_the_default_measures_everything():
    assert not scenario_from_mapping(POISSON, "ok.yaml").metrics.windowed
    assert Metrics(warmup_requests=1).windowed and Metrics(cooldown_s=0.5).windowed


@pytest.mark.parametrize(
    ("metrics", "stop", "arrival"),
    [
        ({"warmup_s": 30}, None, None),  # a warm-up needs nothing in advance
        ({"warmup_requests": 10, "cooldown_requests": 10}, None, None),  # max_requests: 100 requests exactly
        ({"warmup_s": 10, "cooldown_s": 10}, {"horizon_s": 60}, None),  # arrivals end at the horizon
        ({"cooldown_s": 5}, {}, STAGES),  # arrivals end with the last busy stage (30 s)
        ({"warmup_requests": 10}, {"horizon_s": 60}, None),
    ],
)
def test_resolvable_windows_load(metrics, stop, arrival):
    assert scenario_from_mapping(scenario(metrics, stop, arrival), "ok.yaml").metrics.windowed


@pytest.mark.parametrize(
    ("metrics", "stop", "arrival", "message"),
    [
        # bad values
        (
            {"warmup_s": -1},
            None,
            None,
            "bad.yaml: metrics.warmup_s: input should be greater than or equal to 0 (got -1)",
        ),
        (
            {"cooldown_requests": 1.5},
            None,
            None,
            "bad.yaml: metrics.cooldown_requests: input should be a valid integer, got a number with a fractional part",
        ),
        ({"warmup": 10}, None, None, "bad.yaml: metrics.warmup: unknown field (did you mean 'warmup_s'?)"),
        # the window's end cannot be known before the run
        (
            {"cooldown_s": 10},
            None,
            None,
            "bad.yaml: metrics.cooldown_s: needs the end of arrivals before the run, but stop.max_requests ends them "
            "at a time not known in advance",
        ),
        (
            {"cooldown_requests": 10},
            {"horizon_s": 60},
            None,
            "bad.yaml: metrics.cooldown_requests: needs the number of requests before the run, but stop.horizon_s "
            "ends the arrivals after a number of requests not known in advance",
        ),
        (
            {"cooldown_requests": 10},
            {},
            STAGES,
            "bad.yaml: metrics.cooldown_requests: needs the number of requests before the run, but tenant 'chat' "
            "(stages) sends a number of requests not known in advance",
        ),
        (
            {"cooldown_requests": 10},
            {"max_requests": 100},
            STAGES,
            "bad.yaml: metrics.cooldown_requests: needs the number of requests before the run, but tenant 'chat' "
            "(stages) sends",
        ),
        # a window that leaves nothing to measure
        (
            {"warmup_requests": 60, "cooldown_requests": 40},
            None,
            None,
            "bad.yaml: metrics.cooldown_requests: leaves no request to measure: warmup_requests 60 + "
            "cooldown_requests 40 >= stop.max_requests 100",
        ),
        (
            {"warmup_requests": 100},
            None,
            None,
            "bad.yaml: metrics.warmup_requests: leaves no request to measure",
        ),
        (
            {"warmup_s": 40, "cooldown_s": 20},
            {"horizon_s": 60},
            None,
            "bad.yaml: metrics.cooldown_s: leaves no time to measure: warmup_s 40 + cooldown_s 20 >= 60 s, by when "
            "every arrival has come",
        ),
        ({"warmup_s": 30}, {}, STAGES, "bad.yaml: metrics.warmup_s: leaves no time to measure"),
    ],
)
def test_refusals_name_the_field(metrics, stop, arrival, message):
    assert message in error_of(scenario(metrics, stop, arrival))


def test_an_explicit_list_bounds_the_window_at_load():
    raw = explicit_scenario([(0.0, 10, 2), (4.0, 10, 2)], metrics={"warmup_s": 3, "cooldown_s": 1})
    assert "metrics.cooldown_s: leaves no time to measure: warmup_s 3 + cooldown_s 1 >= 4 s" in error_of(raw)


def test_stages_end_with_the_last_busy_stage():
    arrival = StagedArrivals.model_validate(
        {"kind": "stages", "stages": [{"duration_s": 5, "rate_per_s": 0}, *STAGES["stages"]]}
    )
    assert stages_end_s(arrival) == 35.0
