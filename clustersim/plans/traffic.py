"""The offered rate of a scenario's traffic, and the overrides that scale it to a target.

Every tenant is scaled by one factor, so the mix stays as the scenario has it: Poisson and gamma
rates, each stage's rate, a diurnal curve's minimum and peak are multiplied; a replayed trace is
replayed faster (its ``time_scale`` divided). The rate of a trace is its rows over their span (the
whole file, before ``stop``). Closed-loop users and explicit request lists have no offered rate to
scale and are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clustersim.config.scenario import Scenario
from clustersim.config.workload import (
    DiurnalArrivals,
    GammaArrivals,
    PoissonArrivals,
    StagedArrivals,
    TraceArrivals,
)
from clustersim.errors import ConfigError
from clustersim.workload.traces import load_workload_data


def offered_rate_per_s(scenario: Scenario, base_dir: Path, source: str) -> float:
    """Requests per second the scenario offers, over all tenants."""
    total = 0.0
    data = None
    for index, tenant in enumerate(scenario.workload.tenants):
        arrival = tenant.arrival
        if isinstance(arrival, PoissonArrivals | GammaArrivals):
            total += arrival.rate_per_s
        elif isinstance(arrival, StagedArrivals):
            duration_s = sum(stage.duration_s for stage in arrival.stages)
            total += sum(stage.rate_per_s * stage.duration_s for stage in arrival.stages) / duration_s
        elif isinstance(arrival, DiurnalArrivals):
            total += (arrival.min_rate_per_s + arrival.peak_rate_per_s) / 2
        elif isinstance(arrival, TraceArrivals):
            data = data if data is not None else load_workload_data(scenario.workload, base_dir, source)
            trace = data[tenant.name].trace
            assert trace is not None
            span_s = float(trace.arrival_at_s[-1] - trace.arrival_at_s[0]) * arrival.time_scale
            if trace.arrival_at_s.size < 2 or span_s <= 0:
                raise ConfigError(source, f"workload.tenants[{index}].arrival", "the trace has no span to scale")
            total += (trace.arrival_at_s.size - 1) / span_s
        else:
            raise ConfigError(
                source, f"workload.tenants[{index}].arrival", f"{arrival.kind} arrivals have no offered rate to scale"
            )
    return total


def rate_overrides(scenario: Scenario, factor: float) -> dict[str, Any]:
    """The overrides that multiply every tenant's rate by ``factor``."""
    overrides: dict[str, Any] = {}
    for index, tenant in enumerate(scenario.workload.tenants):
        arrival, where = tenant.arrival, f"workload.tenants.{index}.arrival"
        if isinstance(arrival, PoissonArrivals | GammaArrivals):
            overrides[f"{where}.rate_per_s"] = arrival.rate_per_s * factor
        elif isinstance(arrival, StagedArrivals):
            for number, stage in enumerate(arrival.stages):
                overrides[f"{where}.stages.{number}.rate_per_s"] = stage.rate_per_s * factor
        elif isinstance(arrival, DiurnalArrivals):
            overrides[f"{where}.min_rate_per_s"] = arrival.min_rate_per_s * factor
            overrides[f"{where}.peak_rate_per_s"] = arrival.peak_rate_per_s * factor
        elif isinstance(arrival, TraceArrivals):
            overrides[f"{where}.time_scale"] = arrival.time_scale / factor
    return overrides
