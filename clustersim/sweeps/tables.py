"""The sweep's tables: ``points`` (one row per point and seed) and ``stats`` (one row per point:
every metric's mean over its seeds and 95% interval, Student's t).

The interval is ``mean +- t(0.975, n-1) * sd / sqrt(n)`` over the seeds that finished (scipy.stats);
with one seed it is empty (NaN). A point meets its SLO across seeds (``slo_met_all_seeds``) when
every seed ran and met it at the SLO's percentile; ``slo_met_seeds_frac`` says how many did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from clustersim.sweeps.points import Point
from clustersim.sweeps.spec import POINT_COLUMNS

CONFIDENCE = 0.95
NOT_METRICS = frozenset({*POINT_COLUMNS, "slo_met"})


def axis_array(points: Sequence[Point], index: int) -> pa.Array:
    """One axis's values as a typed column: bool, int64 or float64 where every value is one, else
    the labels as strings."""
    values = [p.values[index][1] for p in points]
    if all(isinstance(v, bool) for v in values):
        return pa.array(values, pa.bool_())
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return pa.array(values, pa.int64())
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return pa.array([float(v) for v in values], pa.float64())
    return pa.array([p.labels[index][1] for p in points], pa.string())


def _column(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], pa.string())


def points_table(points: Sequence[Point], rows: Sequence[dict[str, Any]]) -> pa.Table:
    """``points.parquet``: the axes, the seed, the point's status and every figure of its row."""
    columns: dict[str, pa.Array] = {}
    if points:
        for index, (column, _) in enumerate(points[0].values):
            columns[column] = axis_array(points, index)
    columns["seed"] = pa.array([p.seed for p in points], pa.int64())
    columns["variant"] = pa.array([p.variant for p in points], pa.string())
    columns["label"] = pa.array([p.label for p in points], pa.string())
    columns["point"] = pa.array([p.key for p in points], pa.string())
    columns["status"] = pa.array([r.get("status", "not run") for r in rows], pa.string())
    columns["error"] = pa.array([r.get("error") for r in rows], pa.string())
    columns["reused"] = pa.array([bool(r.get("reused", False)) for r in rows], pa.bool_())
    columns["wall_s"] = pa.array([r.get("wall_s") for r in rows], pa.float64())
    columns["scenario_sha256"] = pa.array([r.get("scenario_sha256") for r in rows], pa.string())
    metrics: list[str] = []
    for row in rows:
        metrics.extend(k for k in row if k not in columns and k not in metrics and k != "reused")
    for name in metrics:
        columns[name] = _column([row.get(name) for row in rows])
    return pa.table(columns)


def interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high) of the 95% Student-t interval of the mean; NaN bounds for one value."""
    array = np.asarray(values, dtype=np.float64)
    mean = float(array.mean())
    if array.size < 2:
        return mean, math.nan, math.nan
    from scipy import stats as scipy_stats  # here, not at the top: it costs most of a second to import

    half = float(scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, array.size - 1) * array.std(ddof=1) / math.sqrt(array.size))
    return mean, mean - half, mean + half


def stats_table(points_tbl: pa.Table, axis_columns: Sequence[str]) -> pa.Table:
    """``stats.parquet``: one row per variant (its axis values), with ``num_seeds``, ``num_ok``,
    the SLO verdict across seeds, and ``<metric>_mean``/``_ci_low``/``_ci_high`` per numeric metric."""
    data = points_tbl.to_pylist()
    order: list[str] = []
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in data:
        if row["variant"] not in groups:
            order.append(row["variant"])
            groups[row["variant"]] = []
        groups[row["variant"]].append(row)
    numeric = [
        field.name
        for field in points_tbl.schema
        if field.name not in NOT_METRICS
        and field.name not in axis_columns
        and (pa.types.is_integer(field.type) or pa.types.is_floating(field.type))
    ]
    out_rows = [_stats_row(groups[variant], axis_columns, numeric) for variant in order]
    if not out_rows:
        return pa.table({"variant": pa.array([], pa.string())})
    table = pa.Table.from_pylist(out_rows)
    axis_fields = [points_tbl.schema.field(c) for c in axis_columns]
    return table.cast(pa.schema([*axis_fields, *(f for f in table.schema if f.name not in axis_columns)]))


def _stats_row(rows: list[dict[str, Any]], axis_columns: Sequence[str], numeric: list[str]) -> dict[str, Any]:
    ok = [r for r in rows if r["status"] == "ok"]
    verdicts = [r.get("slo_met") for r in ok]
    judged = any(v is not None for v in verdicts)
    out: dict[str, Any] = {c: rows[0][c] for c in axis_columns}
    out["variant"] = rows[0]["variant"]
    out["num_seeds"] = len(rows)
    out["num_ok"] = len(ok)
    out["error"] = next((r["error"] for r in rows if r["error"]), None)
    out["slo_met_all_seeds"] = (len(ok) == len(rows) and all(v is True for v in verdicts)) if judged else None
    out["slo_met_seeds_frac"] = (sum(v is True for v in verdicts) / len(rows)) if judged else None
    for name in numeric:
        values = [float(r[name]) for r in ok if r.get(name) is not None and math.isfinite(float(r[name]))]
        mean, low, high = interval(values) if values else (None, None, None)
        out[f"{name}_mean"], out[f"{name}_ci_low"], out[f"{name}_ci_high"] = mean, low, high
    return out
