"""Every shipped scenario that does not need the shared data runs end to end (shortened) and keeps its invariants."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import SCENARIOS

from clustersim.config.loader import load_scenario
from clustersim.runner import run_scenario

SELF_CONTAINED = [
    p for p in sorted(SCENARIOS.glob("*.yaml")) if "../shared" not in p.read_text() and "shared/" not in p.read_text()
]


@pytest.mark.parametrize("path", SELF_CONTAINED, ids=lambda p: p.stem)
def test_shipped_scenario_runs(path: Path, tmp_path: Path):
    raw = yaml.safe_load(path.read_text())
    overrides = []
    if raw.get("stop", {}).get("max_requests", 0) > 300:
        overrides.append("stop.max_requests=300")
        if "metrics" in raw:  # a window sized for the whole run may leave nothing of 300 requests
            overrides.append("metrics={}")
    if raw.get("stop", {}).get("horizon_s", 0) > 600:  # the autoscaled day: its first start is at ~500 s
        overrides.append("stop.horizon_s=600")
    result = run_scenario(load_scenario(path, overrides), tmp_path)
    counts = result.summary["num_requests"]
    assert counts["arrived"] > 0
    assert counts["completed"] + counts["rejected"] + counts["unfinished"] + counts["lost"] == counts["arrived"]


def test_streaming_smoothness_shows_what_tpot_hides(tmp_path: Path):
    """Prefill-first stalls every chat stream for a whole 6,000-token prefill; a 512-token chunk
    budget does not. Per-request TPOT barely differs; the inter-token gaps do."""
    path = SCENARIOS / "streaming-smoothness.yaml"
    v0 = run_scenario(load_scenario(path), tmp_path / "v0").summary["tenants"]["chat"]
    chunked = run_scenario(
        load_scenario(path, ["scheduler.policy=chunked_prefill", "scheduler.max_num_batched_tokens=512"]),
        tmp_path / "chunked",
    ).summary["tenants"]["chat"]
    # the chat streams' p99 TPOT moves by a few percent where their p99 gap moves tenfold
    tpot_change = abs(v0["tpot_s"]["p99"] / chunked["tpot_s"]["p99"] - 1.0)
    itl_change = v0["itl_s"]["p99"] / chunked["itl_s"]["p99"] - 1.0
    assert tpot_change < 0.15 and tpot_change < 0.02 * itl_change
    assert v0["itl_s"]["p99"] > 0.2 and chunked["itl_s"]["p99"] < 0.04  # a prefill step vs a decode step
    assert v0["slo"]["attainment_frac"] < 0.2 and chunked["slo"]["attainment_frac"] == 1.0
    # vLLM V1 with an 8,192-token budget mixes decodes into the document steps: shorter stalls, still stalls
    v1 = run_scenario(load_scenario(path, ["scheduler.policy=vllm_v1"]), tmp_path / "v1").summary["tenants"]["chat"]
    assert 0.1 < v1["itl_s"]["p99"] < v0["itl_s"]["p99"]


@pytest.mark.parametrize(("name", "at_least"), [("prefix-burst", 0.8), ("multi-turn-chat", 0.6)])
def test_prefix_caching_pays_in_the_burst_and_multi_turn_examples(tmp_path: Path, name: str, at_least: float):
    """A shared system prompt is reused as soon as the first prompts computed it; a conversation's history
    is reused by its next turn. Without caching, the same traffic waits much longer for its first token."""
    path = SCENARIOS / f"{name}.yaml"
    cached = run_scenario(load_scenario(path), tmp_path / "on").summary
    uncached = run_scenario(load_scenario(path, ["kv.prefix_caching=false"]), tmp_path / "off").summary
    assert cached["kv"]["prefix_hit_rate"] >= at_least
    assert cached["ttft_s"]["p99"] < 0.5 * uncached["ttft_s"]["p99"]
