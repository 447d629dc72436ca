"""Run a sweep: expand its points, skip those an earlier invocation finished, run the rest on a
backend, and write the tables, even when interrupted.

A point is skipped when its run folder holds a finished run of the same resolved scenario (the hash
stamped on its Parquet files), so a sweep killed midway and started again computes only what is
missing; editing the sweep or the base scenario re-runs exactly the points it changes. A point
that fails (bad input, a bug) records its one-line error and the rest go on. ``points.parquet``,
``stats.parquet`` and the datasets are written when the sweep ends, stops on an error or is
interrupted (Ctrl-C), from every point finished so far.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from clustersim.config.base import MAX_SEED
from clustersim.config.catalogue import builtin_data_dir
from clustersim.config.loader import apply_overrides, check_unknown_keys, read_yaml_mapping
from clustersim.config.scenario import Scenario
from clustersim.errors import ClusterSimError, ConfigError, one_line
from clustersim.outdir import claimed_folder, new_default_folder
from clustersim.sweeps.backends import BackendName, make_backend
from clustersim.sweeps.points import Point, expand, override
from clustersim.sweeps.spec import SweepSpec, ZipAxes
from clustersim.sweeps.store import finished_row as earlier_row
from clustersim.sweeps.store import (
    rebuild_datasets,
    remove_stale,
    run_dir,
    write_csv_atomically,
    write_spec,
    write_table_atomically,
)
from clustersim.sweeps.tables import points_table, stats_table
from clustersim.sweeps.worker import PointTask, plan_point, scenario_sha256, write_point_file

OnPoint = Callable[[Point, dict[str, Any]], None]
OnStart = Callable[[int], None]


@dataclass(frozen=True)
class SweepResult:
    """A sweep's folder, its points and their rows (in point order), and its tables."""

    out_dir: Path
    points: list[Point]
    rows: list[dict[str, Any]]
    points_table: pa.Table
    stats_table: pa.Table
    axis_columns: list[str]

    @property
    def num_failed(self) -> int:
        return sum(1 for row in self.rows if row.get("status") == "failed")


def resolve_base(base: str, relative_to: Path | None) -> Path:
    """A base scenario: a file (relative to the sweep file's folder), else a built-in name."""
    path = Path(base)
    if relative_to is not None and not path.is_absolute():
        candidate = relative_to / path
        if candidate.exists() or path.suffix in (".yaml", ".yml"):
            return candidate
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    builtin = builtin_data_dir("scenarios") / f"{base}.yaml"
    return builtin if builtin.exists() else path


def prepare(spec: SweepSpec, base_path: Path, source: str) -> list[Point]:
    """The sweep's points. The base scenario is read once here (a missing or unreadable file, or a
    shared override that names no field, stops the sweep before it starts), for its seed; whether
    each point's scenario is valid is the point's own business."""
    try:
        base = read_yaml_mapping(base_path)
        raw = apply_overrides(base, [override(path, value) for path, value in spec.set.items()], str(base_path))
    except ConfigError as exc:
        raise ConfigError(source, "base", one_line(str(exc))) from None
    seed = raw.get("seed", Scenario.model_fields["seed"].default)
    base_seed = seed if isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= MAX_SEED else 0
    points = expand(spec, base_seed, source)
    _check_field_names(spec, base, points, source)
    return points


def _check_field_names(spec: SweepSpec, base: dict[str, Any], points: list[Point], source: str) -> None:
    """Refuse a sweep whose ``set`` or an axis names a field the scenario does not have (or a list
    item it lacks): every point would fail the same way. Values are each point's own business."""
    try:
        check_unknown_keys(base, Scenario, "scenario")
    except ConfigError as exc:
        raise ConfigError(source, "base", f"{exc.field_path}: {exc.problem}") from None
    checked: set[tuple[str, ...]] = set()
    for point in points:
        variant = point.overrides[:-1]  # the seed override is the same path for every point
        if variant in checked:
            continue
        checked.add(variant)
        try:
            check_unknown_keys(apply_overrides(base, variant, "scenario"), Scenario, "scenario")
        except ConfigError as exc:
            where = _sweep_field(spec, exc.field_path)
            raise ConfigError(source, where, f"{exc.field_path}: {exc.problem}") from None


def _sweep_field(spec: SweepSpec, field_path: str) -> str:
    """The sweep's own field that sets the scenario field ``field_path``: ``set.<path>``, or
    ``axes[i].path`` (``axes[i].values`` when the name is inside the axis's values), found by the
    longest shared leading part."""
    wanted = re.sub(r"\[(\d+)\]", r".\1", field_path).split(".")
    candidates = [(f"set.{path}", path.split(".")) for path in spec.set]
    for index, entry in enumerate(spec.axes):
        axes = entry.zip if isinstance(entry, ZipAxes) else [entry]
        candidates += [(f"axes[{index}]", axis.path.split(".")) for axis in axes]

    def shared(parts: list[str]) -> int:
        return next(
            (i for i, (a, b) in enumerate(zip(parts, wanted, strict=False)) if a != b), min(len(parts), len(wanted))
        )

    name, parts = max(candidates, key=lambda c: shared(c[1]), default=("set", []))
    if shared(parts) == 0:
        return "set"
    if name.startswith("axes"):
        return f"{name}.values" if len(wanted) > len(parts) else f"{name}.path"
    return name


def run_sweep(
    spec: SweepSpec,
    base_path: Path,
    out_dir: Path | None,
    *,
    source: str = "sweep",
    jobs: int | None = None,
    backend: BackendName = "local",
    address: str | None = None,
    on_start: OnStart | None = None,
    on_point: OnPoint | None = None,
) -> SweepResult:
    """Run every point of ``spec`` not already finished in ``out_dir`` (None: a new folder
    ``runs/sweep-<name>-<time>``) and write the sweep's tables; ``on_point`` hears of each point as
    it is settled (reused, failed before running, or run), ``on_start`` of how many there are."""
    points = prepare(spec, base_path, source)
    if on_start is not None:
        on_start(len(points))
    if out_dir is None:
        out_dir = new_default_folder(f"sweep-{spec.name}")
    with claimed_folder(out_dir):
        remove_stale(out_dir)
        write_spec(out_dir, _spec_text(spec, base_path))
        rows: list[dict[str, Any]] = [{} for _ in points]
        try:
            tasks, indices = _settle_known(spec, base_path, out_dir, points, rows, on_point)
            runner = make_backend(backend, jobs, address, len(tasks))
            for task_index, row in runner.run(tasks):
                index = indices[task_index]
                row["scenario_sha256"] = tasks[task_index].scenario_sha256
                row["reused"] = False
                rows[index] = row
                if on_point is not None:
                    on_point(points[index], row)
        finally:
            result = _write_tables(out_dir, points, rows, spec)
    return result


def _settle_known(
    spec: SweepSpec,
    base_path: Path,
    out_dir: Path,
    points: list[Point],
    rows: list[dict[str, Any]],
    on_point: OnPoint | None,
) -> tuple[list[PointTask], list[int]]:
    """Fill ``rows`` for points finished earlier or failing to load; return the tasks to run and
    their point indices."""
    tasks, indices = [], []
    prices = dict(spec.prices_usd_per_gpu_hour)
    for index, point in enumerate(points):
        folder = run_dir(out_dir, point)
        try:
            sha = scenario_sha256(plan_point(str(base_path), point.overrides))
        except ClusterSimError as exc:
            rows[index] = {"status": "failed", "error": one_line(str(exc)), "wall_s": 0.0, "reused": False}
            task = PointTask(str(base_path), point.overrides, str(folder.resolve()), point.key, point.label, "")
            write_point_file(folder, task, rows[index])
        else:
            earlier = earlier_row(out_dir, point, sha)
            if earlier is None:
                folder_text = str(folder.resolve())
                tasks.append(
                    PointTask(str(base_path), point.overrides, folder_text, point.key, point.label, sha, prices)
                )
                indices.append(index)
                continue
            rows[index] = {**earlier, "reused": True, "scenario_sha256": sha}
        if on_point is not None:
            on_point(point, rows[index])
    return tasks, indices


def _write_tables(out_dir: Path, points: list[Point], rows: list[dict[str, Any]], spec: SweepSpec) -> SweepResult:
    axis_columns = [axis.column for axis in spec.flat_axes()]
    table = points_table(points, rows)
    stats = stats_table(table, axis_columns)
    write_table_atomically(table, out_dir / "points.parquet")
    write_csv_atomically(table, out_dir / "points.csv")
    write_table_atomically(stats, out_dir / "stats.parquet")
    rebuild_datasets(out_dir, points, {p.key for p, r in zip(points, rows, strict=True) if r.get("status") == "ok"})
    return SweepResult(out_dir, points, rows, table, stats, axis_columns)


def _spec_text(spec: SweepSpec, base_path: Path) -> str:
    data = spec.model_dump(mode="json", exclude_defaults=False)
    data["base"] = str(base_path.resolve())
    return yaml.safe_dump(data, sort_keys=False)
