"""Simulate one measured setting: a scenario built from a measurements row, run with given profiles.

The scenario is the benchmark the row describes, on one replica of the row's GPU, model and
parallelism, with fixed prompt and output lengths:

- ``batch``: ``load`` requests, all arriving at t=0 (``max_num_seqs`` at least ``load`` and a token
  budget for every prompt at once, so the batch runs together, as a benchmark's one ``generate`` call);
- ``concurrency``: a closed loop of ``load`` users with no think time, until ``num_requests``
  requests (at least 4 per user) have been sent; ``max_num_seqs`` at least ``load``;
- ``rate_per_s``: Poisson arrivals at ``load`` per second until ``num_requests`` have arrived.

The scheduler policy is the engine's own (``vllm_v1`` for ``vllm-v1``, ...), with ``max_num_seqs`` at
least 256 and a budget of at least 8192 tokens;
``--set``-style overrides apply to every row's scenario after these defaults. The seed is 0, so a
row's prediction is a deterministic function of the profiles. Predictions are the run summary's
figures, which are those of the usual benchmark tools: the mean TTFT over completed requests, the
mean over every inter-token gap (``itl_s``) and output tokens over the run's makespan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustersim.calibration.measurements import MAX_INTEGER, Measurement, Metric
from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario, apply_overrides, scenario_from_mapping
from clustersim.config.profiles import EngineProfile, HardwareProfile, ModelProfile
from clustersim.errors import ClusterSimError
from clustersim.runner import run_scenario

DEFAULT_NUM_REQUESTS = 200
MIN_REQUESTS_PER_USER = 4
MIN_MAX_NUM_SEQS = 256  # vLLM's default
MIN_BATCHED_TOKENS = 8192
SEED = 0

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


def _workload(row: Measurement, num_requests: int) -> tuple[dict[str, Any], dict[str, Any], int]:
    """The row's tenant, stop condition and the number of sequences that run together."""
    prompt, output = row.prompt_tokens, row.output_tokens
    lengths = {
        "prompt_tokens": {"kind": "fixed", "tokens": prompt},
        "output_tokens": {"kind": "fixed", "tokens": output},
    }
    if row.load_kind == "batch":
        count = int(row.load)
        request = {"arrival_at_s": 0.0, "prompt_tokens": prompt, "output_tokens": output}
        arrival: dict[str, Any] = {"kind": "explicit", "requests": [request] * count}
        return {"name": "benchmark", "arrival": arrival}, {}, count
    if row.load_kind == "concurrency":
        users = int(row.load)
        arrival = {"kind": "closed_loop", "num_users": users, "think_time": {"kind": "fixed", "time_s": 0.0}}
        stop = {"max_requests": min(MAX_INTEGER, max(num_requests, MIN_REQUESTS_PER_USER * users))}
        return {"name": "benchmark", "arrival": arrival, **lengths}, stop, users
    arrival = {"kind": "poisson", "rate_per_s": row.load}
    return {"name": "benchmark", "arrival": arrival, **lengths}, {"max_requests": num_requests}, 1


def row_mapping(row: Measurement, engine: str, num_requests: int = DEFAULT_NUM_REQUESTS) -> dict[str, Any]:
    """The scenario (as a raw mapping) of one measured setting; ``engine`` names the engine profile."""
    tenant, stop, together = _workload(row, num_requests)
    max_num_seqs = max(MIN_MAX_NUM_SEQS, together)
    prompt_budget = row.prompt_tokens * (together if row.load_kind == "batch" else 1)
    budget = min(MAX_INTEGER, max(MIN_BATCHED_TOKENS, max_num_seqs, prompt_budget))
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
        "workload": {"tenants": [tenant]},
        "cluster": cluster,
        "scheduler": {"max_num_seqs": max_num_seqs, "max_num_batched_tokens": budget},
    }
    if stop:
        raw["stop"] = stop
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
    }
