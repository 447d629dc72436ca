"""The run summary, computed from the Parquet event logs alone (so analysis can recompute it).

Several tenants add ``tenants`` (the request summary of each, held to the tenant's own SLO) and
``fairness``: Jain's index ``(sum x)^2 / (n sum x^2)`` (1 when all equal, 1/n when one tenant
gets everything) over the tenants' mean normalised latency (E2E seconds per output token of
completed requests; tenants without a completed request are left out) and, with SLOs, over their
SLO attainment. ``replicas.per_replica`` breaks the utilisation down by replica.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from clustersim.config.base import SLO
from clustersim.itl import GapBins
from clustersim.logstats import MemoryTotals, StepTotals
from clustersim.requeststats import RequestGroup, RequestTotals

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


def is_value(column: pa.ChunkedArray | pa.Array, value: str) -> NDArray[np.bool_]:
    """Where a text column equals ``value`` (compared in Arrow: no Python string per row)."""
    return np.asarray(pc.equal(column, value).to_numpy(zero_copy_only=False), dtype=bool)


def request_latencies(requests: pa.Table) -> dict[str, NDArray[np.float64]]:
    """Per completed request: ``ttft_s``, ``tpot_s`` (NaN for single-token outputs), ``e2e_s``, ``queue_s``."""
    return RequestTotals.of(requests).latencies


PER_REQUEST = {"ttft_s": "ttft_s", "tpot_s": "tpot_s", "itl_s": "max_itl_s", "e2e_s": "e2e_s"}  # target: latency


def _slo_met(latencies: dict[str, NDArray[np.float64]], slo: SLO) -> NDArray[np.bool_]:
    met = np.ones(latencies["ttft_s"].size, dtype=bool)
    for name, latency in PER_REQUEST.items():
        target = getattr(slo, name)
        if target is not None:
            values = latencies[latency]
            met &= np.isnan(values) | (values <= target)  # single-token outputs have no TPOT or gap to miss
    return met


def jain_index(values: list[float]) -> float | None:
    """Jain's fairness index of non-negative ``values``; None if there are none or all are 0."""
    x = np.asarray(values, dtype=np.float64)
    square_sum = float((x * x).sum())
    return float(x.sum() ** 2 / (x.size * square_sum)) if x.size and square_sum > 0 else None


def _slo_block(targets: dict[str, float], num_met: int, num_arrived: int, makespan_s: float) -> dict[str, Any]:
    return {
        "targets": targets,
        "num_met": num_met,
        "attainment_frac": num_met / num_arrived if num_arrived else None,
        "goodput_requests_per_s": num_met / makespan_s if makespan_s > 0 else None,
    }


def _mixed_slo(
    requests: RequestTotals, makespan_s: float, slo: SLO | None, tenant_slos: Mapping[str, SLO | None]
) -> dict[str, Any]:
    """The run's SLO block when tenants have their own targets: each request is held to its tenant's.

    A completed request of a tenant without any target counts as met; rejected and unfinished
    requests always miss.
    """
    latencies = requests.latencies
    met = np.ones(latencies["ttft_s"].size, dtype=bool)
    for tenant, tenant_target in tenant_slos.items():
        if tenant_target is not None:
            mask = requests.tenant_mask(tenant)
            met[mask] = _slo_met({k: v[mask] for k, v in latencies.items()}, tenant_target)
    block = _slo_block(
        slo.targets() if slo is not None else {},
        int(np.count_nonzero(met)),
        requests.num_arrived,
        makespan_s,
    )
    block["tenant_targets"] = {t: s.targets() for t, s in tenant_slos.items() if s is not None}
    return block


def _request_summary(group: RequestGroup, gaps: GapBins, makespan_s: float, slo: SLO | None) -> dict[str, Any]:
    counts, latencies, emitted = group.counts, group.latencies, group.emitted_tokens
    summary: dict[str, Any] = {
        "num_requests": {"arrived": group.num_arrived, **counts},
        **{name: distribution(values[~np.isnan(values)]) for name, values in latencies.items()},
        "itl_s": gaps.summary(PERCENTILES),
        "output_tokens": emitted,
        "output_tokens_per_s": emitted / makespan_s if makespan_s > 0 else None,
        "requests_per_s": counts["completed"] / makespan_s if makespan_s > 0 else None,
    }
    if slo is not None:
        num_met = int(np.count_nonzero(_slo_met(latencies, slo)))
        summary["slo"] = _slo_block(slo.targets(), num_met, group.num_arrived, makespan_s)
        if slo.percentile is not None:
            summary["slo"].update(_percentile_verdict(latencies, gaps, slo, slo.percentile))
    return summary


def _percentile_verdict(
    latencies: dict[str, NDArray[np.float64]], gaps: GapBins, slo: SLO, percentile: float
) -> dict[str, Any]:
    """Whether the ``percentile``-th value of each targeted metric is within target: over completed
    requests, and for ``itl_s`` over every inter-token gap."""
    values: dict[str, float | None] = {}
    for name in slo.targets():
        if name == "itl_s":
            values[name] = gaps.percentile(percentile) if gaps.num_gaps else None
            continue
        finite = latencies[name][~np.isnan(latencies[name])]
        values[name] = float(np.percentile(finite, percentile)) if finite.size else None
    met = all(v is not None and v <= slo.targets()[k] for k, v in values.items())
    return {"percentile": percentile, "percentile_values": values, "percentile_met": met}


def _fairness(requests: RequestTotals, tenants: list[str], per_tenant: dict[str, dict[str, Any]]) -> dict[str, Any]:
    normalised = requests.latencies["e2e_s"] / requests.completed_outputs.astype(np.float64)
    served = [t for t in tenants if np.any(requests.tenant_mask(t))]
    latencies = [float(normalised[requests.tenant_mask(t)].mean()) for t in served]
    attainment = [per_tenant[t]["slo"]["attainment_frac"] for t in tenants if "slo" in per_tenant[t]]
    return {
        "jain_normalized_latency": jain_index(latencies),
        "jain_slo_attainment": jain_index([a for a in attainment if a is not None]) if attainment else None,
        "normalized_latency_s_per_token": dict(zip(served, latencies, strict=True)),
    }


def _per_replica(requests: RequestTotals, steps: StepTotals, makespan_s: float) -> list[dict[str, Any]]:
    """Per replica: requests routed and completed there, iterations, busy fraction, mean batch, preemptions, KV peak."""
    num_replicas = steps.busy_s.size
    num_routed = np.zeros(max(num_replicas, requests.routed.size), dtype=np.int64)
    num_routed[: requests.routed.size] = requests.routed
    num_completed = np.zeros(num_routed.size, dtype=np.int64)
    num_completed[: requests.completed_at.size] = requests.completed_at
    return [
        {
            "replica": r,
            "num_routed": int(num_routed[r]),
            "num_completed": int(num_completed[r]),
            "num_steps": int(steps.num_steps[r]),
            "busy_frac": float(steps.busy_s[r]) / makespan_s if makespan_s > 0 else None,
            "mean_batch_seqs": float(steps.seq_steps[r] / steps.num_steps[r]) if steps.num_steps[r] else None,
            "num_preemptions": int(steps.preemptions[r]),
            "kv_peak_used_frac": float(steps.kv_peak_frac[r]),
        }
        for r in range(num_replicas)
    ]


@dataclass(frozen=True)
class Measured:
    """The requests inside a measurement window: their totals (:meth:`RequestTotals.of` with
    ``measured_only``), their gap bins, the span their throughput is over, and the summary's
    ``window`` block that says so."""

    requests: RequestTotals
    gaps: Mapping[str, dict[int, list[float]]]
    span_s: float
    window: dict[str, Any]


def summarize(
    requests: pa.Table | RequestTotals,
    steps: pa.Table | StepTotals,
    makespan_s: float,
    num_replicas: int,
    slo: SLO | None,
    tenant_slos: Mapping[str, SLO | None] | None = None,
    gaps: Mapping[str, dict[int, list[float]]] | None = None,
    measured: Measured | None = None,
) -> dict[str, Any]:
    """The run's ``summary.json``: request counts, latency percentiles, throughput, utilisation.

    ``tenant_slos``: each tenant's targets (its own, else ``slo``); when some differ from ``slo``,
    the run's ``slo`` block holds each request to its tenant's targets. ``gaps``: each tenant's
    inter-token gap bins (``itl.parquet``; None: no gaps). ``measured``: with a measurement window,
    every request figure (counts, latencies, gaps, throughput, SLO, fairness) is of the measured
    requests, per second of their span; ``makespan_s`` and ``replicas`` stay the whole run's.
    """
    if isinstance(requests, pa.Table):
        requests = RequestTotals.of(requests)
    gaps = gaps or {}
    tenant_slos = dict(tenant_slos) if tenant_slos is not None else {}
    figures, figure_gaps, span_s = requests, gaps, makespan_s
    summary: dict[str, Any] = {"makespan_s": makespan_s}
    if measured is not None:
        figures, figure_gaps, span_s = measured.requests, measured.gaps, measured.span_s
        summary["window"] = measured.window
    summary.update(_request_summary(figures.overall(), GapBins.merged(figure_gaps.values()), span_s, slo))
    if any(s != slo for s in tenant_slos.values()):
        summary["slo"] = _mixed_slo(figures, span_s, slo, tenant_slos)
    tenants = sorted(requests.tenants)
    if len(tenants) > 1:
        per_tenant = {
            t: _request_summary(figures.of_tenant(t), GapBins(figure_gaps.get(t, {})), span_s, tenant_slos.get(t, slo))
            for t in tenants
        }
        summary["tenants"] = per_tenant
        summary["fairness"] = _fairness(figures, tenants, per_tenant)
    if isinstance(steps, pa.Table):
        steps = StepTotals.of(steps, num_replicas)
    summary["replicas"] = _replicas(requests, steps, makespan_s, num_replicas)
    return summary


def _replicas(requests: RequestTotals, steps: StepTotals, makespan_s: float, num_replicas: int) -> dict[str, Any]:
    busy = [float(b) for b in steps.busy_s]
    total_steps = float(steps.num_steps.sum())
    return {
        "num_steps": int(total_steps),
        "busy_frac": [b / makespan_s if makespan_s > 0 else None for b in busy],
        "mean_busy_frac": (sum(busy) / (num_replicas * makespan_s)) if makespan_s > 0 else None,
        "mean_batch_seqs": float(steps.seq_steps.sum() / total_steps) if steps.num_rows else None,
        "num_preemptions": int(steps.preemptions.sum()),
        "kv_peak_used_frac": float(steps.kv_peak_frac.max()) if steps.num_rows else 0.0,
        "per_replica": _per_replica(requests, steps, makespan_s),
    }


def kv_summary(
    memory: pa.Table | MemoryTotals, num_preemptions: int, prefix_hit_rate: float | None = None, num_swaps: int = 0
) -> dict[str, Any]:
    """Time-weighted shares of KV capacity per ledger category (over the time replicas were stepping).

    ``waste_frac`` is internal fragmentation + reserved but unused + external fragmentation;
    ``mean_used_frac`` is everything but free headroom; ``peak_used_frac`` its maximum over rows.
    """
    totals = MemoryTotals.of(memory) if isinstance(memory, pa.Table) else memory
    weight_s = totals.weight_s
    if totals.num_rows == 0 or weight_s <= 0:
        return {"num_preemptions": num_preemptions, "num_swaps": num_swaps, "prefix_hit_rate": prefix_hit_rate}

    def share(column: str) -> float:
        return totals.weighted_share_s[column] / weight_s

    mean_used = totals.weighted_used_s / weight_s
    return {
        "stored_frac": share("stored_bytes"),
        "internal_frag_frac": share("internal_frag_bytes"),
        "reserved_unused_frac": share("reserved_unused_bytes"),
        "external_frag_frac": share("external_frag_bytes"),
        "cached_prefix_frac": share("cached_prefix_bytes"),
        "in_flight_frac": share("in_flight_bytes"),  # KV caches moving between replicas (disaggregation)
        "waste_frac": share("internal_frag_bytes") + share("reserved_unused_bytes") + share("external_frag_bytes"),
        "mean_used_frac": mean_used,
        "peak_used_frac": totals.peak_used_frac,
        "stored_of_used_frac": share("stored_bytes") / max(1e-300, mean_used),
        "num_preemptions": num_preemptions,
        "num_swaps": num_swaps,
        "prefix_hit_rate": prefix_hit_rate,  # None without prefix caching
    }
