"""A sweep file: a base scenario, the axes to vary, the seeds, and how points are judged and priced.

.. code-block:: yaml

    name: rate-curve
    base: default                  # a built-in scenario name, or a file relative to this one
    set: {stop.max_requests: 2000} # overrides every point shares
    axes:                          # a grid: the cartesian product of the axes, in order
      - {path: workload.tenants.0.arrival.rate_per_s, name: rate_per_s, values: [20, 40, 60]}
      - zip:                       # zipped axes move together (same number of values)
          - {path: cluster.hardware, name: hardware, values: [H100-SXM, A100-80GB]}
          - {path: cluster.num_replicas, values: [4, 6]}
    seeds: 3                       # three replications: the base seed and the next two (or a list)
    slo: {ttft_s: 0.5, tpot_s: 0.05, percentile: 99}   # judge every point (replaces the scenario's)
    prices_usd_per_gpu_hour: {H100-SXM: 2.5}           # else the GPU profile's hourly_price_usd

Each axis's ``name`` (default: the last part of its path) becomes a typed column of the sweep's
tables and a Hive partition key of its folders (``rate_per_s=40/seed=43/``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import Discriminator, Field, PositiveFloat, PositiveInt, Tag, model_validator

from clustersim.config.base import MAX_SEED, SLO, StrictModel
from clustersim.config.loader import check_unknown_keys, read_yaml_mapping, validate_mapping
from clustersim.errors import ConfigError
from clustersim.records import GAP_SCHEMA, MEMORY_SCHEMA, REQUEST_SCHEMA, STEP_SCHEMA

MAX_POINTS = 100_000
NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")
# columns of the sweep's tables and of the run logs, which an axis's name would collide with
POINT_COLUMNS = ("seed", "variant", "label", "point", "status", "error", "reused", "wall_s", "scenario_sha256")
RESERVED_NAMES = frozenset(
    [
        *POINT_COLUMNS,
        "measured",
        *(name for schema in (REQUEST_SCHEMA, STEP_SCHEMA, MEMORY_SCHEMA, GAP_SCHEMA) for name in schema.names),
    ]
)


def seeds_problem(seeds: int | list[int]) -> None:
    """Raise ValueError unless ``seeds`` is a count or a non-empty list of distinct seeds in range."""
    if isinstance(seeds, list):
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError("seeds must be a non-empty list of distinct seeds")
        if any(not 0 <= s <= MAX_SEED for s in seeds):
            raise ValueError(f"a seed must be between 0 and {MAX_SEED}")


class Axis(StrictModel):
    """One scenario field and the values it takes; ``labels`` name values in folders and tables
    (needed for mappings and lists, optional otherwise)."""

    path: str = Field(min_length=1)
    name: str | None = None
    values: list[Any] = Field(min_length=1)
    labels: list[str] | None = None

    @model_validator(mode="after")
    def _check(self) -> Axis:
        if self.labels is not None and len(self.labels) != len(self.values):
            raise ValueError(f"labels has {len(self.labels)} entries for {len(self.values)} values")
        if self.name is not None and not NAME_PATTERN.match(self.name):
            raise ValueError(f"name {self.name!r} must be a letter or _ then letters, digits or _ (at most 40)")
        return self

    @property
    def column(self) -> str:
        """The axis's column and partition name."""
        if self.name is not None:
            return self.name
        return re.sub(r"\W", "_", self.path.rsplit(".", 1)[-1]) or "axis"


class ZipAxes(StrictModel):
    """Axes whose values move together: the i-th point takes every axis's i-th value."""

    zip: list[Axis] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> ZipAxes:
        lengths = {len(axis.values) for axis in self.zip}
        if len(lengths) > 1:
            raise ValueError(f"zipped axes must have the same number of values, not {sorted(lengths)}")
        return self


def _entry_kind(value: Any) -> str:
    """Which model an entry of ``axes`` is: zipped axes have a ``zip`` key."""
    if isinstance(value, dict):
        return "zip" if "zip" in value else "axis"
    return "zip" if isinstance(value, ZipAxes) else "axis"


_TAG_IN_PATH = re.compile(r"^(axes\[\d+\])\.(?:axis|zip)(?=$|[.\[])")
AxisEntry = Annotated[Annotated[Axis, Tag("axis")] | Annotated[ZipAxes, Tag("zip")], Discriminator(_entry_kind)]


class SweepSpec(StrictModel):
    """A sweep file, validated (see the module docstring)."""

    name: str = Field(default="sweep", min_length=1)
    description: str = ""
    base: str = "default"
    set: dict[str, Any] = Field(default_factory=dict)
    axes: list[AxisEntry] = Field(default_factory=list)
    seeds: PositiveInt | list[int] = 1
    slo: SLO | None = None
    prices_usd_per_gpu_hour: dict[str, PositiveFloat] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        columns = [axis.column for axis in self.flat_axes()]
        for column in columns:
            if column in RESERVED_NAMES:
                raise ValueError(f"axis name {column!r} is taken by a table column: give the axis another name")
            if columns.count(column) > 1:
                raise ValueError(f"two axes are named {column!r}: give one a name")
        seeds_problem(self.seeds)
        return self

    def flat_axes(self) -> list[Axis]:
        """Every axis, zipped ones included, in order."""
        return [a for entry in self.axes for a in (entry.zip if isinstance(entry, ZipAxes) else [entry])]

    def seed_list(self, base_seed: int) -> list[int]:
        """The seeds: as listed, or ``seeds`` consecutive ones from the base scenario's seed."""
        if isinstance(self.seeds, list):
            return list(self.seeds)
        return [(base_seed + i) % (MAX_SEED + 1) for i in range(self.seeds)]


def load_sweep(path: Path) -> SweepSpec:
    """Read and validate a sweep file (errors name the file and the field)."""
    return sweep_from_mapping(read_yaml_mapping(path), str(path))


def sweep_from_mapping(raw: dict[str, Any], source: str) -> SweepSpec:
    """A sweep given as Python data, validated like a file."""
    if not isinstance(raw, dict):
        raise ConfigError(source, "", f"a sweep must be a mapping, not {type(raw).__name__}")
    check_unknown_keys(raw, SweepSpec, source)
    for index, entry in enumerate(raw.get("axes") or [] if isinstance(raw.get("axes"), list) else []):
        model = ZipAxes if _entry_kind(entry) == "zip" else Axis
        check_unknown_keys(entry, model, source, f"axes[{index}]")
    try:
        spec = validate_mapping(raw, SweepSpec, source)
    except ConfigError as exc:  # the entry's kind (axis or zip) is in pydantic's path, not the file's
        raise ConfigError(source, _TAG_IN_PATH.sub(r"\1", exc.field_path), exc.problem) from None
    assert isinstance(spec, SweepSpec)
    return spec
