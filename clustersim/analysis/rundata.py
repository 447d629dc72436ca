"""Load one run directory (``requests.parquet``, ``steps.parquet``, ``summary.json``) for plotting.

Only the run's files are read; nothing from the simulator is imported, so figures can be drawn for
runs made by another clustersim version as long as the columns are there.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from clustersim.records import (
    LEDGER_CATEGORIES,
    LifecycleRecord,
    MemoryRecord,
    RequestRecord,
    StepRecord,
    TransferRecord,
)


def _columns(record: type[tuple[Any, ...]], *names: str) -> tuple[str, ...]:
    """Columns a figure needs, checked against the record that defines the file's schema."""
    fields: tuple[str, ...] = record._fields  # type: ignore[attr-defined]
    unknown = [name for name in names if name not in fields]
    if unknown:
        raise ValueError(f"{record.__name__} has no field(s) {', '.join(unknown)}")
    return names


# the columns the figures read (older runs may lack the others)
REQUEST_COLUMNS = _columns(
    RequestRecord,
    "request_id",
    "tenant",
    "replica",
    "prompt_tokens",
    "output_tokens",
    "arrival_at_s",
    "first_scheduled_at_s",
    "first_token_at_s",
    "finished_at_s",
    "status",
)  # and max_itl_s where the run has it
STEP_COLUMNS = _columns(
    StepRecord,
    "replica",
    "started_at_s",
    "duration_s",
    "num_steps",
    "num_seqs",
    "num_prefill_seqs",
    "num_decode_tokens",
    "num_emitted_tokens",
    "kv_used_blocks",
    "kv_total_blocks",
    "num_waiting",
)
MEMORY_COLUMNS = _columns(MemoryRecord, "replica", "started_at_s", "duration_s", "capacity_bytes", *LEDGER_CATEGORIES)
LIFECYCLE_COLUMNS = _columns(LifecycleRecord, "replica", "at_s", "event", "num_held", "num_retried", "num_lost")
TRANSFER_COLUMNS = _columns(
    TransferRecord, "request_id", "kv_bytes", "prefilled_at_s", "pulled_at_s", "started_at_s", "landed_at_s"
)
SCENARIO_METADATA_KEY = b"clustersim.scenario"


class RunDirError(Exception):
    """A run directory that cannot be plotted: missing, incomplete, or with unreadable files.

    Attributes:
        path: The file or directory at fault.
        problem: What is wrong with it, as one short phrase.
    """

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class RunData:
    """One run's event logs as data frames, plus its summary and scenario.

    Attributes:
        run_dir: The directory the files were read from.
        requests: One row per request (columns of ``requests.parquet``; missing times are NaN).
        steps: One row per scheduler iteration, or run of ``num_steps`` identical iterations whose
            total length is ``duration_s`` (columns of ``steps.parquet``).
        summary: ``summary.json`` as a dict (empty when the file is absent).
        scenario: The resolved scenario from the Parquet metadata (empty when absent).
        memory: The KV ledger (``memory.parquet``), or None for runs written before it existed.
        label: For a point of a sweep, its axis values and seed (from ``point.json``), else None.
        lifecycle: The replicas' failures and restarts (``lifecycle.parquet``), or None for a run
            without faults.
        transfers: The KV caches moved between pools (``transfers.parquet``), or None for a run that
            does not disaggregate.
    """

    run_dir: Path
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict[str, Any]
    scenario: dict[str, Any]
    memory: pd.DataFrame | None = None
    label: str | None = None  # a sweep point's axis values and seed (its point.json), else None
    lifecycle: pd.DataFrame | None = None
    transfers: pd.DataFrame | None = None

    @property
    def name(self) -> str:
        """The scenario's name, falling back to the run directory's name."""
        name = self.scenario.get("name") or self.summary.get("scenario")
        return str(name) if name else self.run_dir.name

    @property
    def title(self) -> str:
        """A figure title prefix: the scenario name, the sweep point's label (which variant) and the
        scheduler policy when known."""
        policy = (self.scenario.get("scheduler") or {}).get("policy")
        name = f"{self.name} [{self.label}]" if self.label else self.name
        return f"{name} (scheduler: {policy})" if policy else name

    @property
    def tenants(self) -> list[str]:
        """Tenant names in sorted order."""
        return sorted(str(t) for t in self.requests["tenant"].unique())

    @property
    def replicas(self) -> list[int]:
        """Replica indices: all configured replicas if the scenario says how many (its groups' counts, or
        ``num_replicas``), else those that ran steps."""
        cluster = self.scenario.get("cluster") or {}
        groups = cluster.get("groups") or []
        counts = [group.get("count") for group in groups if isinstance(group, dict)]
        whole = [count for count in counts if isinstance(count, int)]
        num_replicas = sum(whole) if whole and len(whole) == len(counts) else cluster.get("num_replicas")
        if isinstance(num_replicas, int) and num_replicas > 0:
            return list(range(num_replicas))
        return sorted(int(r) for r in self.steps["replica"].unique())

    def replica_label(self, replica: int) -> str:
        """``replica N``, with its role in a disaggregated cluster (``replica 2 (decode)``)."""
        roles = [
            str(group.get("role", "both"))
            for group in (self.scenario.get("cluster") or {}).get("groups") or []
            if isinstance(group, dict) and isinstance(group.get("count"), int)
            for _ in range(group["count"])
        ]
        role = roles[replica] if replica < len(roles) else "both"
        return f"replica {replica}" if role == "both" else f"replica {replica} ({role})"

    @property
    def makespan_s(self) -> float:
        """Simulated length of the run (s): from the summary, else the last event in the logs."""
        makespan_s = self.summary.get("makespan_s")
        if isinstance(makespan_s, int | float) and math.isfinite(makespan_s) and makespan_s > 0:
            return float(makespan_s)
        ends_s = [0.0]
        if len(self.steps):
            ends_s.append(float((self.steps["started_at_s"] + self.steps["duration_s"]).max()))
        for column in ("arrival_at_s", "finished_at_s"):
            last_s = self.requests[column].max()
            if pd.notna(last_s):
                ends_s.append(float(last_s))
        return max(ends_s)

    def completed(self) -> pd.DataFrame:
        """Requests whose status is ``completed``."""
        return self.requests[self.requests["status"] == "completed"]

    def emitted_tokens(self) -> NDArray[np.float64]:
        """Output tokens produced by each step row: ``num_steps * num_emitted_tokens``.

        Each iteration emits one token per decoding sequence plus the first token of every sequence
        whose prefill completed (a chunk that does not finish its prompt emits nothing).
        """
        per_step = self.steps["num_emitted_tokens"].to_numpy(np.float64)
        num_steps = self.steps["num_steps"].to_numpy(np.float64)
        emitted: NDArray[np.float64] = per_step * num_steps
        return emitted


def load_run(run_dir: Path) -> RunData:
    """Read a run directory written by ``clustersim run``.

    Args:
        run_dir: Directory holding ``requests.parquet``, ``steps.parquet`` and (optionally) ``summary.json``.

    Returns:
        The run's data.

    Raises:
        RunDirError: The directory or a required file is missing, unreadable, or lacks columns.
    """
    if not run_dir.exists():
        raise RunDirError(run_dir, "no such directory")
    if not run_dir.is_dir():
        raise RunDirError(run_dir, "not a directory (expected a clustersim run directory)")
    requests_path = run_dir / "requests.parquet"
    if (run_dir / "INCOMPLETE").exists():
        raise RunDirError(run_dir, "the run did not finish (INCOMPLETE is present): its files are partial or stale")
    if not requests_path.is_file():
        raise RunDirError(run_dir, "no requests.parquet here (not a clustersim run directory?)")
    requests, scenario = _read_table(requests_path, REQUEST_COLUMNS)
    steps, _ = _read_table(run_dir / "steps.parquet", STEP_COLUMNS)
    return RunData(
        run_dir=run_dir,
        requests=requests,
        steps=steps.sort_values(["replica", "started_at_s"], kind="stable").reset_index(drop=True),
        summary=_read_summary(run_dir / "summary.json"),
        scenario=scenario,
        memory=_read_table(run_dir / "memory.parquet", MEMORY_COLUMNS)[0]
        if (run_dir / "memory.parquet").is_file()
        else None,
        label=_point_label(run_dir / "point.json"),
        lifecycle=_read_table(run_dir / "lifecycle.parquet", LIFECYCLE_COLUMNS)[0]
        if (run_dir / "lifecycle.parquet").is_file()
        else None,
        transfers=_read_table(run_dir / "transfers.parquet", TRANSFER_COLUMNS)[0]
        if (run_dir / "transfers.parquet").is_file()
        else None,
    )


def _point_label(path: Path) -> str | None:
    """The label a sweep wrote for this run (None when the run is not a sweep's point)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    label = record.get("label") if isinstance(record, dict) else None
    return label if isinstance(label, str) and label else None


def _read_table(path: Path, required: tuple[str, ...]) -> tuple[pd.DataFrame, dict[str, Any]]:
    if not path.is_file():
        raise RunDirError(path, "no such file")
    try:
        table: pa.Table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise RunDirError(path, f"cannot read Parquet: {exc}") from None
    missing = [name for name in required if name not in table.column_names]
    if missing:
        raise RunDirError(path, f"missing column(s) {', '.join(missing)}")
    frame = table.to_pandas()
    for name in frame.columns:
        if name.endswith("_s"):
            frame[name] = frame[name].astype(np.float64)  # null times -> NaN
    return frame, _scenario_from_metadata(table.schema.metadata or {})


def _scenario_from_metadata(metadata: dict[bytes, bytes]) -> dict[str, Any]:
    raw = metadata.get(SCENARIO_METADATA_KEY)
    if raw is None:
        return {}
    try:
        scenario = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    return scenario if isinstance(scenario, dict) else {}


def _read_summary(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunDirError(path, f"cannot read JSON: {exc}") from None
    return summary if isinstance(summary, dict) else {}
