"""Run one point of a sweep in whatever process it lands in, and return its row of ``points.parquet``.

A point never raises: bad input is its one-line error, anything unexpected is ``internal error:
...`` with the traceback kept in the point's ``point.json``. The row holds the summary's figures
under flat, unit-suffixed names (``ttft_p99_s``, ``slo_attainment_frac``) and the cost: GPUs,
dollars per hour and per million output tokens.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import load_scenario
from clustersim.errors import ClusterSimError, one_line
from clustersim.invariants import InvariantViolation
from clustersim.runner import run_plan, scenario_metadata
from clustersim.runplan import RunPlan, plan_run

POINT_FILE = "point.json"
STAT_BLOCKS = ("ttft_s", "tpot_s", "max_itl_s", "e2e_s", "queue_s", "itl_s")
SKIPPED_KEYS = ("scenario", "seed", "clustersim_version", "kv_blocks_per_replica", "tenants")


@dataclass(frozen=True)
class PointTask:
    """What a worker needs to run one point (plain data: it crosses process and machine bounds)."""

    scenario_path: str
    overrides: tuple[str, ...]
    run_dir: str  # absolute
    key: str
    label: str
    scenario_sha256: str
    prices_usd_per_gpu_hour: dict[str, float] = field(default_factory=dict)
    catalogue_root: str = ""  # a hardware_profiles folder to use instead of the built-in one


def plan_point(scenario_path: str, overrides: tuple[str, ...], catalogue_root: str = "") -> RunPlan:
    """The point's scenario, loaded, overridden and planned (raises ClusterSimError for bad input);
    profiles from ``catalogue_root`` if given, else the built-in catalogue."""
    catalogue = Catalogue(Path(catalogue_root)) if catalogue_root else None
    return plan_run(load_scenario(Path(scenario_path), overrides), catalogue)


def scenario_sha256(plan: RunPlan) -> str:
    """The hash of the resolved scenario, as stamped on the run's Parquet files."""
    return scenario_metadata(plan.scenario)["clustersim.scenario_sha256"]


def run_point(task: PointTask) -> dict[str, Any]:
    """Run ``task`` into its folder and return its row (``status`` ok or failed, never raising)."""
    started = time.perf_counter()
    row: dict[str, Any] = {"status": "failed", "error": None}
    details: str | None = None
    try:
        plan = plan_point(task.scenario_path, task.overrides, task.catalogue_root)
        result = run_plan(plan, Path(task.run_dir))
        row.update(flatten_summary(result.summary))
        prices, provisioned = task.prices_usd_per_gpu_hour, provisioned_frac(result.summary)
        row.update(cost_columns(plan, result.summary.get("output_tokens_per_s"), prices, provisioned))
        row["status"] = "ok"
    except ClusterSimError as exc:
        row["error"] = one_line(str(exc))
    except InvariantViolation as exc:
        row["error"] = one_line(f"internal error: an invariant broke: {exc}")
    except Exception as exc:  # a bug: the sweep goes on, the traceback is kept for the report
        row["error"] = one_line(f"internal error: {type(exc).__name__}: {exc}")
        details = traceback.format_exc()
    row["wall_s"] = time.perf_counter() - started
    write_point_file(Path(task.run_dir), task, row, details)
    return row


def write_point_file(run_dir: Path, task: PointTask, row: dict[str, Any], details: str | None = None) -> None:
    """``point.json``: the point's key, label, scenario hash and row, written atomically."""
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {"key": task.key, "label": task.label, "scenario_sha256": task.scenario_sha256, "row": row}
    if details is not None:
        record["traceback"] = details
    partial = run_dir / (POINT_FILE + ".partial")
    partial.write_text(json.dumps(record, indent=1, allow_nan=True) + "\n", encoding="utf-8")
    os.replace(partial, run_dir / POINT_FILE)


def flatten_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's scalars as flat columns with the unit last: ``ttft_s.p99`` -> ``ttft_p99_s``,
    ``slo.attainment_frac`` -> ``slo_attainment_frac``, ``slo.percentile_met`` -> ``slo_met``."""
    flat: dict[str, Any] = {}
    for key, value in summary.items():
        if key in SKIPPED_KEYS:
            continue
        if key in STAT_BLOCKS and isinstance(value, dict):
            stem = key.removesuffix("_s")
            for stat, number in value.items():
                flat[f"{stem}_num_gaps" if stat == "num_gaps" else f"{stem}_{stat}_s"] = number
        elif isinstance(value, dict):
            _flatten_block(key, value, flat)
        elif not isinstance(value, list):
            flat[key] = value
    if "slo_percentile_met" in flat:  # the verdict first among the SLO figures
        flat["slo_met"] = flat.pop("slo_percentile_met")
        later = [k for k in flat if k.startswith(("slo_", "replicas_", "kv_", "simulator_")) and k != "slo_met"]
        flat = {**{k: v for k, v in flat.items() if k not in later}, **{k: flat[k] for k in later}}
    return flat


def _flatten_block(prefix: str, block: dict[str, Any], flat: dict[str, Any]) -> None:
    for key, value in block.items():
        name = f"{prefix}_{key}"
        if isinstance(value, dict):
            _flatten_block(name.replace("_percentile_values", "_percentile"), value, flat)
        elif not isinstance(value, list):
            flat[name] = value


def provisioned_frac(summary: dict[str, Any]) -> float:
    """The share of the pool's GPU-hours the run paid for: 1, or what its autoscaler provisioned."""
    scaler = summary.get("autoscaler")
    saved = scaler.get("gpu_hours_saved_frac") if isinstance(scaler, dict) else None
    return 1.0 - saved if isinstance(saved, float) else 1.0


def cost_columns(
    plan: RunPlan,
    output_tokens_per_s: float | None,
    prices_usd_per_gpu_hour: dict[str, float],
    provisioned_frac: float = 1.0,
) -> dict[str, Any]:
    """GPUs in the cluster, its price per hour (the sweep's prices, else each GPU profile's) and
    per million output tokens at the run's output rate (None where a price or the rate is missing).
    ``provisioned_frac``: with an autoscaler, the share of the pool's GPU-hours it provisioned (the
    price per hour is the pool's times it: exact when every GPU of the pool costs the same)."""
    num_gpus, usd_per_hour = 0, 0.0
    priced = True
    for group in plan.groups:
        gpus = group.count * group.tensor_parallel * group.pipeline_parallel
        num_gpus += gpus
        price = prices_usd_per_gpu_hour.get(group.gpu.name, group.gpu.hourly_price_usd)
        if price is None:
            priced = False
        else:
            usd_per_hour += gpus * price
    cost_per_hour = usd_per_hour * provisioned_frac if priced else None
    per_m_tokens = None
    if cost_per_hour is not None and output_tokens_per_s:
        per_m_tokens = cost_per_hour / (output_tokens_per_s * 3600.0 / 1e6)
    return {"num_gpus": num_gpus, "cost_usd_per_hour": cost_per_hour, "cost_usd_per_m_output_tokens": per_m_tokens}
