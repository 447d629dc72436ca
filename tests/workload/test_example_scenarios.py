"""The traffic and routing example scenarios run (cut short), keep every invariant and do what they say."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import SCENARIOS

from clustersim.config.loader import load_scenario
from clustersim.runner import run_scenario

NEEDS_SHARED = {"azure-conv-replay.yaml", "mooncake-conv-replay.yaml"}
EXAMPLES = [
    "bursty-gamma.yaml",
    "staged-ramp.yaml",
    "diurnal.yaml",
    "closed-loop-users.yaml",
    "trace-replay.yaml",
    "mooncake-affinity.yaml",
    "multi-tenant.yaml",
    *sorted(NEEDS_SHARED),
]


def run(name: str, tmp_path: Path, *overrides: str) -> tuple[dict, dict[str, np.ndarray]]:
    loaded = load_scenario(SCENARIOS / name, overrides)
    if name in NEEDS_SHARED:
        arrival = loaded.scenario.workload.tenants[0].arrival
        trace = (loaded.base_dir / getattr(arrival, "path", "")).resolve()
        if not trace.exists():
            pytest.skip(f"{trace} is absent (shared ground truth not mounted)")
    result = run_scenario(loaded, tmp_path / "run")
    table = pq.read_table(result.out_dir / "requests.parquet").sort_by("request_id")
    return result.summary, {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_and_is_marked(name, tmp_path):
    text = (SCENARIOS / name).read_text()
    assert ("NEEDS THE SHARED DATA" in text) == (name in NEEDS_SHARED)
    summary, requests = run(name, tmp_path, "stop.max_requests=300")
    counts = summary["num_requests"]
    assert 250 <= counts["arrived"] <= 300  # mooncake-affinity's trace has 257 requests
    assert counts["completed"] + counts["unfinished"] == counts["arrived"]
    num_replicas = summary["replicas"]["per_replica"][-1]["replica"] + 1
    used = set(requests["replica"].tolist())
    assert used <= set(range(num_replicas))
    assert len(used) > num_replicas // 2  # the router spreads the first 300 requests


def test_staged_ramp_is_silent_in_its_last_stage(tmp_path):
    _summary, requests = run("staged-ramp.yaml", tmp_path, "stop.max_requests=1500")
    arrivals = requests["arrival_at_s"]
    assert arrivals.max() < 180
    assert np.sum(arrivals < 60) == pytest.approx(600, rel=0.15)  # 10 req/s for 60 s


def test_closed_loop_never_has_more_requests_in_flight_than_users(tmp_path):
    _, requests = run("closed-loop-users.yaml", tmp_path, "stop.max_requests=1000")
    events = sorted(
        [(t, 1) for t in requests["arrival_at_s"]] + [(t, -1) for t in requests["finished_at_s"]],
        key=lambda e: (e[0], e[1]),  # an end before a send at the same instant
    )
    in_flight = np.cumsum([delta for _, delta in events])
    assert 50 < in_flight.max() <= 200


def test_multi_tenant_reports_each_tenant_and_fairness(tmp_path):
    summary, requests = run("multi-tenant.yaml", tmp_path, "stop.max_requests=600")
    assert set(summary["tenants"]) == {"interactive", "batch"}
    assert summary["slo"]["tenant_targets"] == {
        "interactive": {"ttft_s": 0.3, "tpot_s": 0.04},
        "batch": {"e2e_s": 60.0},
    }
    assert 0.5 <= summary["fairness"]["jain_normalized_latency"] <= 1.0
    batch_prompts = set(requests["prompt_tokens"][requests["tenant"] == "batch"].tolist())
    assert batch_prompts <= {3000, 4000, 6000, 7500}


def test_trace_replay_is_the_trace_at_twice_the_speed(tmp_path):
    _, requests = run("trace-replay.yaml", tmp_path)
    lines = (SCENARIOS / "traces" / "synthetic-azure.csv").read_text().splitlines()[1:]
    prompts = [int(line.split(",")[1]) for line in lines]
    assert requests["prompt_tokens"].tolist() == prompts
    stamps = np.array([line.split(",")[0] for line in lines], dtype="datetime64[ns]").astype(np.int64)
    assert requests["arrival_at_s"] == pytest.approx((stamps - stamps[0]) / 1e9 * 0.5)
