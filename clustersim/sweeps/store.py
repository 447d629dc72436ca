"""A sweep's folder: its runs, its tables, and what an earlier invocation already finished.

.. code-block:: text

    OUT/sweep.yaml               the sweep as run (the base scenario's path resolved)
    OUT/points.parquet, .csv     one row per point and seed: axes, seed, status, error, metrics, cost
    OUT/stats.parquet            one row per point: each metric's mean and 95% interval over seeds
    OUT/runs/<key>/              each point's run folder (the logs, summary.json, point.json)
    OUT/requests/<key>/part-0.parquet   ... and steps/, memory/, itl/: the logs as Hive-partitioned
                                 datasets (``pd.read_parquet("OUT/requests")`` gives every point's
                                 requests with the axis and seed columns)

The dataset files are hard links to the run folders' files (copies where links are refused), and are
rebuilt from the finished points at the end of every invocation, so a point dropped from the sweep
file, or re-run, leaves nothing stale behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from clustersim.sweeps.points import Point
from clustersim.sweeps.worker import POINT_FILE

TABLES = ("requests", "steps", "memory", "itl")
RUNS_FOLDER = "runs"


def run_dir(out_dir: Path, point: Point) -> Path:
    """Where ``point`` runs."""
    return out_dir / RUNS_FOLDER / point.key


def finished_row(out_dir: Path, point: Point, sha256: str) -> dict[str, Any] | None:
    """The row of ``point`` if an earlier invocation finished it (status ok) for the same resolved
    scenario and its run folder is whole; else None."""
    folder = run_dir(out_dir, point)
    try:
        record = json.loads((folder / POINT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("scenario_sha256") != sha256:
        return None
    row = record.get("row")
    if not isinstance(row, dict) or row.get("status") != "ok" or (folder / "INCOMPLETE").exists():
        return None
    if (
        not all((folder / f"{table}.parquet").is_file() for table in (*TABLES,))
        or not (folder / "summary.json").is_file()
    ):
        return None
    return row


def write_table_atomically(table: pa.Table, path: Path) -> None:
    """Write ``table`` as Parquet (and, for ``points``, CSV beside it) under a temporary name first."""
    partial = path.with_name(path.name + ".partial")
    pq.write_table(table, partial)
    os.replace(partial, path)


def write_csv_atomically(table: pa.Table, path: Path) -> None:
    partial = path.with_name(path.name + ".partial")
    pacsv.write_csv(table, partial)
    os.replace(partial, path)


def rebuild_datasets(out_dir: Path, points: list[Point], ok: set[str]) -> None:
    """Re-create ``OUT/<table>/`` from the run folders of the finished points (keys in ``ok``)."""
    for table in TABLES:
        target = out_dir / table
        staging = out_dir / f".{table}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        for point in points:
            if point.key not in ok:
                continue
            source = run_dir(out_dir, point) / f"{table}.parquet"
            destination = staging / point.key / "part-0.parquet"
            destination.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, destination)
            except OSError:
                shutil.copyfile(source, destination)
        shutil.rmtree(target, ignore_errors=True)
        if staging.exists():
            os.replace(staging, target)


def write_spec(out_dir: Path, text: str) -> None:
    """Keep the sweep as run beside its results."""
    partial = out_dir / "sweep.yaml.partial"
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, out_dir / "sweep.yaml")


def remove_stale(out_dir: Path) -> None:
    """Remove what an interrupted rebuild left (staging folders)."""
    for table in TABLES:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(out_dir / f".{table}.partial")
