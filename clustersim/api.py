"""The Python API: run a scenario, a sweep or a plan from a notebook or a script, and load results.

.. code-block:: python

    import clustersim

    result = clustersim.run("default", cluster__num_replicas=3, in_memory=True)
    result.summary["ttft_s"]["p99"]
    result.requests.to_pandas()                 # pyarrow Tables: requests, steps, memory, itl

    sweep = clustersim.sweeps("rate-curve", out="runs/rc")          # or a path, or a dict
    sweep.stats_table.to_pandas()
    plan = clustersim.plans("chat-60rps", out="runs/plan")
    clustersim.load("runs/rc/runs/rate_per_s=40/scheduler=vllm_v1/seed=42")

A scenario, sweep or plan is a built-in name, a path to a YAML file, or a dict (validated exactly as
a file, errors naming the field). Overrides are Python values by dotted path, in ``overrides`` or as
keyword arguments with ``__`` for the dots. Bad input raises :class:`clustersim.errors.ClusterSimError`
(its message is the one line the command prints).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from clustersim.cli_common import resolve_data_file, resolve_scenario_path
from clustersim.config.loader import LoadedScenario, apply_overrides, read_yaml_mapping, scenario_from_mapping
from clustersim.config.scenario import Scenario
from clustersim.config.yamlsafe import check_size
from clustersim.errors import ClusterSimError, ConfigError
from clustersim.plans import PlanResult, load_plan, plan_from_mapping, run_plan_spec
from clustersim.runner import run_scenario
from clustersim.sweeps import SweepResult, load_sweep, resolve_base, run_sweep, sweep_from_mapping
from clustersim.sweeps.backends import BackendName
from clustersim.sweeps.points import override

TABLES = ("requests", "steps", "memory", "itl")


@dataclass(frozen=True)
class Result:
    """One run: its summary, resolved scenario, folder (None when run in memory) and logs as Arrow tables."""

    summary: dict[str, Any]
    scenario: Scenario
    out_dir: Path | None
    scenario_sha256: str
    _tables: dict[str, pa.Table] = field(default_factory=dict, repr=False)

    def table(self, name: str) -> pa.Table:
        """A log by name (``requests``, ``steps``, ``memory``, ``itl``), read on first use."""
        if name not in TABLES:
            raise ClusterSimError(f"no log named {name!r}; the logs are {', '.join(TABLES)}")
        if name not in self._tables:
            assert self.out_dir is not None
            self._tables[name] = pq.read_table(self.out_dir / f"{name}.parquet")
        return self._tables[name]

    @property
    def requests(self) -> pa.Table:
        return self.table("requests")

    @property
    def steps(self) -> pa.Table:
        return self.table("steps")

    @property
    def memory(self) -> pa.Table:
        return self.table("memory")

    @property
    def itl(self) -> pa.Table:
        return self.table("itl")

    def to_pandas(self, name: str = "requests") -> Any:
        """A log as a pandas DataFrame (needs pandas: the plots extra)."""
        try:
            import pandas  # noqa: F401  (only to say clearly that it is missing)
        except ImportError:
            raise ClusterSimError("to_pandas needs pandas: python -m pip install 'clustersim[plots]'") from None
        return self.table(name).to_pandas()


def _merged(overrides: Mapping[str, Any] | None, dotted: Mapping[str, Any]) -> list[str]:
    merged = {**(overrides or {}), **{key.replace("__", "."): value for key, value in dotted.items()}}
    return [override(path, value) for path, value in merged.items()]


def _loaded(scenario: str | Path | Mapping[str, Any] | None, overrides: list[str]) -> LoadedScenario:
    if isinstance(scenario, Mapping):
        source = "scenario dict" + (" (with overrides)" if overrides else "")
        raw = apply_overrides(dict(scenario), overrides, source)
        check_size(raw, source)
        return LoadedScenario(scenario_from_mapping(raw, source), source, Path.cwd())
    path = resolve_scenario_path(None if scenario is None else str(scenario))
    raw = apply_overrides(read_yaml_mapping(path), overrides, str(path))
    source = f"{path} (with overrides)" if overrides else str(path)
    check_size(raw, source)
    return LoadedScenario(scenario_from_mapping(raw, source), source, path.resolve().parent)


def run(
    scenario: str | Path | Mapping[str, Any] | None = None,
    *,
    out: str | Path | None = None,
    in_memory: bool = False,
    overrides: Mapping[str, Any] | None = None,
    **dotted: Any,
) -> Result:
    """Run a scenario (None: the built-in default) and return its :class:`Result`.

    Args:
        scenario: A built-in name, a YAML path, or the scenario as a dict.
        out: The folder to write (as ``clustersim run --out``); default a new folder under ``runs/``.
        in_memory: Run in a temporary folder, keep the logs in memory, remove the folder.
        overrides: Python values by dotted path (``{"cluster.num_replicas": 4}``).
        **dotted: More overrides, ``__`` standing for ``.`` (``cluster__num_replicas=4``).
    """
    if in_memory and out is not None:
        raise ClusterSimError("run: give out or in_memory, not both")
    loaded = _loaded(scenario, _merged(overrides, dotted))
    if not in_memory:
        result = run_scenario(loaded, Path(out) if out is not None else None)
        return load(result.out_dir)
    scratch = Path(tempfile.mkdtemp(prefix="clustersim-run-"))
    try:
        folder = run_scenario(loaded, scratch / "run").out_dir
        found = load(folder)
        tables = {name: found.table(name) for name in TABLES}
        return Result(found.summary, found.scenario, None, found.scenario_sha256, tables)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def load(run_dir: str | Path) -> Result:
    """A run folder written earlier (by ``clustersim run``, a sweep or a plan)."""
    folder = Path(run_dir)
    if not folder.is_dir():
        raise ClusterSimError(f"{folder}: no such run folder")
    if (folder / "INCOMPLETE").exists():
        reason = (folder / "INCOMPLETE").read_text(encoding="utf-8", errors="replace").strip()
        raise ClusterSimError(f"{folder}: this run did not finish ({reason})")
    missing = [f"{name}.parquet" for name in TABLES if not (folder / f"{name}.parquet").is_file()]
    if not (folder / "summary.json").is_file() or missing:
        hint = " (a sweep or plan folder? load one of its runs/ folders)" if (folder / "runs").is_dir() else ""
        raise ClusterSimError(f"{folder}: not a run folder: no {', '.join(['summary.json', *missing][:3])}{hint}")
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    metadata = pq.read_schema(folder / "requests.parquet").metadata or {}
    scenario_json = metadata.get(b"clustersim.scenario")
    if scenario_json is None:
        raise ClusterSimError(f"{folder}: requests.parquet carries no scenario (not written by clustersim?)")
    scenario = Scenario.model_validate_json(scenario_json)
    sha = metadata.get(b"clustersim.scenario_sha256", b"").decode()
    return Result(summary, scenario, folder, sha)


def _spec_source(spec: str | Path | Mapping[str, Any], folder: str) -> tuple[Path | None, Any]:
    if isinstance(spec, Mapping):
        return None, dict(spec)
    return resolve_data_file(str(spec), folder), None


def sweep(
    spec: str | Path | Mapping[str, Any],
    *,
    out: str | Path | None = None,
    jobs: int | None = None,
    backend: BackendName = "local",
    address: str | None = None,
) -> SweepResult:
    """Run a sweep (a built-in name, a YAML path, or a dict; a dict's ``base`` resolves from the
    working folder) and return its tables; rerun into the same ``out`` to reuse finished points."""
    path, raw = _spec_source(spec, "sweeps")
    loaded = load_sweep(path) if path is not None else sweep_from_mapping(raw, "sweep dict")
    base = resolve_base(loaded.base, path.parent if path is not None else None)
    target = Path(out) if out is not None else None
    return run_sweep(loaded, base, target, source=str(path or "sweep dict"), jobs=jobs, backend=backend,
                     address=address)  # fmt: skip


def plan(
    spec: str | Path | Mapping[str, Any],
    *,
    out: str | Path | None = None,
    jobs: int | None = None,
    backend: BackendName = "local",
    address: str | None = None,
) -> PlanResult:
    """Answer a capacity plan (a built-in name, a YAML path, or a dict) and return its answers; the
    ranked table is ``result.out_dir / "plan.parquet"``."""
    path, raw = _spec_source(spec, "plans")
    loaded = load_plan(path) if path is not None else plan_from_mapping(raw, "plan dict")
    base = resolve_base(loaded.base, path.parent if path is not None else None)
    target = Path(out) if out is not None else None
    return run_plan_spec(loaded, base, target, source=str(path or "plan dict"), jobs=jobs, backend=backend,
                         address=address)  # fmt: skip


__all__ = ["ConfigError", "Result", "load", "plan", "run", "sweep"]
