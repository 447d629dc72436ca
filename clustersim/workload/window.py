"""The measurement window of one run, resolved before it starts, and the marks it puts on requests.

:func:`resolve_window` turns the scenario's ``metrics`` (:mod:`clustersim.config.window`) into
bounds: a time range of arrivals and a range of arrival indices. A cool-down counts back from the
end of arrivals or from the number of requests, so those are found first: where every request is
known in advance (explicit lists and traces) from the times at which the clock creates them,
replayed exactly; else from ``stop.horizon_s``, the end of a staged process's last busy stage, or
``stop.max_requests``. The start is the first arrival plus ``warmup_s``, known once the first
request arrives: :class:`WindowMarks` marks each request as it is created (in arrival order), so
its inter-token gaps are counted under the right key from its first token on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from clustersim.config.scenario import Scenario
from clustersim.config.window import Metrics, known_in_advance, stages_end_s, window_problem
from clustersim.config.workload import ExplicitArrivals, StagedArrivals, TraceArrivals
from clustersim.errors import ConfigError
from clustersim.workload.arrivals import tenant_arrivals
from clustersim.workload.request import Request
from clustersim.workload.traces import TenantData


@dataclass(frozen=True)
class ArrivalWindow:
    """The measured arrivals: index in ``[first_index, end_index)`` (None: no end) and time in
    ``[first arrival + warmup_s, end_s]`` (``end_s`` inf: no end)."""

    metrics: Metrics
    end_s: float
    end_index: int | None

    @property
    def first_index(self) -> int:
        return self.metrics.warmup_requests

    def start_s(self, first_arrival_s: float) -> float:
        """The earliest measured arrival time, given the run's first arrival."""
        return first_arrival_s + self.metrics.warmup_s

    def measured(self, index: int, arrival_at_s: float, first_arrival_s: float) -> bool:
        """Whether the request with arrival index ``index``, arriving at ``arrival_at_s``, is measured."""
        if index < self.metrics.warmup_requests or (self.end_index is not None and index >= self.end_index):
            return False
        return self.start_s(first_arrival_s) <= arrival_at_s <= self.end_s


class WindowMarks:
    """Marks each request measured or not when it is created; requests come in arrival order, so the
    first one created (id 0) gives the first arrival."""

    def __init__(self, window: ArrivalWindow) -> None:
        self.window = window
        self.first_arrival_s = math.nan

    def mark(self, request: Request) -> None:
        if request.request_id == 0:
            self.first_arrival_s = request.arrival_at_s
        if not self.window.measured(request.request_id, request.arrival_at_s, self.first_arrival_s):
            request.gap_key = (request.tenant, False)


def created_times_s(times_s: Iterable[float], horizon_s: float | None) -> list[float]:
    """When the clock creates the requests of one open-loop tenant whose requested arrival times are
    ``times_s``: each waits ``t - now`` from the previous one (which can round ``t`` by an ulp); none
    at or after the horizon (the clock stops first), nor asked for after it."""
    created: list[float] = []
    now_s = 0.0
    for t in times_s:
        if t > now_s:
            now_s = now_s + (t - now_s)
        if horizon_s is not None and (now_s >= horizon_s or t > horizon_s):
            break
        created.append(now_s)
    return created


def known_arrivals_s(scenario: Scenario, data: dict[str, TenantData]) -> list[float] | None:
    """Every request's arrival time in arrival order, where all are known before the run (else None)."""
    tenants = scenario.workload.tenants
    if not known_in_advance(tenants):
        return None
    times: list[float] = []
    for tenant in tenants:
        arrivals = tenant_arrivals(tenant, scenario.seed, data.get(tenant.name))
        times += created_times_s((item[0] for item in arrivals), scenario.stop.horizon_s)
    times.sort()
    max_requests = scenario.stop.max_requests
    return times[:max_requests] if max_requests is not None else times


def _arrivals_end_s(scenario: Scenario, data: dict[str, TenantData]) -> float:
    """When arrivals end, for a run whose requests are not all known in advance (and no
    ``max_requests`` cuts them short): the horizon, or when the last tenant stops sending."""
    horizon_s = scenario.stop.horizon_s
    end_s = 0.0
    for tenant in scenario.workload.tenants:
        arrival = tenant.arrival
        if isinstance(arrival, ExplicitArrivals | TraceArrivals):
            arrivals = tenant_arrivals(tenant, scenario.seed, data.get(tenant.name))
            created = created_times_s((item[0] for item in arrivals), horizon_s)
            end_s = max(end_s, created[-1] if created else 0.0)
        elif isinstance(arrival, StagedArrivals) and not arrival.repeat:
            end_s = max(end_s, stages_end_s(arrival))
        else:
            end_s = math.inf
    return min(end_s, horizon_s) if horizon_s is not None else end_s


def resolve_window(scenario: Scenario, data: dict[str, TenantData], source: str) -> ArrivalWindow | None:
    """The run's measurement window (None: every request is measured); raises :class:`ConfigError`
    naming the field when it cannot be known before the run or holds no request."""
    metrics, stop = scenario.metrics, scenario.stop
    if not metrics.windowed:
        return None
    problem = window_problem(metrics, scenario.workload.tenants, stop.max_requests, stop.horizon_s)
    if problem is not None:
        raise ConfigError(source, *problem)
    known = known_arrivals_s(scenario, data)
    end_s, end_index = math.inf, None
    if metrics.cooldown_s:
        end_s = (known[-1] if known else 0.0) if known is not None else _arrivals_end_s(scenario, data)
        end_s -= metrics.cooldown_s
    if metrics.cooldown_requests:
        num_requests = len(known) if known is not None else stop.max_requests
        assert num_requests is not None  # window_problem refused the rest
        end_index = num_requests - metrics.cooldown_requests
    window = ArrivalWindow(metrics, end_s, end_index)
    if known is not None:
        _check_holds_some(window, known, source)
    return window


def _check_holds_some(window: ArrivalWindow, known: list[float], source: str) -> None:
    """Refuse a window that holds none of a run's requests known in advance."""
    metrics = window.metrics
    first_s = known[0] if known else math.nan
    if any(window.measured(i, t, first_s) for i, t in enumerate(known)):
        return
    in_time = any(window.start_s(first_s) <= t <= window.end_s for t in known)
    by_count = metrics.warmup_requests or metrics.cooldown_requests
    if (metrics.warmup_s or metrics.cooldown_s) and not (in_time and by_count):
        field = "cooldown_s" if metrics.cooldown_s else "warmup_s"  # the time range alone holds none
    else:
        field = "cooldown_requests" if metrics.cooldown_requests else "warmup_requests"
    span = f"arriving from {known[0]:g} s to {known[-1]:g} s" if known else "(none arrives before the horizon)"
    raise ConfigError(
        source,
        f"metrics.{field}",
        f"leaves none of the run's {len(known)} requests {span} to measure (warmup_s {metrics.warmup_s:g}, "
        f"cooldown_s {metrics.cooldown_s:g}, warmup_requests {metrics.warmup_requests}, cooldown_requests "
        f"{metrics.cooldown_requests})",
    )
