"""A plan file: the traffic, the targets, the options to price, and how hard to look.

.. code-block:: yaml

    name: chat-60rps
    base: default                     # a built-in scenario name, or a file relative to this one
    set: {stop.max_requests: 6000}    # overrides every run shares
    traffic: {rate_per_s: 60}         # the offered rate, all tenants scaled together
    slo: {ttft_s: 0.5, tpot_s: 0.05, percentile: 99}
    min_attainment_frac: 0.99         # optional: also 99% of requests meet every target (goodput)
    seeds: 3                          # an option meets the SLO when every seed does
    replicas: {min: 1, max: 64}
    options:
      - {name: H100, set: {cluster.hardware: H100-SXM}}
      - {name: A100-80GB, set: {cluster.hardware: A100-80GB}}
    max_rate: {tolerance_frac: 0.05}  # also: the highest rate each answer sustains (optional)
    prices_usd_per_gpu_hour: {}       # else each GPU profile's hourly_price_usd
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from clustersim.config.base import SLO, StrictModel
from clustersim.config.loader import check_unknown_keys, read_yaml_mapping, validate_mapping
from clustersim.errors import ConfigError
from clustersim.outdir import safe_name
from clustersim.sweeps.spec import seeds_problem


class Traffic(StrictModel):
    """The offered load: ``rate_per_s`` requests per second over all tenants (None: as the base scenario)."""

    rate_per_s: PositiveFloat | None = None


class ReplicaRange(StrictModel):
    """The replica counts searched: from ``min`` to ``max``, starting at ``start`` (default ``min``)."""

    min: PositiveInt = 1
    max: PositiveInt = 64
    start: PositiveInt | None = None

    @model_validator(mode="after")
    def _check(self) -> ReplicaRange:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be at least min ({self.min})")
        if self.start is not None and not self.min <= self.start <= self.max:
            raise ValueError(f"start ({self.start}) must lie between min and max")
        return self


class MaxRate(StrictModel):
    """Find the highest rate an answer sustains under the SLO, to within ``tolerance_frac``."""

    tolerance_frac: float = Field(default=0.05, gt=0.0, lt=1.0)
    max_factor: float = Field(default=16.0, gt=1.0, le=1000.0)


class PlanOption(StrictModel):
    """One way to serve the traffic: its name and the overrides that make it."""

    name: str = Field(min_length=1, max_length=60)
    set: dict[str, Any] = Field(default_factory=dict)


class PlanSpec(StrictModel):
    """A plan file, validated (see the module docstring)."""

    name: str = Field(default="plan", min_length=1)
    description: str = ""
    base: str = "default"
    set: dict[str, Any] = Field(default_factory=dict)
    traffic: Traffic = Traffic()
    slo: SLO
    min_attainment_frac: float | None = Field(default=None, gt=0.0, le=1.0)
    seeds: PositiveInt | list[int] = 3
    replicas: ReplicaRange = ReplicaRange()
    options: list[PlanOption] = Field(min_length=1)
    max_rate: MaxRate | None = None
    prices_usd_per_gpu_hour: dict[str, PositiveFloat] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> PlanSpec:
        if self.slo.percentile is None and self.min_attainment_frac is None:
            raise ValueError(
                "slo.percentile or min_attainment_frac is needed: the plan judges each run at a percentile "
                "(e.g. 99) or by the share of requests meeting every target"
            )
        seeds_problem(self.seeds)
        if not self.slo.targets():
            raise ValueError("slo needs at least one target (ttft_s, tpot_s, itl_s or e2e_s)")
        folders = [safe_name(option.name).lower() for option in self.options]
        for option, folder in zip(self.options, folders, strict=True):
            if folders.count(folder) > 1:
                raise ValueError(f"two options are named like {option.name!r}: give distinct names")
            if "cluster.num_replicas" in option.set:
                raise ValueError(f"option {option.name!r} sets cluster.num_replicas: the plan searches it")
        return self


def load_plan(path: Path) -> PlanSpec:
    """Read and validate a plan file (errors name the file and the field)."""
    raw = read_yaml_mapping(path)
    return plan_from_mapping(raw, str(path))


def plan_from_mapping(raw: Any, source: str) -> PlanSpec:
    """A plan given as Python data, validated like a file."""
    if not isinstance(raw, dict):
        raise ConfigError(source, "", f"a plan must be a mapping, not {type(raw).__name__}")
    check_unknown_keys(raw, PlanSpec, source)
    spec = validate_mapping(raw, PlanSpec, source)
    assert isinstance(spec, PlanSpec)
    return spec
