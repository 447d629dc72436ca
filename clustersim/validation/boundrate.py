"""The highest arrival rate whose 99th-percentile TTFT and TPOT stay within bounds (MLPerf Server).

MLPerf Inference's Server and Interactive scenarios do not publish the latency of a given load: a
submitter raises the Poisson rate (``target_qps``) until the run would fail the scenario's latency
bounds, the 99th percentiles of TTFT and TPOT (``ttft_latency`` and ``tpot_latency`` in
``loadgen/mlperf.conf`` of mlcommons/inference; ``*.Server.target_latency_percentile = 99``), and
publishes that run. Its latencies sit at a bound by construction, where a few percent of capacity
moves them several-fold, so holding a simulation at the published rate compares capacity errors
amplified by ``1 / (1 - load)``. Measured the same way, the simulated deployment is run at the highest
rate at which *it* meets the bounds, and the row compares that run: its throughput against the
published one, its latencies against the published ones.

The search is deterministic (the same seed at every rate, so arrivals and lengths scale together):
from the published rate it steps by :data:`GROWTH` up while the bounds hold (or down until they
do), then bisects :data:`BISECTIONS` times in log space. The rate returned is interpolated in log
space between the last passing and the first failing rate at the point where the binding bound is
met exactly, so a prediction moves smoothly with the profiles (what a fit's finite differences need);
the row is then run, and measured, at that rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

GROWTH = 1.25  # the step from the published rate while bracketing
MAX_STEPS = 10  # 1.25^10 = 9.3: a rate that far off is reported at the last one tried
BISECTIONS = 4  # the bracket narrows to 1.25^(1/16), 1.4%

Trial = Callable[[float], "dict[str, float] | None"]  # rate factor -> the run's metrics (None: it failed)


@dataclass(frozen=True)
class BoundedRate:
    """The search's answer: the rate factor (of the published rate) to run the row at."""

    factor: float
    met: bool  # False: no rate tried met the bounds (the factor is the lowest tried)
    num_runs: int


def excess(metrics: dict[str, float] | None, ttft_ms: float, tpot_ms: float) -> float:
    """How far the binding bound is exceeded, ``max(p99 TTFT / bound, p99 TPOT / bound)``: <= 1 meets
    both (a failed run, or one without both percentiles, exceeds them). A run falling behind its
    arrivals fails the TTFT bound by its length (see ``bounded_num_requests`` in ``rowscenario``)."""
    if metrics is None:
        return math.inf
    ttft, tpot = metrics.get("ttft_p99_ms"), metrics.get("tpot_p99_ms")
    if ttft is None or tpot is None:
        return math.inf
    return max(ttft / ttft_ms, tpot / tpot_ms)


def search_rate(trial: Trial, ttft_ms: float, tpot_ms: float) -> BoundedRate:
    """The highest rate factor at which ``trial``'s run meets both p99 bounds (see the module)."""
    runs: dict[float, dict[str, float] | None] = {}

    def over(factor: float) -> float:
        if factor not in runs:
            runs[factor] = trial(factor)
        return excess(runs[factor], ttft_ms, tpot_ms)

    low, high = _bracket(over)
    if low is None:  # never met: the lowest rate tried
        assert high is not None
        return BoundedRate(high, False, len(runs))
    if high is None:  # met at every rate tried: the highest
        return BoundedRate(low, True, len(runs))
    for _ in range(BISECTIONS):
        middle = math.sqrt(low * high)
        if over(middle) <= 1.0:
            low = middle
        else:
            high = middle
    return BoundedRate(_crossing(low, high, over(low), over(high)), True, len(runs))


def _bracket(over: Callable[[float], float]) -> tuple[float | None, float | None]:
    """(last passing factor, first failing factor) around the bound, stepping from 1."""
    if over(1.0) <= 1.0:
        low = 1.0
        for _ in range(MAX_STEPS):
            if over(low * GROWTH) > 1.0:
                return low, low * GROWTH
            low *= GROWTH
        return low, None
    high = 1.0
    for _ in range(MAX_STEPS):
        if over(high / GROWTH) <= 1.0:
            return high / GROWTH, high
        high /= GROWTH
    return None, high


def _crossing(low: float, high: float, over_low: float, over_high: float) -> float:
    """Where the binding bound is met exactly, interpolating log(excess) against log(rate)."""
    if not math.isfinite(over_high) or over_low <= 0 or over_high <= over_low:
        return low
    span = math.log(over_high) - math.log(over_low)
    weight = min(1.0, max(0.0, -math.log(over_low) / span))
    return math.exp(math.log(low) + weight * (math.log(high) - math.log(low)))
