"""Property tests over random small scenarios: every run keeps every invariant, in both modes.

``run_scenario`` checks the invariants itself (conservation of requests, tokens and KV blocks,
causality, per-step limits) and raises on a violation; on top, the fast path must reproduce the
step-by-step reference.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.sim import RunResult, run_scenario

requests_strategy = st.lists(
    st.tuples(st.floats(0, 30, allow_nan=False), st.integers(1, 300), st.integers(1, 60)), min_size=1, max_size=25
)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    requests = sorted(draw(requests_strategy))
    horizon = draw(st.one_of(st.none(), st.floats(1, 60)))
    policy = draw(st.sampled_from(["static", "continuous", "vllm", "chunked_prefill"]))
    scheduler: dict[str, Any] = {
        "policy": policy,
        "max_num_seqs": draw(st.integers(1, 8)),
        "max_num_batched_tokens": draw(st.integers(64, 1024)),
        "ordering": draw(
            st.sampled_from(
                [
                    {"kind": "fcfs"},
                    {"kind": "shortest_prompt_first", "aging_tokens_per_s": 50},
                    {"kind": "fair_share"},
                    {"kind": "priority"},
                ]
            )
        ),
        "slo_admission": draw(st.sampled_from(["off", "shed", "defer"])),
    }
    if policy == "static":
        scheduler["batch_wait_s"] = draw(st.sampled_from([0.0, 0.5, 3.0]))
    return {
        "name": "prop",
        "seed": draw(st.integers(0, 10)),
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
        "cluster": {"num_replicas": draw(st.integers(1, 3)), "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": scheduler,
        "kv": {
            "block_size_tokens": draw(st.sampled_from([1, 4, 16])),
            "num_blocks": draw(st.integers(4, 120)),
            "allocator": draw(st.sampled_from(["paged", "paged", "contiguous"])),
            "reserve": draw(st.sampled_from(["max_output", "max_model_len"])),
            "max_output_tokens": draw(st.integers(1, 80)),
            "max_model_len_tokens": draw(st.integers(50, 400)),
            "watermark_frac": draw(st.sampled_from([0.0, 0.0, 0.1, 0.3])),
            "preemption": draw(st.sampled_from(["recompute", "swap"])),
            "host_swap_bytes": draw(st.sampled_from([0, 2**20, 2**30])),
        },
        "cost": draw(st.sampled_from([{"kind": "unit", "step_time_s": 1.0}, {"kind": "roofline"}])),
        "stop": {"horizon_s": horizon} if horizon else {},
        "slo": {"ttft_s": draw(st.floats(0.5, 20))},
        "_prefix": draw(st.sampled_from([0, 0, 8, 64])),
    }


def with_prefix_caching(raw: dict[str, Any]) -> dict[str, Any]:
    """Turn the drawn ``_prefix`` into a shared system prompt with prefix caching (paged blocks only)."""
    raw = {**raw}
    shared = raw.pop("_prefix", 0)
    if shared and raw["kv"]["allocator"] == "paged" and raw["scheduler"]["policy"] != "static":
        raw["kv"] = {**raw["kv"], "prefix_caching": True, "prefix_block_tokens": raw["kv"]["block_size_tokens"]}
        tenant = {**raw["workload"]["tenants"][0], "shared_prefix_tokens": shared}
        raw["workload"] = {"tenants": [tenant]}
    return raw


def run(raw: dict[str, Any], tmp: Path, fast_forward: bool) -> RunResult:
    raw = with_prefix_caching(raw)
    scenario = scenario_from_mapping({**raw, "simulation": {"fast_forward": fast_forward}}, "prop.yaml")
    return run_scenario(LoadedScenario(scenario, "prop.yaml", tmp), tmp / ("fast" if fast_forward else "step"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
@example(
    raw={
        "name": "prop",
        "seed": 0,
        "workload": {
            "tenants": [
                {
                    "name": "t",
                    "arrival": {
                        "kind": "explicit",
                        "requests": [
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 32},
                            {"arrival_at_s": 18.44293270573001, "prompt_tokens": 1, "output_tokens": 1},
                        ],
                    },
                }
            ]
        },
        "cluster": {"num_replicas": 1, "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {
            "policy": "chunked_prefill",
            "max_num_seqs": 5,
            "max_num_batched_tokens": 64,
            "ordering": {"kind": "fcfs"},
            "slo_admission": "defer",
        },
        "kv": {"block_size_tokens": 1, "num_blocks": 72},
        "cost": {"kind": "unit", "step_time_s": 1.0},
        "stop": {},
        "slo": {"ttft_s": 0.5},
    },
).via("discovered failure")
@example(
    raw={
        "name": "prop",
        "seed": 0,
        "workload": {
            "tenants": [
                {
                    "name": "t",
                    "arrival": {
                        "kind": "explicit",
                        "requests": [
                            {"arrival_at_s": 3.036042004191871, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 11.682782367981522, "prompt_tokens": 1, "output_tokens": 1},
                        ],
                    },
                }
            ]
        },
        "cluster": {"num_replicas": 1, "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {
            "policy": "continuous",
            "max_num_seqs": 1,
            "max_num_batched_tokens": 64,
            "ordering": {"kind": "fcfs"},
            "slo_admission": "off",
        },
        "kv": {"block_size_tokens": 1, "num_blocks": 4},
        "cost": {"kind": "unit", "step_time_s": 1.0},
        "stop": {},
        "slo": {"ttft_s": 1.0},
    },
).via("discovered failure")
@example(
    raw={
        "name": "prop",
        "seed": 0,
        "workload": {
            "tenants": [
                {
                    "name": "t",
                    "arrival": {
                        "kind": "explicit",
                        "requests": [
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 1.1125369292536007e-308, "prompt_tokens": 18, "output_tokens": 48},
                            {"arrival_at_s": 4.1264734689682914e-278, "prompt_tokens": 121, "output_tokens": 33},
                            {"arrival_at_s": 1.1754943508222875e-38, "prompt_tokens": 293, "output_tokens": 15},
                            {"arrival_at_s": 0.87328976831095, "prompt_tokens": 174, "output_tokens": 25},
                            {"arrival_at_s": 1.9, "prompt_tokens": 47, "output_tokens": 32},
                            {"arrival_at_s": 6.416892470652601, "prompt_tokens": 249, "output_tokens": 24},
                            {"arrival_at_s": 7.475283845997224, "prompt_tokens": 94, "output_tokens": 13},
                            {"arrival_at_s": 21.153635464045276, "prompt_tokens": 48, "output_tokens": 8},
                            {"arrival_at_s": 21.480298088122794, "prompt_tokens": 254, "output_tokens": 22},
                            {"arrival_at_s": 24.375674178318565, "prompt_tokens": 212, "output_tokens": 39},
                        ],
                    },
                }
            ]
        },
        "cluster": {"num_replicas": 1, "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {
            "policy": "chunked_prefill",
            "max_num_seqs": 1,
            "max_num_batched_tokens": 64,
            "ordering": {"kind": "fcfs"},
            "slo_admission": "off",
        },
        "kv": {
            "block_size_tokens": 4,
            "num_blocks": 79,
            "allocator": "paged",
            "reserve": "max_output",
            "max_output_tokens": 1,
            "max_model_len_tokens": 50,
            "watermark_frac": 0.1,
        },
        "cost": {"kind": "unit", "step_time_s": 1.0},
        "stop": {},
        "slo": {"ttft_s": 3.579211802968987},
    },
).via("discovered failure")
@example(
    raw={
        "name": "prop",
        "seed": 0,
        "workload": {
            "tenants": [
                {
                    "name": "t",
                    "arrival": {
                        "kind": "explicit",
                        "requests": [
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 56},
                            {"arrival_at_s": 3.7922996929181116, "prompt_tokens": 287, "output_tokens": 10},
                            {"arrival_at_s": 14.125599606245109, "prompt_tokens": 297, "output_tokens": 53},
                            {"arrival_at_s": 20.456148943268786, "prompt_tokens": 164, "output_tokens": 1},
                            {"arrival_at_s": 25.670340473408718, "prompt_tokens": 53, "output_tokens": 24},
                        ],
                    },
                }
            ]
        },
        "cluster": {"num_replicas": 1, "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {
            "policy": "vllm",
            "max_num_seqs": 8,
            "max_num_batched_tokens": 1000,
            "ordering": {"kind": "fcfs"},
            "slo_admission": "defer",
        },
        "kv": {
            "block_size_tokens": 4,
            "num_blocks": 120,
            "allocator": "paged",
            "reserve": "max_output",
            "max_output_tokens": 1,
            "max_model_len_tokens": 50,
            "watermark_frac": 0.0,
        },
        "cost": {"kind": "unit", "step_time_s": 1.0},
        "stop": {},
        "slo": {"ttft_s": 4.5},
    },
).via("discovered failure")
@example(
    raw={
        "name": "prop",
        "seed": 0,
        "workload": {
            "tenants": [
                {
                    "name": "t",
                    "arrival": {
                        "kind": "explicit",
                        "requests": [
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 2.225073858507e-311, "prompt_tokens": 179, "output_tokens": 1},
                            {"arrival_at_s": 6.119458030139869e-205, "prompt_tokens": 20, "output_tokens": 23},
                            {"arrival_at_s": 2.3008945305060355e-34, "prompt_tokens": 23, "output_tokens": 38},
                            {"arrival_at_s": 1.3883218012444856, "prompt_tokens": 213, "output_tokens": 7},
                            {"arrival_at_s": 3.7051726650436287, "prompt_tokens": 272, "output_tokens": 40},
                            {"arrival_at_s": 3.8060534696352275, "prompt_tokens": 120, "output_tokens": 46},
                            {"arrival_at_s": 3.812894722080052, "prompt_tokens": 165, "output_tokens": 39},
                            {"arrival_at_s": 8.774252714573995, "prompt_tokens": 36, "output_tokens": 27},
                            {"arrival_at_s": 10.461665901958197, "prompt_tokens": 168, "output_tokens": 33},
                            {"arrival_at_s": 14.740528237899888, "prompt_tokens": 91, "output_tokens": 35},
                            {"arrival_at_s": 26.39103397671552, "prompt_tokens": 231, "output_tokens": 49},
                            {"arrival_at_s": 29.73791684582516, "prompt_tokens": 265, "output_tokens": 25},
                            {"arrival_at_s": 29.999999999999996, "prompt_tokens": 4, "output_tokens": 30},
                        ],
                    },
                }
            ]
        },
        "cluster": {"num_replicas": 1, "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {
            "policy": "static",
            "max_num_seqs": 1,
            "max_num_batched_tokens": 485,
            "ordering": {"kind": "fcfs"},
            "slo_admission": "off",
            "batch_wait_s": 0.0,
        },
        "kv": {
            "block_size_tokens": 4,
            "num_blocks": 66,
            "allocator": "paged",
            "reserve": "max_output",
            "max_output_tokens": 1,
            "max_model_len_tokens": 50,
            "watermark_frac": 0.0,
            "preemption": "recompute",
            "host_swap_bytes": 0,
        },
        "cost": {"kind": "unit", "step_time_s": 1.0},
        "stop": {},
        "slo": {"ttft_s": 19.91486703043748},
        "_prefix": 64,
    },
).via("discovered failure")
@example(
    raw={
        "name": "prop",
        "seed": 0,
        "workload": {
            "tenants": [
                {
                    "name": "t",
                    "arrival": {
                        "kind": "explicit",
                        "requests": [
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 5e-324, "prompt_tokens": 276, "output_tokens": 42},
                            {"arrival_at_s": 1.7482427532870197, "prompt_tokens": 103, "output_tokens": 59},
                            {"arrival_at_s": 4.391162019560311, "prompt_tokens": 1, "output_tokens": 1},
                            {"arrival_at_s": 8.6968689107422, "prompt_tokens": 197, "output_tokens": 13},
                            {"arrival_at_s": 12.426607856445418, "prompt_tokens": 55, "output_tokens": 32},
                            {"arrival_at_s": 13.749020039982828, "prompt_tokens": 34, "output_tokens": 10},
                            {"arrival_at_s": 20.983963145364893, "prompt_tokens": 283, "output_tokens": 55},
                            {"arrival_at_s": 23.58926208264723, "prompt_tokens": 33, "output_tokens": 46},
                        ],
                    },
                }
            ]
        },
        "cluster": {"num_replicas": 1, "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {
            "policy": "static",
            "max_num_seqs": 1,
            "max_num_batched_tokens": 64,
            "ordering": {"kind": "fcfs"},
            "slo_admission": "shed",
            "batch_wait_s": 0.0,
        },
        "kv": {
            "block_size_tokens": 16,
            "num_blocks": 56,
            "allocator": "paged",
            "reserve": "max_output",
            "max_output_tokens": 1,
            "max_model_len_tokens": 50,
            "watermark_frac": 0.0,
            "preemption": "recompute",
            "host_swap_bytes": 0,
        },
        "cost": {"kind": "unit", "step_time_s": 1.0},
        "stop": {"horizon_s": 29.031990859251597},
        "slo": {"ttft_s": 12.581435264400131},
        "_prefix": 0,
    },
).via("discovered failure")
def test_random_scenarios_keep_invariants_and_fast_equals_step(raw: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fast = run(raw, Path(tmp), True)
        step = run(raw, Path(tmp), False)
        fast_rows = sorted(pq.read_table(fast.out_dir / "requests.parquet").to_pylist(), key=lambda r: r["request_id"])
        step_rows = sorted(pq.read_table(step.out_dir / "requests.parquet").to_pylist(), key=lambda r: r["request_id"])
    assert fast.summary["num_requests"] == step.summary["num_requests"]
    for f, s in zip(fast_rows, step_rows, strict=True):
        for key, value in s.items():
            if isinstance(value, float):
                assert math.isclose(f[key], value, rel_tol=1e-9, abs_tol=1e-9), (key, f, s)
            else:
                assert f[key] == value, (key, f, s)
