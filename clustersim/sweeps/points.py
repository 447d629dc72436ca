"""The points of a sweep: each combination of axis values, once per seed, with its overrides, its
folder (Hive-style ``name=value/.../seed=S``) and its label.

A value's label is its text (``4``, ``0.5``, ``H100-SXM``, ``true``) or the axis's ``labels``
entry; a mapping or list without a label is written as compact YAML. In folder names labels are
percent-encoded (``/`` -> ``%2F``), which is how Hive partitioning (pyarrow, pandas, duckdb) reads
them back.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import yaml

from clustersim.errors import ConfigError
from clustersim.sweeps.spec import MAX_POINTS, Axis, SweepSpec, ZipAxes

MAX_SEGMENT_CHARS = 120


@dataclass(frozen=True)
class Point:
    """One run of a sweep: its axis values (by column) and seed, and the overrides that make it."""

    values: tuple[tuple[str, Any], ...]  # (column, value) per axis, in axis order
    labels: tuple[tuple[str, str], ...]  # (column, label) per axis
    seed: int
    overrides: tuple[str, ...]  # path=yaml: the sweep's ``set`` and ``slo``, then the axes, then the seed

    @property
    def key(self) -> str:
        """The point's folder, relative to the sweep's (``rate_per_s=40/seed=43``)."""
        parts = [f"{column}={quote(label, safe='')}" for column, label in self.labels]
        return "/".join([*parts, f"seed={self.seed}"])

    @property
    def label(self) -> str:
        """A line naming the point (``rate_per_s=40, seed=43``)."""
        return ", ".join([*(f"{c}={v}" for c, v in self.labels), f"seed={self.seed}"])

    @property
    def variant(self) -> str:
        """The axis values alone (the same for every seed of a point)."""
        return ", ".join(f"{c}={v}" for c, v in self.labels) or "base"


def value_label(value: Any) -> str:
    """A value as text: scalars as YAML writes them, mappings and lists as compact YAML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float | str):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def override(path: str, value: Any) -> str:
    """``path=value`` with the value as one line of YAML (the loader parses it back exactly)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError("sweep", path, f"{value} is not a finite number")
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf).strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")].strip()
    elif text.endswith("..."):
        text = text[:-3].strip()
    return f"{path}={text}"


def _axis_entries(entry: Axis | ZipAxes) -> list[list[tuple[Axis, int]]]:
    """Each choice an entry of ``axes`` offers: a list of (axis, value index)."""
    if isinstance(entry, ZipAxes):
        return [[(axis, i) for axis in entry.zip] for i in range(len(entry.zip[0].values))]
    return [[(entry, i)] for i in range(len(entry.values))]


def expand(spec: SweepSpec, base_seed: int, source: str) -> list[Point]:
    """Every point of ``spec`` (grid order, seeds innermost); refuses more than 100,000, and two
    points of one axis with the same label."""
    choices = [_axis_entries(entry) for entry in spec.axes]
    seeds = spec.seed_list(base_seed)
    count = math.prod(len(c) for c in choices) * len(seeds)
    if count > MAX_POINTS:
        raise ConfigError(source, "axes", f"{count:,} points (with seeds) is more than {MAX_POINTS:,}")
    _check_labels(spec, source)
    shared = tuple(override(path, value) for path, value in spec.set.items())
    if spec.slo is not None:  # the sweep's targets replace the scenario's
        shared = (*shared, override("slo", spec.slo.model_dump(exclude_none=True)))
    points = []
    for combo in itertools.product(*choices):
        picks = [pick for group in combo for pick in group]
        values = tuple((axis.column, axis.values[i]) for axis, i in picks)
        labels = tuple((axis.column, _label(axis, i)) for axis, i in picks)
        axis_overrides = tuple(override(axis.path, axis.values[i]) for axis, i in picks)
        for seed in seeds:
            points.append(Point(values, labels, seed, (*shared, *axis_overrides, f"seed={seed}")))
    return points


def _label(axis: Axis, index: int) -> str:
    return axis.labels[index] if axis.labels is not None else value_label(axis.values[index])


def _check_labels(spec: SweepSpec, source: str) -> None:
    for axis in spec.flat_axes():
        labels = [_label(axis, i) for i in range(len(axis.values))]
        where = f"axes ({axis.column})"
        for label in labels:
            if not label:
                raise ConfigError(source, where, "a value's label is empty: give labels")
            if len(quote(label, safe="")) + len(axis.column) + 1 > MAX_SEGMENT_CHARS:
                raise ConfigError(source, where, f"the value {label[:40]!r}... is too long for a folder: give labels")
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise ConfigError(source, where, f"two values are labelled {duplicates[0]!r}: give distinct labels")
