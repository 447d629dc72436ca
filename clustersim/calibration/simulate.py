"""Simulate one measured setting: a scenario built from a measurements row, run with given profiles.

The scenario is the benchmark the row describes, on one replica of the row's GPU, model and
parallelism, with fixed prompt and output lengths:

- ``batch``: ``load`` requests, all arriving at t=0 (``max_num_seqs`` at least ``load`` and a token
  budget for every prompt at once, so the batch runs together, as a benchmark's one ``generate`` call);
- ``concurrency``: a closed loop of ``load`` users with no think time, until ``num_requests``
  requests (at least 4 per user) have been sent; ``max_num_seqs`` at least ``load``;
- ``rate_per_s``: Poisson arrivals at ``load`` per second until ``num_requests`` have arrived
  (gamma inter-arrival times when the row's ``interarrival_cv`` is not 1).

A row read from a benchmark tool's file simulates as many requests as the benchmark completed. A row
that lists its requests replays them: a batch sends them all at t=0, a ``rate_per_s`` row at the
file's send times (or, without them, at seeded draws of its rate: gamma gaps of its CV, evenly
spaced for CV 0), each with its own prompt and output lengths in the file's order; a
``concurrency`` row is a closed loop whose lengths are drawn from the requests' (the send times of a
closed loop follow from its latencies, so they are not replayed).

The scheduler policy is the engine's own (``vllm_v1`` for ``vllm-v1``, ...), with ``max_num_seqs`` at
least 256 and a budget of at least 8192 tokens;
``--set``-style overrides apply to every row's scenario after these defaults. The seed is 0, so a
row's prediction is a deterministic function of the profiles. Predictions are the run summary's
figures, which are those of the usual benchmark tools: the mean TTFT over completed requests, the
mean over every inter-token gap (``itl_s``) and output tokens over the run's makespan, and the p99
of TTFT and of the inter-token gaps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clustersim.calibration.measurements import MAX_INTEGER, Measurement, Metric, ReplayedRequest
from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario, apply_overrides, scenario_from_mapping
from clustersim.config.profiles import EngineProfile, HardwareProfile, ModelProfile
from clustersim.errors import ClusterSimError
from clustersim.runner import run_scenario
from clustersim.runplan import plan_run

DEFAULT_NUM_REQUESTS = 200
MIN_REQUESTS_PER_USER = 4
MIN_MAX_NUM_SEQS = 256  # vLLM's default
MIN_BATCHED_TOKENS = 8192
SEED = 0
MIN_GAMMA_CV = 1e-3  # the schema's lowest gamma CV: a constant-interval rate without listed requests

Prediction = dict[Metric, float | None]


@dataclass(frozen=True)
class RowProfiles:
    """The profiles one row is simulated with."""

    hardware: HardwareProfile
    model: ModelProfile
    engine: EngineProfile


@dataclass(frozen=True)
class PinnedCatalogue(Catalogue):
    """A catalogue that answers every lookup with the given profiles (a fit's candidate values),
    without reading any file."""

    pinned: RowProfiles | None = None

    def _pinned(self) -> RowProfiles:
        assert self.pinned is not None, "PinnedCatalogue needs its profiles"
        return self.pinned

    def hardware(self, name: str, source: str = "scenario", field_path: str = "cluster.hardware") -> HardwareProfile:
        return self._pinned().hardware

    def model(self, name: str, source: str = "scenario", field_path: str = "cluster.model") -> ModelProfile:
        return self._pinned().model

    def engine(self, name: str, source: str = "scenario", field_path: str = "cluster.engine") -> EngineProfile:
        return self._pinned().engine


@dataclass(frozen=True)
class Traffic:
    """A row's tenant, its stop condition (empty: none), the number of sequences that run together
    and the prompt tokens one step must fit."""

    tenant: dict[str, Any]
    stop: dict[str, Any]
    num_together: int
    prompt_budget_tokens: int


def _arrival(row: Measurement) -> dict[str, Any]:
    """A ``rate_per_s`` row's arrival process: Poisson, or gamma for another inter-arrival CV."""
    if row.interarrival_cv == 1.0:
        return {"kind": "poisson", "rate_per_s": row.load}
    return {"kind": "gamma", "rate_per_s": row.load, "cv": max(row.interarrival_cv, MIN_GAMMA_CV)}


def _workload(row: Measurement, num_requests: int) -> Traffic:
    """The traffic of a row with fixed lengths (``num_requests``: unless the row says how many)."""
    if row.requests is not None:
        return _replay(row, row.requests)
    prompt, output = row.prompt_tokens, row.output_tokens
    lengths = {
        "prompt_tokens": {"kind": "fixed", "tokens": prompt},
        "output_tokens": {"kind": "fixed", "tokens": output},
    }
    if row.load_kind == "batch":
        count = int(row.load)
        request = {"arrival_at_s": 0.0, "prompt_tokens": prompt, "output_tokens": output}
        arrival: dict[str, Any] = {"kind": "explicit", "requests": [request] * count}
        return Traffic({"name": "benchmark", "arrival": arrival}, {}, count, prompt * count)
    if row.load_kind == "concurrency":
        users = int(row.load)
        arrival = {"kind": "closed_loop", "num_users": users, "think_time": {"kind": "fixed", "time_s": 0.0}}
        count = row.num_requests or max(num_requests, MIN_REQUESTS_PER_USER * users)
        stop = {"max_requests": min(MAX_INTEGER, count)}
        return Traffic({"name": "benchmark", "arrival": arrival, **lengths}, stop, users, prompt)
    stop = {"max_requests": row.num_requests or num_requests}
    return Traffic({"name": "benchmark", "arrival": _arrival(row), **lengths}, stop, 1, prompt)


def arrival_times_s(row: Measurement, count: int) -> list[float]:
    """When a replayed row's requests arrive: all at 0 for a batch, the file's send times where it
    gives them, else ``count`` draws of the row's rate (inter-arrival CV 0: evenly spaced; else gamma
    gaps of that CV, Poisson at 1) from the fixed seed, the first at 0."""
    given = row.requests
    if row.load_kind == "batch":
        return [0.0] * count
    if given is not None and all(r[0] is not None for r in given):
        return [float(r[0] or 0.0) for r in given]
    cv = row.interarrival_cv
    if cv == 0:
        gaps = np.full(count - 1, 1.0 / row.load)
    else:
        shape = 1.0 / cv**2
        rng = np.random.default_rng(np.random.SeedSequence(SEED))
        gaps = rng.gamma(shape, 1.0 / (row.load * shape), count - 1)
    return [0.0, *(float(t) for t in np.cumsum(gaps))]


def _replay(row: Measurement, requests: tuple[ReplayedRequest, ...]) -> Traffic:
    """The traffic of a row that lists its requests: the same lengths (and arrivals where known)."""
    prompts, outputs = [r[1] for r in requests], [r[2] for r in requests]
    stop = {"max_requests": len(requests)}
    if row.load_kind == "concurrency":  # a closed loop: lengths drawn from the requests' own
        users = int(row.load)
        tenant = {
            "name": "benchmark",
            "arrival": {"kind": "closed_loop", "num_users": users, "think_time": {"kind": "fixed", "time_s": 0.0}},
            "prompt_tokens": {"kind": "empirical", "values": prompts},
            "output_tokens": {"kind": "empirical", "values": outputs},
        }
        return Traffic(tenant, stop, users, max(prompts))
    times = arrival_times_s(row, len(requests))
    order = sorted(range(len(requests)), key=lambda i: times[i])  # stable: ties keep the file's order
    explicit = [{"arrival_at_s": times[i], "prompt_tokens": prompts[i], "output_tokens": outputs[i]} for i in order]
    arrival = {"kind": "explicit", "requests": explicit}
    if row.load_kind == "batch":
        return Traffic({"name": "benchmark", "arrival": arrival}, {}, len(requests), sum(prompts))
    return Traffic({"name": "benchmark", "arrival": arrival}, {}, 1, max(prompts))


def row_mapping(row: Measurement, engine: str, num_requests: int = DEFAULT_NUM_REQUESTS) -> dict[str, Any]:
    """The scenario (as a raw mapping) of one measured setting; ``engine`` names the engine profile."""
    traffic = _workload(row, num_requests)
    max_num_seqs = max(MIN_MAX_NUM_SEQS, traffic.num_together)
    budget = min(MAX_INTEGER, max(MIN_BATCHED_TOKENS, max_num_seqs, traffic.prompt_budget_tokens))
    cluster: dict[str, Any] = {
        "num_replicas": 1,
        "hardware": row.hardware,
        "model": row.model,
        "tensor_parallel": row.tensor_parallel,
        "engine": engine,
    }
    if row.weight_precision is not None:
        cluster["weight_precision"] = row.weight_precision
    raw: dict[str, Any] = {
        "name": f"calibrate-line{row.line}",
        "seed": SEED,
        "workload": {"tenants": [traffic.tenant]},
        "cluster": cluster,
        "scheduler": {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": budget},
    }
    if traffic.stop:
        raw["stop"] = traffic.stop
    return raw


def row_scenario(
    row: Measurement,
    engine: str,
    csv_path: Path,
    overrides: Sequence[str] = (),
    num_requests: int = DEFAULT_NUM_REQUESTS,
) -> LoadedScenario:
    """The validated scenario of a row; problems name the row's line (``data.csv:7: field: ...``)."""
    source = f"{csv_path}:{row.line}"
    raw = row_mapping(row, engine, num_requests)
    if overrides:
        raw = apply_overrides(raw, overrides, source)
        source = f"{source} (with --set)"
    return LoadedScenario(scenario_from_mapping(raw, source), source, csv_path.resolve().parent)


def batch_kv_note(row: Measurement, loaded: LoadedScenario, profiles: RowProfiles) -> str | None:
    """A note for a batch row whose whole batch does not fit the replicas' KV cache at its longest
    (every sequence at prompt + output tokens): the model then runs it in more than one wave, where a
    static-batch benchmark that sized its cache for the batch ran it in one. None when it fits."""
    if row.load_kind != "batch":
        return None
    plan = plan_run(loaded, PinnedCatalogue(Catalogue.builtin().root, pinned=profiles))
    held = sum(g.num_kv_blocks * plan.scenario.kv.block_size_tokens * g.count for g in plan.groups)
    count = int(row.load)
    given = row.requests  # a replayed batch: its own lengths
    needed = sum(r[1] + r[2] for r in given) if given else count * (row.prompt_tokens + row.output_tokens)
    if needed <= held:
        return None
    fraction = plan.scenario.kv.gpu_memory_frac
    at = f" at gpu_memory_frac {fraction:g}" if fraction is not None else ""
    return (
        f"{loaded.source}: a batch of {count:,} needs up to {needed:,} tokens of KV cache and the simulated "
        f"replicas hold {held:,}{at}, so the model runs it in more than one wave; "
        "if the benchmark held the whole batch at once, give it the memory it used (--set kv.gpu_memory_frac=...)"
    )


def predict(loaded: LoadedScenario, profiles: RowProfiles, scratch_dir: Path) -> Prediction:
    """Run a row's scenario with ``profiles`` (its logs go to ``scratch_dir``, reused) and read its figures."""
    catalogue = PinnedCatalogue(Catalogue.builtin().root, pinned=profiles)
    summary = run_scenario(loaded, scratch_dir, catalogue).summary
    counts = summary["num_requests"]
    if counts["completed"] != counts["arrived"]:
        raise ClusterSimError(
            f"{loaded.source}: only {counts['completed']} of {counts['arrived']} requests completed "
            f"({counts['rejected']} rejected, {counts['unfinished']} unfinished): the setting does not fit "
            "the simulated replica (check the model's length limit and the KV cache)"
        )
    return {
        "ttft_s": summary["ttft_s"]["mean"],
        "itl_s": summary["itl_s"]["mean"],
        "output_tokens_per_s": summary["output_tokens_per_s"],
        "ttft_p99_s": summary["ttft_s"]["p99"],
        "itl_p99_s": summary["itl_s"]["p99"],
    }
