"""The scenario's ``metrics`` section: which requests the summary measures (pure; no I/O).

A warm-up and a cool-down keep a run's ramp-up and drain out of its summary. A request is
*measured* when its arrival lies inside the window: by time, from ``warmup_s`` after the first
arrival to ``cooldown_s`` before the end of arrivals; by arrival order over all tenants, after the
first ``warmup_requests`` and before the last ``cooldown_requests``; inside both when both are set.
The run counts the gaps between tokens of unmeasured requests apart as it goes, so a cool-down
needs the end of arrivals (or the number of requests) before the run starts; :func:`window_problem`
refuses a scenario where that cannot be known, and a window that leaves nothing to measure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import NonNegativeFloat, NonNegativeInt

from clustersim.config.base import StrictModel
from clustersim.config.workload import SELF_CONTAINED_ARRIVALS, ExplicitArrivals, StagedArrivals, Tenant


class Metrics(StrictModel):
    """Which requests the summary measures (all of them by default: every field 0).

    ``warmup_s`` / ``cooldown_s``: leave out the requests arriving less than ``warmup_s`` seconds after
    the first arrival, or less than ``cooldown_s`` seconds before the end of arrivals. ``warmup_requests``
    / ``cooldown_requests``: leave out the first / last so many requests in arrival order (over all
    tenants). The logs keep every request; only the summary is windowed.
    """

    warmup_s: NonNegativeFloat = 0.0
    cooldown_s: NonNegativeFloat = 0.0
    warmup_requests: NonNegativeInt = 0
    cooldown_requests: NonNegativeInt = 0

    @property
    def windowed(self) -> bool:
        """Whether any request can be left out."""
        return bool(self.warmup_s or self.cooldown_s or self.warmup_requests or self.cooldown_requests)


def known_in_advance(tenants: Sequence[Tenant]) -> bool:
    """Whether every request of the run is known before it starts (explicit lists and traces only)."""
    return all(tenant.arrival.kind in SELF_CONTAINED_ARRIVALS for tenant in tenants)


def stages_end_s(arrival: StagedArrivals) -> float:
    """When a staged process without ``repeat`` stops: the end of its last stage with a rate above 0."""
    end_s, busy_end_s = 0.0, 0.0
    for stage in arrival.stages:
        end_s += stage.duration_s
        if stage.rate_per_s > 0:
            busy_end_s = end_s
    return busy_end_s


def _end_bound_s(tenants: Sequence[Tenant], horizon_s: float | None) -> float:
    """A time no arrival comes after, from the scenario alone (inf where only the data or the run can tell)."""
    latest_s = 0.0
    for tenant in tenants:
        arrival = tenant.arrival
        if isinstance(arrival, ExplicitArrivals):
            latest_s = max(latest_s, arrival.requests[-1].arrival_at_s)
        elif isinstance(arrival, StagedArrivals) and not arrival.repeat:
            latest_s = max(latest_s, stages_end_s(arrival))
        else:
            latest_s = math.inf
    return min(latest_s, horizon_s) if horizon_s is not None else latest_s


def _unknown_count(tenants: Sequence[Tenant], max_requests: int | None, horizon_s: float | None) -> str | None:
    """Why the number of requests is not known before the run (None: it is)."""
    if known_in_advance(tenants):
        return None
    if horizon_s is not None:
        return "stop.horizon_s ends the arrivals after a number of requests not known in advance"
    finite = [t for t in tenants if t.arrival.is_finite and t.arrival.kind not in SELF_CONTAINED_ARRIVALS]
    if max_requests is None or all(t.arrival.is_finite for t in tenants):
        return f"tenant '{finite[0].name}' ({finite[0].arrival.kind}) sends a number of requests not known in advance"
    return None


def window_problem(
    metrics: Metrics, tenants: Sequence[Tenant], max_requests: int | None, horizon_s: float | None
) -> tuple[str, str] | None:
    """``(field path, problem)`` when the window cannot be resolved before the run or visibly holds
    nothing; None when it is fine (the exact check, with the traces read, is at the run's start)."""
    if not metrics.windowed:
        return None
    if metrics.cooldown_s and max_requests is not None and not known_in_advance(tenants):
        return (
            "metrics.cooldown_s",
            "needs the end of arrivals before the run, but stop.max_requests ends them at a time not known in "
            "advance; use metrics.cooldown_requests, or stop the arrivals with stop.horizon_s alone",
        )
    if metrics.cooldown_requests and (reason := _unknown_count(tenants, max_requests, horizon_s)) is not None:
        return (
            "metrics.cooldown_requests",
            f"needs the number of requests before the run, but {reason}; use metrics.cooldown_s, or stop the "
            "arrivals with stop.max_requests alone",
        )
    num_left_out = metrics.warmup_requests + metrics.cooldown_requests
    if max_requests is not None and num_left_out >= max_requests:
        field = "cooldown_requests" if metrics.cooldown_requests else "warmup_requests"
        return (
            f"metrics.{field}",
            f"leaves no request to measure: warmup_requests {metrics.warmup_requests} + cooldown_requests "
            f"{metrics.cooldown_requests} >= stop.max_requests {max_requests}",
        )
    end_bound_s = _end_bound_s(tenants, horizon_s)
    if (metrics.warmup_s or metrics.cooldown_s) and metrics.warmup_s + metrics.cooldown_s >= end_bound_s:
        field = "cooldown_s" if metrics.cooldown_s else "warmup_s"
        return (
            f"metrics.{field}",
            f"leaves no time to measure: warmup_s {metrics.warmup_s:g} + cooldown_s {metrics.cooldown_s:g} >= "
            f"{end_bound_s:g} s, by when every arrival has come",
        )
    return None
