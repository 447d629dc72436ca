"""Predict corpus rows with candidate engine profiles, in worker processes (what a fit evaluates).

A candidate is a catalogue folder: the built-in hardware and model profiles, linked, beside engine
profiles written for the candidate (:func:`candidate_root`). Each row's scenario is planned against
it and run in a scratch folder that is removed afterwards; only its measured metrics come back.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.config.profiles import EngineProfile
from clustersim.errors import ClusterSimError, one_line
from clustersim.runner import run_plan
from clustersim.runplan import plan_run
from clustersim.validation.boundrate import search_rate
from clustersim.validation.measure import measure_run
from clustersim.validation.rowscenario import RowScenario, with_rate_factor

Prediction = dict[str, float]


@dataclass(frozen=True)
class RowTask:
    """One row to predict: its scenario mapping and how to measure it (plain data, for a worker)."""

    row_id: str
    mapping: dict[str, Any]
    steady: bool
    replicas_per_run: int = 0
    p99_bounds_ms: tuple[float, float] | None = None  # run at the highest rate meeting these (boundrate)
    rate_factor: float | None = None  # with bounds: run at this factor of the rate instead of searching


def task_of(built: RowScenario) -> RowTask:
    assert built.mapping is not None
    row = built.row
    return RowTask(row.row_id, built.mapping, built.steady, built.replicas_per_run, row.p99_bounds_ms)


def tasks_of(built: Sequence[RowScenario]) -> list[RowTask]:
    return [task_of(b) for b in built if b.mapping is not None]


def run_metrics(task: RowTask, mapping: dict[str, Any], root: str) -> tuple[Prediction | None, str]:
    """Run ``mapping`` (one of ``task``'s scenarios) against the catalogue at ``root``: its metrics, or
    None and the error."""
    scratch = Path(tempfile.mkdtemp(prefix="clustersim-fit-"))
    try:
        scenario = scenario_from_mapping(mapping, task.row_id)
        plan = plan_run(LoadedScenario(scenario, task.row_id, scratch), Catalogue(Path(root)))
        run_plan(plan, scratch / "run")
        return measure_run(scratch / "run", task.steady, task.replicas_per_run), ""
    except ClusterSimError as exc:
        return None, one_line(str(exc))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def bounded_factor(task: RowTask, root: str) -> tuple[float, bool]:
    """For a row with p99 bounds: the factor of its rate at which the simulated deployment meets them, and
    whether any rate met them. One that no rate meets (down to ``GROWTH ** -MAX_STEPS``) runs at the
    published rate: its latencies there say which bound the model misses, where the lowest rate tried
    would report a throughput error that only says "never"."""
    assert task.p99_bounds_ms is not None
    found = search_rate(lambda f: run_metrics(task, with_rate_factor(task.mapping, f), root)[0], *task.p99_bounds_ms)
    return (found.factor, True) if found.met else (1.0, False)


def predict_task(task: RowTask, root: str) -> tuple[str, Prediction | None, str]:
    """Run one row against the catalogue at ``root``: (row id, its metrics or None, the error if any).
    A row with p99 bounds runs at the highest rate meeting them, searched unless the task fixes it (the
    factor is the prediction's ``rate_factor``, and ``bounds_met`` is 0 where no rate met them)."""
    if task.p99_bounds_ms is None:
        found, error = run_metrics(task, task.mapping, root)
        return task.row_id, found, error
    factor, met = (task.rate_factor, True) if task.rate_factor is not None else bounded_factor(task, root)
    found, error = run_metrics(task, with_rate_factor(task.mapping, factor), root)
    if found is not None:
        found["rate_factor"] = factor
        found["bounds_met"] = float(met)
    return task.row_id, found, error


def predict_all(tasks: Sequence[RowTask], root: Path, pool: Executor | None) -> dict[str, Prediction | None]:
    """Every task's prediction, in parallel on ``pool`` (in this process without one)."""
    if pool is None:
        return {row_id: found for row_id, found, _ in (predict_task(t, str(root)) for t in tasks)}
    futures = [pool.submit(predict_task, t, str(root)) for t in tasks]
    return {row_id: found for row_id, found, _ in (f.result() for f in futures)}


def candidate_root(base: Path, engines: Mapping[str, EngineProfile], into: Path) -> Path:
    """A catalogue at ``into``: ``base``'s GPUs and models (linked) and ``engines`` written as YAML."""
    into.mkdir(parents=True, exist_ok=True)
    for kind in ("gpus", "models"):
        link = into / kind
        if not link.exists():
            os.symlink((base / kind).resolve(), link, target_is_directory=True)
    engines_dir = into / "engines"
    engines_dir.mkdir(exist_ok=True)
    for path in engines_dir.glob("*.yaml"):
        path.unlink()
    for name, profile in engines.items():
        data = profile.model_dump(mode="json", exclude_none=True)
        (engines_dir / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return into
