"""summary.json: per-tenant SLOs and goodput, Jain's fairness index, per-replica metrics (hand-computed runs)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import explicit_scenario

from clustersim.metrics import jain_index


@pytest.mark.parametrize(
    ("values", "expected"),
    [([1, 1, 1], 1.0), ([1, 0, 0], 1 / 3), ([1, 3], 16 / 20), ([1, 2], 9 / 10), ([], None), ([0, 0], None)],
)
def test_jain_index(values, expected):
    assert jain_index(values) == (pytest.approx(expected) if expected is not None else None)


def two_tenants(slo_a: dict[str, float] | None, scenario_slo: dict[str, float] | None) -> dict[str, Any]:
    """One seat, unit steps: a's request (2 tokens) runs 0-2, b's (2 tokens) waits and runs 2-4.

    a: TTFT 1, E2E 2, 1 s per output token; b: TTFT 3, E2E 4, 2 s per output token.
    """
    raw = explicit_scenario([], scheduler={"max_num_seqs": 1})
    tenant_a: dict[str, Any] = {
        "name": "a",
        "priority": 1,
        "arrival": {"kind": "explicit", "requests": [{"arrival_at_s": 0, "prompt_tokens": 10, "output_tokens": 2}]},
    }
    if slo_a is not None:
        tenant_a["slo"] = slo_a
    tenant_b = {
        "name": "b",
        "arrival": {"kind": "explicit", "requests": [{"arrival_at_s": 0, "prompt_tokens": 10, "output_tokens": 2}]},
    }
    raw["workload"] = {"tenants": [tenant_a, tenant_b]}
    if scenario_slo is not None:
        raw["slo"] = scenario_slo
    return raw


def test_each_tenant_is_held_to_its_own_slo(run_mapping):
    summary = run_mapping(two_tenants({"ttft_s": 0.5}, {"ttft_s": 5.0})).summary
    a, b = summary["tenants"]["a"], summary["tenants"]["b"]
    assert a["ttft_s"]["mean"] == 1.0 and b["ttft_s"]["mean"] == 3.0
    assert a["slo"] == {"targets": {"ttft_s": 0.5}, "num_met": 0, "attainment_frac": 0.0, "goodput_requests_per_s": 0.0}
    assert b["slo"] == {
        "targets": {"ttft_s": 5.0},
        "num_met": 1,
        "attainment_frac": 1.0,
        "goodput_requests_per_s": 0.25,
    }
    assert summary["slo"] == {
        "targets": {"ttft_s": 5.0},
        "num_met": 1,
        "attainment_frac": 0.5,
        "goodput_requests_per_s": 0.25,
        "tenant_targets": {"a": {"ttft_s": 0.5}, "b": {"ttft_s": 5.0}},
    }
    assert summary["fairness"] == {
        "jain_normalized_latency": pytest.approx(0.9),  # (1 + 2)^2 / (2 x (1 + 4))
        "jain_slo_attainment": 0.5,  # (0 + 1)^2 / (2 x 1)
        "normalized_latency_s_per_token": {"a": 1.0, "b": 2.0},
    }


def test_tenant_slo_without_a_scenario_slo(run_mapping):
    summary = run_mapping(two_tenants({"ttft_s": 2.0}, None)).summary
    # a meets its target; b has none, so its completed request counts as met
    assert summary["slo"]["targets"] == {} and summary["slo"]["num_met"] == 2
    assert "slo" not in summary["tenants"]["b"]
    assert summary["fairness"]["jain_slo_attainment"] == 1.0  # only a has an SLO block


def test_the_scenario_slo_alone_keeps_the_old_summary(run_mapping):
    summary = run_mapping(two_tenants(None, {"ttft_s": 2.0})).summary
    assert summary["slo"] == {
        "targets": {"ttft_s": 2.0},
        "num_met": 1,
        "attainment_frac": 0.5,
        "goodput_requests_per_s": 0.25,
    }


def test_per_replica_metrics(run_mapping):
    """Round robin over 2 replicas: requests 0 and 2 on replica 0 (one batch of 2, steps 0-3), request 1 on 1."""
    raw = explicit_scenario([(0, 10, 3), (0, 10, 2), (0, 10, 3)], cluster={"num_replicas": 2})
    summary = run_mapping(raw).summary
    assert summary["makespan_s"] == 3.0
    assert summary["replicas"]["per_replica"] == [
        {
            "replica": 0,
            "num_routed": 2,
            "num_completed": 2,
            "num_steps": 3,
            "busy_frac": 1.0,
            "mean_batch_seqs": 2.0,
            "num_preemptions": 0,
            "kv_peak_used_frac": 0.002,
        },
        {
            "replica": 1,
            "num_routed": 1,
            "num_completed": 1,
            "num_steps": 2,
            "busy_frac": pytest.approx(2 / 3),
            "mean_batch_seqs": 1.0,
            "num_preemptions": 0,
            "kv_peak_used_frac": 0.001,
        },
    ]
    assert summary["replicas"]["busy_frac"] == [1.0, pytest.approx(2 / 3)]
    assert "fairness" not in summary and "tenants" not in summary
