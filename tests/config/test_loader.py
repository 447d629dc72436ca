"""Scenario loading: every bad input is one line naming the file, the field and the problem."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from conftest import SCENARIOS, explicit_scenario

from clustersim.config.loader import apply_overrides, load_scenario, scenario_from_mapping
from clustersim.config.workload import LognormalLengths, PoissonArrivals
from clustersim.errors import ConfigError

POISSON = {
    "name": "p",
    "workload": {
        "tenants": [
            {
                "name": "chat",
                "arrival": {"kind": "poisson", "rate_per_s": 2.0},
                "prompt_tokens": {"kind": "lognormal", "median_tokens": 500, "sigma": 0.5},
                "output_tokens": {"kind": "fixed", "tokens": 100},
            }
        ]
    },
    "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B"},
    "stop": {"max_requests": 10},
}


def error_of(raw) -> str:
    with pytest.raises(ConfigError) as info:
        scenario_from_mapping(raw, "bad.yaml")
    return str(info.value)


def mutated(change) -> dict:
    raw = copy.deepcopy(POISSON)
    change(raw)
    return raw


def test_valid_scenario_is_frozen():
    scenario = scenario_from_mapping(POISSON, "ok.yaml")
    tenant = scenario.workload.tenants[0]
    assert isinstance(tenant.arrival, PoissonArrivals) and isinstance(tenant.prompt_tokens, LognormalLengths)
    with pytest.raises(Exception, match="frozen"):
        scenario.seed = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda r: r["workload"]["tenants"][0]["arrival"].update(rate_per_s=-1),
            "bad.yaml: workload.tenants[0].arrival.rate_per_s: input should be greater than 0 (got -1)",
        ),
        (
            lambda r: r.update(schedular={}),
            "bad.yaml: schedular: unknown field (did you mean 'scheduler'?); allowed: name, description, seed, "
            "workload, cluster, router, scheduler, kv, cost, stop, slo, metrics, simulation, faults, autoscaler, "
            "disaggregation, speculative",
        ),
        (
            lambda r: r["workload"]["tenants"][0]["arrival"].update(kind="poison"),
            "bad.yaml: workload.tenants[0].arrival.kind: unknown kind 'poison' (did you mean 'poisson'?); "
            "choose one of: poisson, gamma, stages, diurnal, closed_loop, trace, explicit",
        ),
        (
            lambda r: r["workload"]["tenants"][0]["prompt_tokens"].update(sigmaa=1),
            "bad.yaml: workload.tenants[0].prompt_tokens.sigmaa: unknown field (did you mean 'sigma'?); "
            "allowed: kind, median_tokens, sigma, min_tokens, max_tokens",
        ),
        (
            lambda r: r["workload"]["tenants"][0]["prompt_tokens"].pop("sigma"),
            "bad.yaml: workload.tenants[0].prompt_tokens.sigma: missing (required)",
        ),
        (
            lambda r: r["workload"]["tenants"][0].pop("output_tokens"),
            "bad.yaml: workload.tenants[0]: output_tokens is required with poisson arrivals",
        ),
        (
            lambda r: r.update(stop={}),
            "bad.yaml: stop: set max_requests or horizon_s; tenant 'chat' never stops sending requests",
        ),
        (
            lambda r: r.update(kv={"gpu_memory_frac": 1.5}),
            "bad.yaml: kv.gpu_memory_frac: input should be less than or equal to 1 (got 1.5)",
        ),
        (
            lambda r: r.update(scheduler={"policy": "fifo"}),
            "bad.yaml: scheduler.policy: unknown policy 'fifo'; known: static, continuous, vllm_v0, chunked_prefill, vllm_v1, "
            "trtllm_no_evict, trtllm_no_evict_chunked, trtllm_max_utilization, trtllm_max_utilization_chunked, "
            "sglang",
        ),
        (
            lambda r: r.update(cost={"kind": "unit", "step_time_s": "abc"}),
            "bad.yaml: cost.step_time_s: input should be a valid number, unable to parse string as a number "
            "(got 'abc')",
        ),
        (
            lambda r: r.update(slo={"ttft_s": 0.5, "percentile": 100}),
            "bad.yaml: slo.percentile: input should be less than 100 (got 100)",
        ),
        (
            lambda r: r.update(slo={"ttft_s": 0.5, "percentile": 0}),
            "bad.yaml: slo.percentile: input should be greater than 0 (got 0)",
        ),
        (
            lambda r: r["cluster"].pop("model"),
            "bad.yaml: cluster.model: missing (required)",
        ),
        (
            lambda r: r["workload"].update(tenants=[r["workload"]["tenants"][0]] * 2),
            "bad.yaml: workload: tenant name 'chat' is used twice",
        ),
        (
            lambda r: r["workload"]["tenants"][0].update(
                output_tokens={"kind": "uniform", "min_tokens": 5, "max_tokens": 2}
            ),
            "bad.yaml: workload.tenants[0].output_tokens: max_tokens (2) must be >= min_tokens (5)",
        ),
    ],
)
def test_error_messages(change, message):
    assert error_of(mutated(change)) == message


def test_explicit_requests_must_be_in_time_order():
    raw = explicit_scenario([(1.0, 8, 2), (0.5, 8, 2)])
    assert error_of(raw) == (
        "bad.yaml: workload.tenants[0].arrival: requests[1].arrival_at_s (0.5) is before "
        "requests[0].arrival_at_s (1.0); list them in time order"
    )


def test_overrides_apply_dotted_paths_and_list_indices():
    raw = apply_overrides(POISSON, ["scheduler.policy=static", "workload.tenants.0.arrival.rate_per_s=4.5"], "x")
    assert raw["scheduler"] == {"policy": "static"}
    assert raw["workload"]["tenants"][0]["arrival"]["rate_per_s"] == 4.5
    assert POISSON["workload"]["tenants"][0]["arrival"]["rate_per_s"] == 2.0  # the original is untouched


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("scheduler.policy", "--set: scheduler.policy: expected dotted.path=value"),
        ("workload.tenants.3.name=x", "--set: workload.tenants.3: '3' is not an index of a list of 1 items"),
    ],
)
def test_bad_overrides(override, message):
    with pytest.raises(ConfigError) as info:
        apply_overrides(POISSON, [override], "x")
    assert str(info.value) == message


def test_missing_file_and_bad_yaml(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file"):
        load_scenario(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: [1, 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: line 2, column 1: invalid YAML"):
        load_scenario(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="must be a YAML mapping of keys to values, not list"):
        load_scenario(bad)


def test_yaml_is_loaded_safely(tmp_path: Path):
    evil = tmp_path / "evil.yaml"
    evil.write_text("seed: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_scenario(evil)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_load(path: Path):
    assert load_scenario(path).scenario.name


def test_yaml_reader_errors_are_one_line(tmp_path: Path):
    bad = tmp_path / "ctrl.yaml"
    bad.write_text("seed: \x01\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(bad)
    assert "invalid YAML: unacceptable character #x0001" in str(info.value)
    assert "\n" not in str(info.value)
