"""The run summary, computed from the Parquet event logs alone (so analysis can recompute it)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from clustersim.config.scenario import SLO

PERCENTILES = (50, 90, 99)


def distribution(values: NDArray[np.float64]) -> dict[str, float | None]:
    """``mean`` and the p50/p90/p99 of ``values`` (linear interpolation); ``None`` when empty."""
    if values.size == 0:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    result: dict[str, float | None] = {"mean": float(values.mean())}
    for p, value in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        result[f"p{p}"] = float(value)
    return result


def _col(table: pa.Table, name: str) -> NDArray[Any]:
    values: NDArray[Any] = table.column(name).to_numpy(zero_copy_only=False)
    return values


def request_latencies(requests: pa.Table) -> dict[str, NDArray[np.float64]]:
    """Per completed request: ``ttft_s``, ``tpot_s`` (NaN for single-token outputs), ``e2e_s``, ``queue_s``."""
    done = requests.filter(pc.equal(requests.column("status"), "completed"))
    arrival = _col(done, "arrival_at_s").astype(np.float64)
    first_token = _col(done, "first_token_at_s").astype(np.float64)
    finished = _col(done, "finished_at_s").astype(np.float64)
    scheduled = _col(done, "first_scheduled_at_s").astype(np.float64)
    outputs = _col(done, "output_tokens").astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs > 1, (finished - first_token) / (outputs - 1), np.nan)
    return {
        "ttft_s": first_token - arrival,
        "tpot_s": tpot,
        "e2e_s": finished - arrival,
        "queue_s": scheduled - arrival,
    }


def _slo_met(latencies: dict[str, NDArray[np.float64]], slo: SLO) -> NDArray[np.bool_]:
    met = np.ones(latencies["ttft_s"].size, dtype=bool)
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        target = getattr(slo, name)
        if target is not None:
            values = latencies[name]
            met &= np.isnan(values) | (values <= target)  # single-token outputs have no TPOT to miss
    return met


def _request_summary(requests: pa.Table, makespan_s: float, slo: SLO | None) -> dict[str, Any]:
    status = _col(requests, "status")
    counts = {s: int(np.count_nonzero(status == s)) for s in ("completed", "rejected", "unfinished")}
    latencies = request_latencies(requests)
    emitted = int(pc.sum(requests.column("num_emitted_tokens")).as_py() or 0)
    summary: dict[str, Any] = {
        "num_requests": {"arrived": requests.num_rows, **counts},
        **{name: distribution(values[~np.isnan(values)]) for name, values in latencies.items()},
        "output_tokens": emitted,
        "output_tokens_per_s": emitted / makespan_s if makespan_s > 0 else None,
        "requests_per_s": counts["completed"] / makespan_s if makespan_s > 0 else None,
    }
    if slo is not None:
        num_met = int(np.count_nonzero(_slo_met(latencies, slo)))
        summary["slo"] = {
            "targets": slo.model_dump(exclude_none=True),
            "num_met": num_met,
            "attainment_frac": num_met / requests.num_rows if requests.num_rows else None,
            "goodput_requests_per_s": num_met / makespan_s if makespan_s > 0 else None,
        }
    return summary


def summarize(
    requests: pa.Table, steps: pa.Table, makespan_s: float, num_replicas: int, slo: SLO | None
) -> dict[str, Any]:
    """The run's ``summary.json``: request counts, latency percentiles, throughput, utilisation."""
    summary: dict[str, Any] = {"makespan_s": makespan_s, **_request_summary(requests, makespan_s, slo)}
    tenants = sorted(set(_col(requests, "tenant").tolist()))
    if len(tenants) > 1:
        summary["tenants"] = {
            t: _request_summary(requests.filter(pc.equal(requests.column("tenant"), t)), makespan_s, slo)
            for t in tenants
        }
    replica = _col(steps, "replica")
    duration = _col(steps, "duration_s")
    num_steps = _col(steps, "num_steps")
    num_seqs = _col(steps, "num_seqs")
    busy = [float(duration[replica == r].sum()) for r in range(num_replicas)]
    used = _col(steps, "kv_used_blocks").astype(np.float64)
    total = _col(steps, "kv_total_blocks").astype(np.float64)
    summary["replicas"] = {
        "num_steps": int(num_steps.sum()),
        "busy_frac": [b / makespan_s if makespan_s > 0 else None for b in busy],
        "mean_busy_frac": (sum(busy) / (num_replicas * makespan_s)) if makespan_s > 0 else None,
        "mean_batch_seqs": float((num_seqs * num_steps).sum() / num_steps.sum()) if num_steps.size else None,
        "num_preemptions": int(_col(steps, "num_preemptions").sum()),
        "kv_peak_used_frac": float((used / total).max()) if used.size else 0.0,
    }
    return summary
