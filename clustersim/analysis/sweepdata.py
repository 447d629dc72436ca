"""Load a sweep folder (``points.parquet``, ``stats.parquet``, ``sweep.yaml``) or a plan folder
(``plan.parquet``, ``evaluations.parquet``) for the figures and the report. Reads files only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import yaml

from clustersim.analysis.rundata import RunDirError


@dataclass(frozen=True)
class SweepData:
    """A sweep's tables: one row per point and seed, one per variant; its axes and its file."""

    folder: Path
    name: str
    points: pd.DataFrame
    stats: pd.DataFrame
    axes: list[str]
    spec_text: str

    def requests(self, columns: list[str]) -> pd.DataFrame:
        """Every finished point's requests (``columns`` plus the axes and seed)."""
        folder = self.folder / "requests"
        if not folder.is_dir():
            return pd.DataFrame(columns=[*self.axes, "seed", *columns])
        table = pq.read_table(folder, columns=[*columns, *self.axes, "seed"])
        frame = table.to_pandas()
        for axis in [*self.axes, "seed"]:  # partition columns come back as categories of text
            frame[axis] = frame[axis].astype(str)
        return frame

    def is_rate(self, axis: str) -> bool:
        """Whether an axis is an offered rate (its name ends in ``rate_per_s`` and its values are numbers)."""
        return axis.endswith("rate_per_s") and pd.api.types.is_numeric_dtype(self.stats[axis])

    def slo_targets(self) -> tuple[float | None, dict[str, float]]:
        """The sweep file's SLO: its percentile (if any) and its targets in seconds by name (``ttft_s``)."""
        spec: Any = yaml.safe_load(self.spec_text) or {}
        slo = spec.get("slo") or {}
        targets = {k: float(v) for k, v in slo.items() if k.endswith("_s") and v is not None}
        percentile = slo.get("percentile")
        return (float(percentile) if percentile is not None else None), targets


@dataclass(frozen=True)
class PlanData:
    """A plan's ranked table, its evaluations and its file."""

    folder: Path
    name: str
    plan: pd.DataFrame
    evaluations: pd.DataFrame
    spec_text: str


def _read(path: Path) -> pd.DataFrame:
    try:
        return pq.read_table(path).to_pandas()
    except (OSError, ValueError) as exc:
        raise RunDirError(path, f"cannot be read: {exc}") from None


def load_sweep_dir(folder: Path) -> SweepData:
    """Read a sweep folder written by ``clustersim sweep`` or ``compare``."""
    for name in ("points.parquet", "stats.parquet", "sweep.yaml"):
        if not (folder / name).is_file():
            raise RunDirError(folder, f"not a sweep folder: no {name}")
    spec_text = (folder / "sweep.yaml").read_text(encoding="utf-8")
    spec: Any = yaml.safe_load(spec_text)
    axes = [a["name"] or a["path"].rsplit(".", 1)[-1] for e in spec.get("axes", []) for a in _flat(e)]
    stats = _read(folder / "stats.parquet")
    axes = [axis for axis in axes if axis in stats.columns]
    return SweepData(folder, str(spec.get("name", folder.name)), _read(folder / "points.parquet"), stats, axes,
                     spec_text)  # fmt: skip


def _flat(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return list(entry["zip"]) if "zip" in entry else [entry]


def load_plan_dir(folder: Path) -> PlanData:
    """Read a plan folder written by ``clustersim plan``."""
    for name in ("plan.parquet", "evaluations.parquet"):
        if not (folder / name).is_file():
            raise RunDirError(folder, f"not a plan folder: no {name}")
    spec_file = folder / "plan.yaml"
    spec_text = spec_file.read_text(encoding="utf-8") if spec_file.is_file() else ""
    name = str((yaml.safe_load(spec_text) or {}).get("name", folder.name)) if spec_text else folder.name
    return PlanData(folder, name, _read(folder / "plan.parquet"), _read(folder / "evaluations.parquet"), spec_text)
