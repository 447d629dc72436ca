"""Whole runs: conservation, determinism, stop conditions, metadata, and the memory-fit check."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import SCENARIOS, explicit_scenario, read_requests, read_steps

from clustersim import __version__
from clustersim.config.loader import load_scenario
from clustersim.cost.roofline import RooflineCostModel
from clustersim.errors import ConfigError
from clustersim.runner import run_scenario

CHAT = {
    "name": "chat",
    "seed": 7,
    "workload": {
        "tenants": [
            {
                "name": "chat",
                "arrival": {"kind": "poisson", "rate_per_s": 30.0},
                "prompt_tokens": {"kind": "lognormal", "median_tokens": 1000, "sigma": 0.5, "max_tokens": 6000},
                "output_tokens": {"kind": "lognormal", "median_tokens": 130, "sigma": 1.0, "max_tokens": 1500},
            }
        ]
    },
    "cluster": {"num_replicas": 2, "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
    "stop": {"max_requests": 600},
    "slo": {"ttft_s": 0.5, "tpot_s": 0.05},
}


def with_tenant(raw: dict, name: str, rate: float) -> dict:
    raw = copy.deepcopy(raw)
    extra = copy.deepcopy(raw["workload"]["tenants"][0])
    extra["name"] = name
    extra["arrival"]["rate_per_s"] = rate
    raw["workload"]["tenants"].append(extra)
    return raw


def test_requests_and_tokens_are_conserved(run_mapping):
    result = run_mapping(CHAT)
    rows = read_requests(result)
    counts = result.summary["num_requests"]
    assert counts["arrived"] == len(rows) == 600
    assert counts["completed"] + counts["rejected"] + counts["unfinished"] == counts["arrived"]
    assert [r["request_id"] for r in rows] == list(range(600))
    completed = [r for r in rows if r["status"] == "completed"]
    assert all(r["num_emitted_tokens"] == r["output_tokens"] for r in completed)
    steps = read_steps(result)
    emitted_by_steps = sum(s["num_steps"] * (s["num_decode_tokens"] + s["num_prefill_seqs"]) for s in steps)
    assert emitted_by_steps == sum(r["num_emitted_tokens"] for r in rows) == result.summary["output_tokens"]
    for r in completed:  # causality
        assert r["arrival_at_s"] <= r["first_scheduled_at_s"] <= r["first_token_at_s"] <= r["finished_at_s"]


def test_same_seed_gives_byte_identical_logs(run_mapping):
    first, second = run_mapping(CHAT), run_mapping(CHAT)
    for name in ("requests.parquet", "steps.parquet", "summary.json"):
        assert (first.out_dir / name).read_bytes() == (second.out_dir / name).read_bytes()
    other = run_mapping({**CHAT, "seed": 8})
    assert (other.out_dir / "requests.parquet").read_bytes() != (first.out_dir / "requests.parquet").read_bytes()


def test_adding_a_tenant_keeps_the_other_tenants_traffic(run_mapping):
    raw = {**CHAT, "stop": {"horizon_s": 5.0}}
    alone = [r for r in read_requests(run_mapping(raw)) if r["tenant"] == "chat"]
    together = [r for r in read_requests(run_mapping(with_tenant(raw, "batch", 5.0))) if r["tenant"] == "chat"]
    key = [(r["arrival_at_s"], r["prompt_tokens"], r["output_tokens"]) for r in alone]
    assert key == [(r["arrival_at_s"], r["prompt_tokens"], r["output_tokens"]) for r in together]


def test_horizon_stops_the_clock_and_reports_unfinished(run_mapping):
    result = run_mapping({**CHAT, "stop": {"horizon_s": 3.0}})
    rows = read_requests(result)
    assert result.summary["makespan_s"] == 3.0
    assert all(r["arrival_at_s"] <= 3.0 for r in rows)
    unfinished = [r for r in rows if r["status"] == "unfinished"]
    assert unfinished and all(r["finished_at_s"] is None for r in unfinished)
    assert all(0 <= r["num_emitted_tokens"] < r["output_tokens"] for r in unfinished)
    assert result.summary["num_requests"]["unfinished"] == len(unfinished)


def test_summary_metrics_of_worked_example(tmp_path: Path):
    result = run_scenario(load_scenario(SCENARIOS / "static-vs-continuous.yaml"), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary == result.summary
    # TTFT: four requests get their first token at 1 s, two at 5 s
    assert summary["ttft_s"]["mean"] == pytest.approx((4 * 1 + 2 * 5) / 6)
    assert summary["ttft_s"]["p50"] == 1.0
    # TPOT is 1 s per token for everyone: one token per unit step
    assert summary["tpot_s"]["mean"] == 1.0
    assert summary["queue_s"]["p99"] == pytest.approx(4.0)
    assert summary["output_tokens"] == 36 and summary["output_tokens_per_s"] == 3.6
    assert summary["requests_per_s"] == 0.6
    assert summary["replicas"]["busy_frac"] == [1.0]


def test_slo_goodput(run_mapping):
    raw = explicit_scenario([(0.0, 8, 4), (0.0, 8, 4), (0.0, 8, 10), (0.0, 8, 10), (0.0, 8, 4), (0.0, 8, 4)])
    result = run_mapping({**raw, "slo": {"ttft_s": 2.0}})
    assert result.summary["slo"]["num_met"] == 4  # the last two get their first token at 5 s
    assert result.summary["slo"]["attainment_frac"] == pytest.approx(4 / 6)


def test_outputs_carry_scenario_and_version_metadata(run_mapping):
    result = run_mapping(CHAT)
    for name in ("requests.parquet", "steps.parquet"):
        metadata = pq.read_schema(result.out_dir / name).metadata
        assert metadata[b"clustersim.version"].decode() == __version__
        assert json.loads(metadata[b"clustersim.scenario"])["seed"] == 7
        assert len(metadata[b"clustersim.scenario_sha256"]) == 64
    assert not (result.out_dir / "INCOMPLETE").exists()
    assert not list(result.out_dir.glob("*.partial"))


def test_model_that_does_not_fit_fails_with_sizes(run_mapping):
    raw = {**CHAT, "cluster": {"hardware": "A100-80GB", "model": "Llama-3.1-70B", "tensor_parallel": 1}}
    with pytest.raises(ConfigError) as info:
        run_mapping(raw)
    assert str(info.value) == (
        "test.yaml: cluster.tensor_parallel: Llama-3.1-70B does not fit on A100-80GB at tensor_parallel 1: "
        "weights need 131.4 GiB per GPU plus one KV block (0.005 GiB); 71.2 GiB usable (0.9 x 79.2 GiB)"
    )
    raw["cluster"]["tensor_parallel"] = 4
    assert run_mapping({**raw, "stop": {"max_requests": 20}}).summary["num_requests"]["completed"] == 20


def test_block_scaled_weights_need_fp8_weights(run_mapping):
    raw = {**CHAT, "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B", "weight_scaling": "block"}}
    with pytest.raises(ConfigError) as info:
        run_mapping(raw)
    assert str(info.value) == "test.yaml: cluster.weight_scaling: block scales are FP8 weights', not bf16"
    raw["cluster"]["weight_precision"] = "fp8"
    raw["stop"] = {"max_requests": 20}
    block = run_mapping(raw).summary
    assert block["num_requests"]["completed"] == 20
    raw["cluster"]["weight_scaling"] = "tensor"  # vLLM's fitted block_scale is under 1: block-scaled is slower
    assert run_mapping(raw).summary["tpot_s"]["mean"] < block["tpot_s"]["mean"]


def test_tensor_parallel_must_divide_heads(run_mapping):
    with pytest.raises(ConfigError, match=r"cluster\.tensor_parallel: 3 does not divide Llama-3.1-8B's 32"):
        run_mapping({**CHAT, "cluster": {**CHAT["cluster"], "tensor_parallel": 3}})


def test_continuous_beats_static_on_chat_traffic(run_mapping):
    continuous = run_mapping(CHAT).summary
    static = run_mapping({**CHAT, "scheduler": {"policy": "static"}}).summary
    assert continuous["ttft_s"]["p99"] < static["ttft_s"]["p99"]
    assert continuous["e2e_s"]["mean"] < static["e2e_s"]["mean"]


def test_makespan_ends_with_last_request_when_nothing_is_in_flight_at_the_horizon(run_mapping):
    raw = explicit_scenario([(0.0, 8, 3), (2.0, 8, 2)])
    result = run_mapping({**raw, "stop": {"horizon_s": 30.0}})
    assert result.summary["makespan_s"] == 4.0
    assert result.summary["num_requests"]["completed"] == 2


def test_a_run_that_fails_midway_leaves_a_marked_incomplete_folder(run_mapping, monkeypatch, tmp_path):
    calls = {"n": 0}
    original = RooflineCostModel.step_duration_s

    def failing(self, batch):
        calls["n"] += 1
        if calls["n"] > 50:
            raise RuntimeError("simulated crash")
        return original(self, batch)

    monkeypatch.setattr(RooflineCostModel, "step_duration_s", failing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_mapping(CHAT)
    out_dir = next(tmp_path.glob("run*"))
    assert (out_dir / "INCOMPLETE").read_text() == "this run did not finish: RuntimeError: simulated crash\n"
    assert not (out_dir / "requests.parquet").exists() and not (out_dir / "summary.json").exists()
    assert (out_dir / "requests.parquet.partial").exists()


def test_slo_percentile_verdict(run_mapping):
    raw = explicit_scenario([(0.0, 8, 4), (0.0, 8, 4), (0.0, 8, 10), (0.0, 8, 10), (0.0, 8, 4), (0.0, 8, 4)])
    # TTFTs are 1, 1, 1, 1, 5, 5 s: the median is 1 s, the 90th percentile 5 s
    met = run_mapping({**raw, "slo": {"ttft_s": 2.0, "percentile": 50}}).summary["slo"]
    assert met["percentile_values"] == {"ttft_s": 1.0} and met["percentile_met"] is True
    missed = run_mapping({**raw, "slo": {"ttft_s": 2.0, "percentile": 90}}).summary["slo"]
    assert missed["percentile_values"] == {"ttft_s": 5.0} and missed["percentile_met"] is False
    assert missed["targets"] == {"ttft_s": 2.0}
