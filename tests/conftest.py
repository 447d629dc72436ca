"""Shared helpers: build small scenarios in code and run them into a temporary folder."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import settings

from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.runner import RunResult, run_scenario

# CI draws the same examples every run (a failure there is a regression, never a new random find);
# locally, each run draws new random examples and keeps failures in .hypothesis/ to replay.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"
SHARED = REPO.parent / "shared" / "ground_truth"


def explicit_scenario(
    requests: list[tuple[float, int, int]], *, policy: str = "continuous", **overrides: Any
) -> dict[str, Any]:
    """A one-replica unit-cost scenario with the given (arrival_at_s, prompt, output) requests."""
    raw: dict[str, Any] = {
        "name": "test",
        "workload": {
            "tenants": [
                {
                    "name": "t",
                    "arrival": {
                        "kind": "explicit",
                        "requests": [
                            {"arrival_at_s": a, "prompt_tokens": p, "output_tokens": o} for a, p, o in requests
                        ],
                    },
                }
            ]
        },
        "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {"policy": policy, "max_num_seqs": 4, "max_num_batched_tokens": 4096},
        "kv": {"block_size_tokens": 16, "num_blocks": 1000},
        "cost": {"kind": "unit", "step_time_s": 1.0},
    }
    for key, value in overrides.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return raw


@pytest.fixture
def run_mapping(tmp_path: Path) -> Callable[[dict[str, Any]], RunResult]:
    """Run a scenario given as a mapping; each call writes to a fresh sub-folder of tmp_path."""
    counter = iter(range(1_000_000))

    def run(raw: dict[str, Any]) -> RunResult:
        scenario = scenario_from_mapping(raw, "test.yaml")
        return run_scenario(LoadedScenario(scenario, "test.yaml", tmp_path), tmp_path / f"run{next(counter)}")

    return run


def read_requests(result: RunResult) -> list[dict[str, Any]]:
    """requests.parquet as a list of rows sorted by request_id."""
    rows = pq.read_table(result.out_dir / "requests.parquet").to_pylist()
    return sorted(rows, key=lambda r: r["request_id"])


def read_steps(result: RunResult) -> list[dict[str, Any]]:
    """steps.parquet rows in order."""
    return pq.read_table(result.out_dir / "steps.parquet").to_pylist()


def assert_same_summary(fast: Any, step: Any, path: str = "") -> None:
    """Two summaries agree: equal counts and strings, floats to rounding (the event count aside)."""
    if isinstance(step, dict):
        assert set(fast) == set(step), path
        for key in step:
            if key not in ("num_events", "fast_forward"):
                assert_same_summary(fast[key], step[key], f"{path}.{key}")
    elif isinstance(step, list):
        assert len(fast) == len(step), path
        for i, (f, s) in enumerate(zip(fast, step, strict=True)):
            assert_same_summary(f, s, f"{path}[{i}]")
    elif isinstance(step, float) and isinstance(fast, float):
        assert math.isclose(fast, step, rel_tol=1e-9, abs_tol=1e-12), (path, fast, step)
    else:
        assert fast == step, (path, fast, step)


def tiny_yaml(name: str, *, seed: int = 1, rate_per_s: float = 10.0, max_requests: int = 60, extra: str = "") -> str:
    """A scenario file's text that runs in a fraction of a second: one H100 replica priced by the unit
    cost model (every step 10 ms), Poisson arrivals, 64-token prompts and 8-token answers; ``extra``:
    more top-level YAML lines."""
    return (
        f"name: {name}\nseed: {seed}\nworkload:\n  tenants:\n    - name: t\n"
        f"      arrival: {{kind: poisson, rate_per_s: {rate_per_s}}}\n"
        "      prompt_tokens: {kind: fixed, tokens: 64}\n      output_tokens: {kind: fixed, tokens: 8}\n"
        f"stop: {{max_requests: {max_requests}}}\ncluster: {{hardware: H100-SXM, model: Llama-3.1-8B}}\n"
        f"cost: {{kind: unit, step_time_s: 0.01}}\n{extra}"
    )
