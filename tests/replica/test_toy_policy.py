"""The worked toy policy of docs/replica.md: a batching policy is one class, and the fast path comes free."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from conftest import assert_same_summary, explicit_scenario, read_requests

from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.replica.batching import PolicyBase, StepBuilder
from clustersim.runner import RunResult, run_plan
from clustersim.runplan import plan_run


class OnePromptPerStep(PolicyBase):
    """Continuous batching that admits at most one new prompt per iteration (a toy)."""

    kind = "one_prompt_per_step"

    def plan(self, step: StepBuilder) -> None:
        step.decode()  # the running sequences decode (their KV blocks grow; the newest is preempted if short)
        step.swap_in()  # swapped-out sequences come back first
        step.admit(chunked=False, max_admitted=1)  # then one waiting prompt, whole, if it fits


def run_toy(raw: dict[str, Any], out_dir: Path) -> RunResult:
    plan = plan_run(LoadedScenario(scenario_from_mapping(raw, "toy.yaml"), "toy.yaml", out_dir))
    return run_plan(dataclasses.replace(plan, policy=OnePromptPerStep), out_dir)


def test_one_prompt_per_step_staggers_a_burst(tmp_path: Path) -> None:
    # three requests at t=0, 8-token prompts, 3 output tokens, every step 1 s: continuous batching
    # prefills all three in step 0; the toy prefills one per step, next to the running decodes
    raw = explicit_scenario([(0.0, 8, 3), (0.0, 8, 3), (0.0, 8, 3)])
    rows = read_requests(run_toy(raw, tmp_path / "toy"))
    assert [(r["first_scheduled_at_s"], r["first_token_at_s"], r["finished_at_s"]) for r in rows] == [
        (0.0, 1.0, 3.0),
        (1.0, 2.0, 4.0),
        (2.0, 3.0, 5.0),
    ]


def test_the_fast_path_needs_nothing_from_a_new_policy(tmp_path: Path) -> None:
    raw = {
        "name": "toy",
        "seed": 5,
        "workload": {
            "tenants": [
                {
                    "name": "chat",
                    "arrival": {"kind": "poisson", "rate_per_s": 30.0},
                    "prompt_tokens": {"kind": "lognormal", "median_tokens": 900, "sigma": 0.6, "max_tokens": 6000},
                    "output_tokens": {"kind": "lognormal", "median_tokens": 120, "sigma": 1.0, "max_tokens": 1200},
                }
            ]
        },
        "cluster": {"num_replicas": 2, "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "router": {"kind": "least_kv"},
        "kv": {"num_blocks": 1500},
        "stop": {"max_requests": 300},
    }
    fast = run_toy({**raw, "simulation": {"fast_forward": True}}, tmp_path / "fast")
    step = run_toy({**raw, "simulation": {"fast_forward": False}}, tmp_path / "step")
    assert read_requests(fast) == read_requests(step)
    assert_same_summary(fast.summary, step.summary)
    assert step.summary["replicas"]["num_preemptions"] > 0  # the pool is small enough to preempt
