"""Property tests over random small scenarios: every run keeps every invariant, in both modes.

``run_scenario`` checks the invariants itself (conservation of requests, tokens and KV blocks,
causality, per-step limits, inter-token gaps, the measured ones apart) and raises on a violation;
on top, the fast path must reproduce the step-by-step reference, with or without a measurement window.
"""

from __future__ import annotations

import json
import math
import os
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import assert_same_summary
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.errors import ConfigError
from clustersim.runner import RunResult, run_scenario
from clustersim.workload.window import resolve_window

requests_strategy = st.lists(
    st.tuples(st.floats(0, 30, allow_nan=False, allow_subnormal=False), st.integers(1, 300), st.integers(1, 60)),
    min_size=1,
    max_size=25,
)


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, Any]:
    """One to three replicas (pipeline-parallel ones, micro-batches in flight, among them), or two
    groups of different GPUs (a heterogeneous cluster)."""
    # gpt-oss-20b: sliding-window layers (their own decode cost and KV share) and mixture-of-experts layers
    cluster: dict[str, Any] = {"hardware": "H100-SXM", "model": draw(st.sampled_from(["Llama-3.1-8B", "gpt-oss-20b"]))}
    if draw(st.booleans()):
        pp = draw(st.sampled_from([1, 1, 2, 4]))
        return {**cluster, "num_replicas": draw(st.integers(1, 3)), "pipeline_parallel": pp}
    return {**cluster, "groups": [{"count": draw(st.integers(1, 2))}, {"count": 1, "hardware": "A100-80GB"}]}


CLOSED_LOOP = {
    "name": "users",
    "arrival": {
        "kind": "closed_loop",
        "num_users": 3,
        "think_time": {"kind": "fixed", "time_s": 0.0},
        "turns_per_conversation": 3,
        "max_context_tokens": 600,
    },
    "prompt_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 200},
    "output_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 40},
}


DEFAULT_RESERVE = {"init_ratio": 0.7, "min_ratio": 0.098, "decay_steps": 600, "clip_tokens": 4096, "retract_steps": 20}


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    requests = sorted(draw(requests_strategy))
    horizon = draw(st.one_of(st.none(), st.floats(1, 60)))
    policy = draw(
        st.sampled_from(
            [
                "static",
                "continuous",
                "vllm_v0",
                "chunked_prefill",
                "vllm_v1",
                "trtllm_no_evict",
                "trtllm_no_evict_chunked",
                "sglang",
            ]
        )
    )
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
    if policy in ("chunked_prefill", "vllm_v1", "trtllm_no_evict_chunked"):
        scheduler["long_prefill_token_threshold"] = draw(st.sampled_from([0, 0, 16, 100]))
    if policy == "vllm_v0":  # multi-step scheduling: decode runs between scheduler calls
        scheduler["num_scheduler_steps"] = draw(st.sampled_from([1, 1, 2, 5]))
    if policy in ("sglang", "continuous", "chunked_prefill", "vllm_v1"):  # admission holds back future tokens
        reserve = draw(st.sampled_from([None, "sglang", "fast"]))
        if reserve == "sglang":
            scheduler["decode_reserve"] = DEFAULT_RESERVE
        elif reserve == "fast":  # decays to its floor within a run, clips long outputs, retracts a lot
            scheduler["decode_reserve"] = {**DEFAULT_RESERVE, "init_ratio": 0.9, "decay_steps": 7, "clip_tokens": 9}
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
        "cluster": draw(clusters()),
        "router": draw(
            st.sampled_from(
                [
                    {"kind": "round_robin"},
                    {"kind": "least_kv"},
                    {"kind": "least_outstanding"},
                    {"kind": "vllm_dp"},
                    {"kind": "power_of_two"},
                    {"kind": "affinity", "overload_abs_requests": 1},
                    {"kind": "random"},
                ]
            )
        ),
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
        # "client": its one thread works; "documents": prompts cut from documents an earlier run left cached
        "_closed_loop": draw(st.sampled_from([False, False, True, "client", "documents"])),
        "_window": draw(st.sampled_from([None, None, "count", "time", "both"])),
        "_window_fracs": draw(st.tuples(st.floats(0, 0.5), st.floats(0, 0.5))),
        "_faults": draw(st.one_of(st.none(), st.none(), faults())),
        "_autoscaler": draw(st.one_of(st.none(), st.none(), autoscalers())),
        "_disagg": draw(st.one_of(st.none(), st.none(), disaggregations())),
        "speculative": draw(st.one_of(st.none(), st.none(), speculative())),
        # the engine's API server also delays each request beyond its work (frontend_fitted_latency_s)
        "_frontend_latency_s": draw(st.sampled_from([None, None, 0.003, 0.5])),
        # ... and streams its tokens slower than the engine makes them (frontend_per_output_token_s)
        "_frontend_stream_s": draw(st.sampled_from([None, None, 0.001, 0.02])),
    }


def with_draft_of_the_targets_family(raw: dict[str, Any]) -> dict[str, Any]:
    """A drawn draft model is the target's own family (one tokenizer): Llama-3.1-8B for Llama, the target
    itself for gpt-oss-20b (the smallest of its family)."""
    spec = raw.get("speculative")
    if spec is None or spec.get("draft_model") != "_target":
        return raw
    model = raw["cluster"]["model"]
    return {**raw, "speculative": {**spec, "draft_model": "Llama-3.1-8B" if model.startswith("Llama") else model}}


def acceptance_rates() -> st.SearchStrategy[Any]:
    """A fixed acceptance rate, or a beta distribution each request draws its own from."""
    beta = st.fixed_dictionaries(
        {
            "kind": st.just("beta"),
            "mean": st.sampled_from([0.1, 0.5, 0.9]),
            "concentration": st.sampled_from([0.5, 4.0, 50.0]),
        }
    )
    return st.one_of(st.sampled_from([0.0, 0.3, 0.8, 1.0]), beta)


@st.composite
def speculative(draw: st.DrawFn) -> dict[str, Any]:
    """Speculative decoding with any proposer (a draft model of the target's own family)."""
    kind = draw(st.sampled_from(["ngram", "eagle", "draft_model"]))
    drawn: dict[str, Any] = {
        "kind": kind,
        "num_speculative_tokens": draw(st.integers(1, 5)),
        "acceptance_rate": draw(acceptance_rates()),
    }
    if draw(st.booleans()):  # its own rate for the explicit tenant (the closed-loop users keep the default)
        drawn["tenant_acceptance_rates"] = {"t": draw(acceptance_rates())}
    return {**drawn, "draft_model": "_target"} if kind == "draft_model" else drawn


@st.composite
def disaggregations(draw: st.DrawFn) -> dict[str, Any]:
    """Prefill and decode pools (maybe of other GPUs and TP) and a link, slow ones included so that
    transfers queue behind each other."""
    prefill = {"count": draw(st.integers(1, 2)), "role": "prefill"}
    decode = {"count": draw(st.integers(1, 2)), "role": "decode"}
    if draw(st.booleans()):
        decode |= {"hardware": "A100-80GB", "tensor_parallel": draw(st.sampled_from([1, 2]))}
    link = {
        "kind": draw(st.sampled_from(["nvlink", "infiniband", "roce", "pcie"])),
        "latency_s": draw(st.sampled_from([0.0, 4e-4, 0.5])),
    }
    if draw(st.booleans()):
        link["bandwidth_bytes_per_s"] = draw(st.sampled_from([1e7, 1e8]))  # seconds per transfer: they queue
    router = draw(st.sampled_from([{"kind": "least_kv"}, {"kind": "round_robin"}, {"kind": "random"}]))
    section: dict[str, Any] = {"link": link, "decode_router": router}
    if draw(st.booleans()):  # replicas on nodes: within one, KV caches cross the node's link
        nodes = {"gpus_per_node": draw(st.sampled_from([1, 2, 4])), "prefer_local": draw(st.booleans())}
        section["nodes"] = {**nodes, "link": {"kind": "nvlink", "latency_s": draw(st.sampled_from([0.0, 1e-5]))}}
    groups = [prefill, decode] if draw(st.booleans()) else [decode, prefill]  # either pool first
    scaled = draw(st.sampled_from([("prefill",), ("decode",), ("prefill", "decode")]))  # with a drawn autoscaler
    return {"groups": groups, "disaggregation": section, "_scaled": scaled}


def with_disaggregation(raw: dict[str, Any]) -> dict[str, Any]:
    """Turn the drawn ``_disagg`` into prefill and decode pools (without what disaggregation does not
    support yet: SLO admission, contiguous KV); drawn failures stay, and a drawn autoscaler scales the
    drawn pools, each on its own."""
    raw = {**raw}
    drawn = raw.pop("_disagg", None)
    if drawn is None:
        return raw
    raw["cluster"] = {"hardware": "H100-SXM", "model": "Llama-3.1-8B", "groups": drawn["groups"]}
    raw["disaggregation"] = {**drawn["disaggregation"]}
    raw["scheduler"] = {**raw["scheduler"], "slo_admission": "off"}
    raw["kv"] = {**raw["kv"], "allocator": "paged"}
    scaler = raw.pop("_autoscaler", None)
    if scaler is not None:
        scaler = {**scaler}
        all_up = scaler.pop("_all_up")
        counts = {g["role"]: g["count"] for g in drawn["groups"]}
        raw["disaggregation"]["autoscaler"] = {
            pool: {**scaler, "initial_replicas": counts[pool]} if all_up else scaler for pool in drawn["_scaled"]
        }
    return raw


@st.composite
def autoscalers(draw: st.DrawFn) -> dict[str, Any]:
    """An autoscaler over the whole cluster (one replica started at first)."""
    common = {
        "interval_s": draw(st.sampled_from([0.5, 1.0, 3.0])),
        "scale_down_window_s": draw(st.sampled_from([0.0, 2.0, 10.0])),
        "cold_start": {"storage_bandwidth_bytes_per_s": 1e10, "engine_init_s": draw(st.sampled_from([0.0, 1.5]))},
        "_all_up": draw(st.booleans()),  # start with every replica up (then scale down), else one
    }
    kind = draw(st.sampled_from(["queue_length", "kv_use", "slo"]))
    if kind == "queue_length":
        return {**common, "kind": kind, "target_outstanding_per_replica": draw(st.sampled_from([0.5, 2.0]))}
    if kind == "kv_use":
        return {**common, "kind": kind, "target_kv_used_frac": draw(st.sampled_from([0.1, 0.5]))}
    targets = draw(
        st.sampled_from([{"ttft_s": 0.5}, {"ttft_s": 3.0}, {"tpot_s": 0.02}, {"ttft_s": 3.0, "tpot_s": 0.05}])
    )
    return {**common, "kind": kind, **targets, "window_s": 5.0}


@st.composite
def faults(draw: st.DrawFn) -> dict[str, Any]:
    """Replicas failing (replica indices taken modulo the cluster's size by :func:`with_faults`)."""
    common = {
        "on_failure": draw(st.sampled_from(["retry", "retry", "retry", "lose"])),
        "max_retries": draw(st.sampled_from([0, 2, 3])),
        "repair_s": draw(st.sampled_from([None, 0.0, 2.0, 10.0])),
        "detect_s": draw(st.sampled_from([0.0, 0.0, 1.0, 5.0])),
        "cold_start": {"storage_bandwidth_bytes_per_s": 1e10, "engine_init_s": draw(st.sampled_from([0.0, 1.5]))},
    }
    if draw(st.booleans()):
        return {**common, "kind": "mtbf", "mtbf_gpu_hours": draw(st.sampled_from([0.002, 0.01]))}
    times = draw(st.lists(st.floats(0, 30, allow_nan=False, allow_subnormal=False), min_size=1, max_size=3))
    events = [{"at_s": at_s, "replica": draw(st.integers(0, 2))} for at_s in times]
    return {**common, "kind": "scripted", "events": events}


def with_faults(raw: dict[str, Any]) -> dict[str, Any]:
    """Turn the drawn ``_faults`` into the scenario's ``faults`` (its replicas within the cluster), and
    ``_autoscaler`` into its ``autoscaler``."""
    raw = {**raw}
    drawn = raw.pop("_faults", None)
    scaler = raw.pop("_autoscaler", None)
    cluster = raw["cluster"]
    count = sum(g["count"] for g in cluster["groups"]) if "groups" in cluster else cluster["num_replicas"]
    if scaler is not None:
        scaler = {**scaler}
        raw["autoscaler"] = {**scaler, "initial_replicas": count} if scaler.pop("_all_up") else scaler
    if drawn is None:
        return raw
    if drawn["kind"] == "scripted":
        drawn = {**drawn, "events": [{**e, "replica": e["replica"] % count} for e in drawn["events"]]}
    return {**raw, "faults": drawn}


def with_prefix_caching(raw: dict[str, Any]) -> dict[str, Any]:
    """Turn the drawn ``_prefix`` into a shared system prompt with prefix caching (paged blocks only)."""
    raw = {**raw}
    if raw["scheduler"]["policy"] == "vllm_v1":  # paged blocks, recompute only
        raw["kv"] = {**raw["kv"], "allocator": "paged", "preemption": "recompute"}
    shared = raw.pop("_prefix", 0)
    closed_loop = raw.pop("_closed_loop", False)
    if closed_loop:  # users sending back to back, each a session (affinity keys)
        users = CLOSED_LOOP
        if closed_loop == "client":  # a client thread's work on each ended request delays the next sends
            client = {"client_time_per_request_s": 0.05, "client_time_per_prompt_token_s": 2e-3}
            users = {**CLOSED_LOOP, "arrival": {**CLOSED_LOOP["arrival"], **client}}
        if closed_loop == "documents":  # request k reads document k; an earlier run sent some of them
            single = {
                k: v
                for k, v in CLOSED_LOOP["arrival"].items()
                if k not in ("turns_per_conversation", "max_context_tokens")
            }
            earlier = {"prompt_tokens": [150, 30, 200, 90], "output_tokens": [20, 0, 5, 60]}
            users = {**CLOSED_LOOP, "arrival": single, "documents": {"earlier_runs": [earlier]}}
        raw["workload"] = {"tenants": [*raw["workload"]["tenants"], users]}
        raw["stop"] = {**raw["stop"], "max_requests": 40}
    whole_sequence = raw["scheduler"]["policy"] in ("static", "trtllm_no_evict", "trtllm_no_evict_chunked")
    if shared and raw["kv"]["allocator"] == "paged" and not whole_sequence:
        raw["kv"] = {
            **raw["kv"],
            "prefix_caching": True,
            "prefix_block_tokens": raw["kv"]["block_size_tokens"],
            "preemption": "recompute",
        }
        tenants = [t if "documents" in t else {**t, "shared_prefix_tokens": shared} for t in raw["workload"]["tenants"]]
        raw["workload"] = {"tenants": tenants}
    elif closed_loop == "documents":  # without prefix caching nothing is kept from earlier runs
        tenants = [{**t, "documents": {}} if "documents" in t else t for t in raw["workload"]["tenants"]]
        raw["workload"] = {"tenants": tenants}
    return raw


def with_window(raw: dict[str, Any]) -> dict[str, Any]:
    """Turn the drawn ``_window`` into a measurement window over parts of the explicit requests (by
    count, time or both; the drawn fractions of them at each end), if the run can resolve it."""
    raw = {**raw}
    kind = raw.pop("_window", None)
    warmup_frac, cooldown_frac = raw.pop("_window_fracs", (0.0, 0.0))
    if kind is None:
        return raw
    requests = raw["workload"]["tenants"][0]["arrival"]["requests"]
    metrics: dict[str, Any] = {}
    if kind in ("count", "both"):
        metrics |= {
            "warmup_requests": int(warmup_frac * len(requests)),
            "cooldown_requests": int(cooldown_frac * len(requests)),
        }
    if kind in ("time", "both"):
        last_s = requests[-1]["arrival_at_s"]
        metrics |= {"warmup_s": warmup_frac * last_s, "cooldown_s": cooldown_frac * last_s}
    windowed = {**raw, "metrics": metrics}
    try:
        resolve_window(scenario_from_mapping(windowed, "prop.yaml"), {}, "prop.yaml")
    except ConfigError:  # a window the run refuses (its end unknowable with the users, or holding no request)
        return raw
    return windowed


def assert_marked_by_the_window(rows: list[dict[str, Any]], window: dict[str, Any]) -> None:
    """Each request is measured exactly when its arrival index and time lie inside the window's bounds."""
    for row in rows:
        inside = window["from_request"] <= row["request_id"] and window["from_arrival_s"] <= row["arrival_at_s"]
        if window["to_request"] is not None:
            inside &= row["request_id"] <= window["to_request"]
        if window["to_arrival_s"] is not None:
            inside &= row["arrival_at_s"] <= window["to_arrival_s"]
        assert row["measured"] == inside, (row, window)
    assert window["num_measured"] == sum(row["measured"] for row in rows)


RUN_LIMIT_S = 60  # one run of these scenarios takes well under a second; longer means the run never ends


class RunHung(Exception):
    """A property-test run went on past RUN_LIMIT_S (a replica waiting on itself, a loop without progress)."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise RunHung in the block after ``seconds`` (where the platform has SIGALRM), so a run that
    never ends fails with its scenario shown instead of holding the suite until CI's limit."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def hung(signum: int, frame: Any) -> None:
        raise RunHung(f"the run did not end within {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def with_frontend_latency(raw: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Turn the drawn ``_frontend_latency_s`` and ``_frontend_stream_s`` into an engine profile (vLLM V1's,
    with that latency and streaming work a token) in ``tmp``."""
    raw = {**raw}
    latency_s = raw.pop("_frontend_latency_s", None)
    stream_s = raw.pop("_frontend_stream_s", None)
    if latency_s is None and stream_s is None:
        return raw
    engine = Catalogue.builtin().engine("vllm-v1").model_dump(mode="json", exclude_none=True)
    engine |= {"name": "latency", "aliases": []}
    if latency_s is not None:
        engine["frontend_fitted_latency_s"] = {"value": latency_s, "source": "property test"}
    if stream_s is not None:
        engine["frontend_per_output_token_s"] = {"value": stream_s, "source": "property test"}
    (tmp / "latency.yaml").write_text(yaml.safe_dump(engine))
    return {**raw, "cluster": {**raw["cluster"], "engine": "latency.yaml"}}


def run(raw: dict[str, Any], tmp: Path, fast_forward: bool) -> RunResult:
    raw = with_faults(
        with_window(
            with_prefix_caching(with_draft_of_the_targets_family(with_disaggregation(with_frontend_latency(raw, tmp))))
        )
    )
    scenario = scenario_from_mapping({**raw, "simulation": {"fast_forward": fast_forward}}, "prop.yaml")
    with time_limit(RUN_LIMIT_S):
        return run_scenario(LoadedScenario(scenario, "prop.yaml", tmp), tmp / ("fast" if fast_forward else "step"))


# two replicas fail at one instant: the first's retried request cuts the second's run at that instant,
# an interrupt the second's own failure must leave harmless (a fresh clone's run of this test found it)
SIMULTANEOUS_FAILURES: dict[str, Any] = {
    "name": "prop",
    "seed": 0,
    "workload": {
        "tenants": [
            {
                "name": "t",
                "arrival": {
                    "kind": "explicit",
                    "requests": [{"arrival_at_s": 0.0, "prompt_tokens": 1, "output_tokens": 1}],
                },
            }
        ]
    },
    "cluster": {
        "hardware": "H100-SXM",
        "model": "Llama-3.1-8B",
        "groups": [{"count": 1}, {"count": 1, "hardware": "A100-80GB"}],
    },
    "router": {"kind": "least_kv"},
    "scheduler": {
        "policy": "static",
        "max_num_seqs": 1,
        "max_num_batched_tokens": 64,
        "ordering": {"kind": "fcfs"},
        "slo_admission": "shed",
        "batch_wait_s": 0.0,
    },
    "kv": {
        "block_size_tokens": 1,
        "num_blocks": 45,
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
    "slo": {"ttft_s": 1.0},
    "_prefix": 0,
    "_closed_loop": True,
    "_window": None,
    "_window_fracs": (0.0, 0.0),
    "_faults": {
        "on_failure": "retry",
        "max_retries": 2,
        "repair_s": None,
        "detect_s": 0.0,
        "cold_start": {"storage_bandwidth_bytes_per_s": 1e10, "engine_init_s": 0.0},
        "kind": "scripted",
        "events": [{"at_s": 2.0, "replica": 0}, {"at_s": 2.0, "replica": 1}],
    },
    "_autoscaler": None,
    "_disagg": None,
    "speculative": None,
}


@settings(
    max_examples=int(os.environ.get("CLUSTERSIM_PROPERTY_EXAMPLES", "250")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(scenarios())
@example(SIMULTANEOUS_FAILURES)
def test_random_scenarios_keep_invariants_and_fast_equals_step(raw: dict[str, Any]) -> None:
    """Every request's record is identical in both modes, and every summary figure equal to rounding."""
    with tempfile.TemporaryDirectory() as tmp:
        fast = run(raw, Path(tmp), True)
        step = run(raw, Path(tmp), False)
        fast_rows = sorted(pq.read_table(fast.out_dir / "requests.parquet").to_pylist(), key=lambda r: r["request_id"])
        step_rows = sorted(pq.read_table(step.out_dir / "requests.parquet").to_pylist(), key=lambda r: r["request_id"])
        fast_gaps = pq.read_table(fast.out_dir / "itl.parquet").to_pylist()
        step_gaps = pq.read_table(step.out_dir / "itl.parquet").to_pylist()
    assert fast_rows == step_rows
    if "window" in fast.summary:
        assert_marked_by_the_window(fast_rows, fast.summary["window"])
    # every bin holds the same gaps in both modes: counts, least and greatest exactly, sums to rounding
    assert [{**g, "sum_s": 0} for g in fast_gaps] == [{**g, "sum_s": 0} for g in step_gaps]
    for fast_bin, step_bin in zip(fast_gaps, step_gaps, strict=True):
        assert math.isclose(fast_bin["sum_s"], step_bin["sum_s"], rel_tol=1e-9)
    assert_same_summary(fast.summary, step.summary)


COUNTEREXAMPLES = json.loads((Path(__file__).parent / "data" / "property_counterexamples.json").read_text())


@pytest.mark.parametrize("raw", COUNTEREXAMPLES, ids=[f"found-{i}" for i in range(len(COUNTEREXAMPLES))])
def test_counterexamples_hypothesis_found(raw: dict[str, Any]) -> None:
    """Each scenario on which hypothesis once found a bug (causality, run cuts, stalls), replayed every run."""
    test_random_scenarios_keep_invariants_and_fast_equals_step.hypothesis.inner_test(raw)  # type: ignore[attr-defined]
