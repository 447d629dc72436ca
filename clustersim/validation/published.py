"""Replay published end-to-end serving results as scenarios and compare what they measured.

Each row of ``published/serving_results.csv`` has a scenario ``scenarios/published/<row id>.yaml``. This
module runs it and measures the row's metric the way the publication did:

``tokens_per_s`` (MLPerf Offline)
    Steady-state output tokens per second of the whole system. MLPerf Offline queues every sample at once
    and runs >= 10 minutes, so ramp-up and the draining tail are a negligible part of its figure. A
    simulated run is shorter, so it is measured over a window: per replica, from half the time the
    replica's queue stayed non-empty to the end of the last step that left requests waiting (the replica
    was saturated all along); tokens are counted at the end of the step that emits them, a step straddling
    a window edge counting pro rata. The replicas' rates are summed.
``completed_tokens_per_s`` (MLPerf Server)
    Output tokens per second while Poisson arrivals keep coming: tokens emitted from half the
    arrival span to the last arrival, over that time (the first half fills the batch; after the last
    arrival the run only drains). A stable system emits the offered load; this checks it is stable.
``ttft`` (TensorRT-LLM batch-1 latency table)
    Time to first token of the single request, in ms: one context step plus the engine's step overhead.
``output_tokens_per_s`` (TensorRT-LLM v0.6.1 peak-throughput table)
    Output tokens over the makespan of one static batch, per GPU (the table's column is
    "Throughput (out tok/s/GPU)").
``mean_e2e_latency`` (vLLM ``benchmark_latency``)
    Mean end-to-end latency in ms of the requests of one batch (they all finish together).
``request_throughput`` (vLLM ``benchmark_throughput``)
    Completed requests over the makespan, tail included, as the benchmark divides by the wall time of the
    whole ``generate`` call.

Server rows also carry the mean TTFT and TPOT from their MLPerf log summary (``mlperf_v4.1/``) as extra,
informational comparisons (``<row id>/mean_ttft``, ``/mean_tpot``), measured over requests arriving in the
same window as the throughput.
"""

from __future__ import annotations

import csv
import math
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.typing import NDArray

from clustersim.config.catalogue import Catalogue, builtin_data_dir
from clustersim.config.loader import load_scenario
from clustersim.errors import ConfigError
from clustersim.metrics import request_latencies
from clustersim.runner import run_scenario

Metric = Literal[
    "tokens_per_s",
    "completed_tokens_per_s",
    "ttft",
    "output_tokens_per_s",
    "mean_e2e_latency",
    "request_throughput",
    "mean_ttft",
    "mean_tpot",
]
METRICS: tuple[str, ...] = get_args(Metric)
WARMUP_FRAC = 0.5  # the first half of a saturated (or arrival) span is warm-up
TARGET_PCT = 15.0
CSV_COLUMNS = ("id", "source", "engine", "model", "gpu", "n_gpu", "metric", "value", "unit")

# MLPerf v4.1 log summaries of the CSV's Server rows (the CSV's source column abbreviates some paths)
SERVER_LOGS = {
    "mlperf41_h100x8_srv": "NVIDIA__DGX-H100_H100-SXM-80GBx8_TRT__llama2-70b-99__Server.txt",
    "mlperf41_h200x8_srv": "NVIDIA__H200-SXM-141GBx8_TRT__llama2-70b-99__Server.txt",
    "mlperf41_h200x1_srv": "NVIDIA__H200-SXM-141GB-CTSx1_TRT__llama2-70b-99__Server.txt",
}
LOG_FIELDS = {"mean_ttft": "Mean First Token latency (ns)", "mean_tpot": "Mean Time to Output Token (ns)"}

# Rows known to miss the 15% target: the bound the tests hold them to (the observed gap plus a margin, a
# regression guard rather than an accuracy claim) and why they miss (README, "### Validation").
KNOWN_GAPS: dict[str, tuple[float, str]] = {
    "mlperf41_mi300x1_off": (75.0, "MI300X reuses H100-fitted kernel fractions; its 2024 ROCm FP8 stack got far less"),
    "mlperf41_mi300x8_off": (75.0, "as mlperf41_mi300x1_off"),
    "mlperf41_h100nvlx4_off": (40.0, "H100-NVL is a 350-400 W card: datasheet peaks are not sustained"),
    "mlperf41_h200x1_srv": (
        27.0,
        "a 1000 W custom-cooled H200 (CTS), 15% more per GPU than the round's 700 W H200, whose profile this is",
    ),
    "trtllm061_a100_l7b_tput": (
        28.0,
        "no corpus row has TensorRT-LLM on Ampere: its scales there are its engine factor times Ampere's family factor",
    ),
    "trtllm061_a100_l70b_ttft2048": (24.0, "as trtllm061_a100_l7b_tput"),
    "trtllm061_a100_l7b_ttft128": (
        25.0,
        "as trtllm061_a100_l7b_tput: a batch-1 128-token prefill streams the weights at TensorRT-LLM's fitted "
        "memory factor (0.76, from its Hopper and Blackwell rows) times Ampere's (0.91)",
    ),
    "mlperf40_h100x2_off": (
        28.0,
        "round 4.0's TensorRT-LLM (early 2024): the same system gets 10.7% more per GPU in round 4.1 "
        "(mlperf41_h100x8_off), and the profile has no release term for TensorRT-LLM before 0.17",
    ),
    "trtllm061_h100_l7b_ttft2048": (
        25.0,
        "TensorRT-LLM 0.6.1 (2023) has no release term; today's kernels give whole H100 steps of 2,048-token "
        "prompts within 4% of the model (validation/kernels/layers)",
    ),
}


@dataclass(frozen=True)
class PublishedRow:
    """One published measurement (a row of ``serving_results.csv``, or a value from an MLPerf log)."""

    row_id: str
    source: str
    engine: str
    model: str
    gpu: str
    num_gpus: int
    metric: Metric
    value: float
    unit: str


@dataclass(frozen=True)
class Comparison:
    """Predicted vs published for one row; ``error_pct`` is signed (positive: the model over-predicts)."""

    row: PublishedRow
    predicted: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.row.value) / self.row.value


def _parse_metric(value: str, where: str) -> Metric:
    for metric in METRICS:
        if metric == value:
            return metric  # type: ignore[return-value]
    raise ConfigError(where, "metric", f"unknown metric '{value}'; known: {', '.join(METRICS)}")


def load_published_rows(csv_path: Path) -> tuple[PublishedRow, ...]:
    """The rows of ``serving_results.csv`` (one-line ``ConfigError`` for a malformed file)."""
    if not csv_path.is_file():
        raise ConfigError(str(csv_path), "", "file not found (expected published/serving_results.csv)")
    with csv_path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(str(csv_path), "header", f"missing columns {', '.join(missing)}")
        rows = []
        for line, raw in enumerate(reader, start=2):
            where = f"{csv_path}:{line}"
            try:
                value, num_gpus = float(raw["value"]), int(raw["n_gpu"])
            except ValueError as exc:
                raise ConfigError(where, "value/n_gpu", f"not a number ({exc})") from exc
            rows.append(
                PublishedRow(
                    raw["id"],
                    raw["source"],
                    raw["engine"],
                    raw["model"],
                    raw["gpu"],
                    num_gpus,
                    _parse_metric(raw["metric"], where),
                    value,
                    raw["unit"],
                )
            )
    return tuple(rows)


def log_rows(row: PublishedRow, logs_dir: Path) -> tuple[PublishedRow, ...]:
    """Mean TTFT and TPOT (ms) from the MLPerf log summary of a Server row, if it has one."""
    name = SERVER_LOGS.get(row.row_id)
    if name is None or not (logs_dir / name).is_file():
        return ()
    text = (logs_dir / name).read_text(encoding="utf-8")
    extra = []
    for metric, label in LOG_FIELDS.items():
        found = re.search(re.escape(label) + r"\s*:\s*([0-9.]+)", text)
        if found is None:
            raise ConfigError(str(logs_dir / name), label, "field missing from the log summary")
        extra.append(
            PublishedRow(
                f"{row.row_id}/{metric}",
                f"{row.source} ({name})",
                row.engine,
                row.model,
                row.gpu,
                row.num_gpus,
                _parse_metric(metric, name),
                float(found.group(1)) / 1e6,
                "ms",
            )
        )
    return tuple(extra)


def _col(table: pa.Table, name: str) -> NDArray[Any]:
    values: NDArray[Any] = table.column(name).to_numpy(zero_copy_only=False)
    return values


def saturated_tokens_per_s(requests: pa.Table, steps: pa.Table, num_replicas: int) -> float:
    """Sum over replicas of the output rate while that replica had requests waiting, after a warm-up.

    A replica is saturated until it admits the last request that had to wait. Its window starts at
    the first admission in the second half of that span, so both ends are admissions: step
    boundaries whether or not runs of decode steps were fast-forwarded, and the window holds whole
    step rows (the figure does not depend on ``simulation.fast_forward``).
    """
    routed = _col(requests, "replica")
    arrival = _col(requests, "arrival_at_s").astype(np.float64)
    admitted = np.asarray(pc.fill_null(requests.column("first_scheduled_at_s"), np.nan), dtype=np.float64)
    replica = _col(steps, "replica")
    started = _col(steps, "started_at_s").astype(np.float64)
    emitted = (_col(steps, "num_emitted_tokens") * _col(steps, "num_steps")).astype(np.float64)
    rate = 0.0
    for r in range(num_replicas):
        mine = (routed == r) & ~np.isnan(admitted)
        waited = mine & (admitted > arrival)
        if not waited.any():
            continue
        until_s = float(admitted[waited].max())
        start_s = float(admitted[mine & (admitted >= WARMUP_FRAC * until_s)].min())
        if until_s <= start_s:
            continue
        inside = (replica == r) & (started >= start_s) & (started < until_s)
        rate += float(emitted[inside].sum()) / (until_s - start_s)
    return rate


def completed_tokens_per_s(requests: pa.Table, start_s: float, end_s: float) -> float:
    """Output tokens of the requests that completed in ``[start_s, end_s]``, per second (MLPerf's
    "completed tokens per second", over a window of the run)."""
    done = requests.filter(pc.equal(requests.column("status"), "completed"))
    finished = _col(done, "finished_at_s").astype(np.float64)
    inside = (finished >= start_s) & (finished <= end_s)
    return float(_col(done, "output_tokens")[inside].sum()) / (end_s - start_s)


def _window_requests(requests: pa.Table, start_s: float, end_s: float) -> pa.Table:
    arrival = requests.column("arrival_at_s")
    keep = pc.and_(pc.greater_equal(arrival, start_s), pc.less_equal(arrival, end_s))
    return requests.filter(keep)


def measure(metric: Metric, requests: pa.Table, steps: pa.Table, num_replicas: int, num_gpus: int) -> float:
    """The value of ``metric`` in the run whose logs are ``requests`` and ``steps`` (units as published)."""
    arrivals = _col(requests, "arrival_at_s").astype(np.float64)
    finished = _col(requests, "finished_at_s").astype(np.float64)
    makespan_s = float(np.nanmax(finished))
    window = (WARMUP_FRAC * float(arrivals.max()), float(arrivals.max()))
    if metric == "tokens_per_s":
        return saturated_tokens_per_s(requests, steps, num_replicas)
    if metric == "completed_tokens_per_s":
        return completed_tokens_per_s(requests, *window)
    if metric in ("mean_ttft", "mean_tpot"):
        latencies = request_latencies(_window_requests(requests, *window))
        values = latencies["ttft_s" if metric == "mean_ttft" else "tpot_s"]
        return 1e3 * float(np.nanmean(values))
    if metric in ("ttft", "mean_e2e_latency"):
        latencies = request_latencies(requests)
        return 1e3 * float(latencies["ttft_s" if metric == "ttft" else "e2e_s"].mean())
    if metric == "output_tokens_per_s":
        emitted = float(pc.sum(requests.column("num_emitted_tokens")).as_py() or 0)
        return emitted / makespan_s / num_gpus
    completed = int(pc.sum(pc.equal(requests.column("status"), "completed")).as_py() or 0)
    return completed / makespan_s


def scenario_path(row_id: str, scenarios_dir: Path | None = None) -> Path:
    """``scenarios/published/<row id>.yaml`` (built-in unless ``scenarios_dir`` is given)."""
    base = scenarios_dir if scenarios_dir is not None else builtin_data_dir("scenarios") / "published"
    return base / f"{row_id.split('/')[0]}.yaml"


def run_row(
    row: PublishedRow,
    extra: Sequence[PublishedRow],
    out_dir: Path,
    scenarios_dir: Path | None = None,
    catalogue: Catalogue | None = None,
) -> list[Comparison]:
    """Run a row's scenario into ``out_dir`` and compare the row (and its log extras) with the prediction."""
    path = scenario_path(row.row_id, scenarios_dir)
    if not path.is_file():
        raise ConfigError(str(path), "", f"no scenario for published row '{row.row_id}'")
    loaded = load_scenario(path)
    result = run_scenario(loaded, out_dir, catalogue)
    requests = pq.read_table(result.out_dir / "requests.parquet")
    steps = pq.read_table(result.out_dir / "steps.parquet")
    replicas = loaded.scenario.cluster.num_replicas
    return [Comparison(r, measure(r.metric, requests, steps, replicas, r.num_gpus)) for r in (row, *extra)]


def run_published(
    data_dir: Path,
    out_dir: Path | None = None,
    row_ids: Sequence[str] | None = None,
    scenarios_dir: Path | None = None,
) -> list[Comparison]:
    """Run the scenario of every published row (or of ``row_ids``) and compare; runs go under ``out_dir``."""
    published = data_dir / "published" if (data_dir / "published").is_dir() else data_dir
    rows = load_published_rows(published / "serving_results.csv")
    if row_ids is not None:
        unknown = sorted(set(row_ids) - {r.row_id for r in rows})
        if unknown:
            raise ConfigError(str(published / "serving_results.csv"), "id", f"no row '{unknown[0]}'")
        rows = tuple(r for r in rows if r.row_id in set(row_ids))
    catalogue = Catalogue.builtin()
    comparisons: list[Comparison] = []
    with tempfile.TemporaryDirectory(prefix="clustersim-published-") as scratch:
        base = out_dir if out_dir is not None else Path(scratch)
        for row in rows:
            extra = log_rows(row, published / "mlperf_v4.1")
            comparisons += run_row(row, extra, base / row.row_id, scenarios_dir, catalogue)
    return comparisons


def format_comparisons(comparisons: Sequence[Comparison]) -> str:
    """An aligned table: row, metric, published, predicted, signed error and whether it is within target."""
    lines = [f"{'row':<34} {'metric':<23} {'published':>10} {'predicted':>10} {'unit':<7} {'error':>8}  within"]
    for c in comparisons:
        informational = "/" in c.row.row_id
        bound = KNOWN_GAPS.get(c.row.row_id)
        if informational:
            verdict = "info"
        elif abs(c.error_pct) <= TARGET_PCT:
            verdict = f"<= {TARGET_PCT:.0f}%"
        else:
            verdict = f"NO (known: {bound[1]})" if bound else "NO"
        lines.append(
            f"{c.row.row_id:<34} {c.row.metric:<23} {c.row.value:>10.4g} {c.predicted:>10.4g} {c.row.unit:<7} "
            f"{c.error_pct:>+7.1f}%  {verdict}"
        )
    scored = [c for c in comparisons if "/" not in c.row.row_id]
    if scored:
        inside = sum(abs(c.error_pct) <= TARGET_PCT for c in scored)
        mape = sum(abs(c.error_pct) for c in scored) / len(scored)
        lines.append(f"{inside} of {len(scored)} rows within {TARGET_PCT:.0f}%; mean absolute error {mape:.1f}%")
    return "\n".join(lines)


def within_bound(comparison: Comparison) -> bool:
    """Whether a row meets its bound: the 15% target, or its documented larger bound in ``KNOWN_GAPS``."""
    bound = KNOWN_GAPS.get(comparison.row.row_id, (TARGET_PCT, ""))[0]
    return math.isfinite(comparison.predicted) and abs(comparison.error_pct) <= bound
