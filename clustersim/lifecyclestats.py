"""The summary's ``faults`` and ``autoscaler`` blocks and their invariants, from ``lifecycle.parquet``.

Each replica is up from time 0; each row moves it: ``failed`` (down), ``starting`` (its cold start),
``up``, ``draining``, ``stopped``. Hours in each state are counted over the run's makespan; GPUs are
provisioned in every state but ``stopped``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from clustersim.requeststats import RequestTotals

SECONDS_PER_HOUR = 3600.0
STATES = {
    "failed": "down",  # serving nothing from the failure (routed to until it is detected)
    "detected": "down",
    "starting": "starting",
    "up": "up",
    "draining": "draining",
    "stopped": "stopped",
}
ALL_STATES = ("up", "starting", "draining", "stopped", "down")


def read_lifecycle(path: Path) -> list[dict[str, Any]]:
    """The rows of ``lifecycle.parquet`` (a few per failure: read whole)."""
    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    return rows


def state_seconds(rows: Sequence[dict[str, Any]], num_replicas: int, until_s: float) -> list[dict[str, float]]:
    """Per replica, the seconds it spent in each state in ``[0, until_s]``."""
    spent = [dict.fromkeys(ALL_STATES, 0.0) for _ in range(num_replicas)]
    state = ["up"] * num_replicas
    since = [0.0] * num_replicas
    for row in rows:  # in time order
        index, at_s = row["replica"], min(row["at_s"], until_s)
        spent[index][state[index]] += max(0.0, at_s - since[index])
        state[index], since[index] = STATES[row["event"]], max(since[index], at_s)
    for index in range(num_replicas):
        spent[index][state[index]] += max(0.0, until_s - since[index])
    return spent


def faults_summary(
    rows: Sequence[dict[str, Any]], gpus_per_replica: Sequence[int], makespan_s: float, requests: RequestTotals
) -> dict[str, Any]:
    """The ``faults`` block: failures, what became of the requests the failed replicas held, and the
    replica- and GPU-hours in each state over the makespan."""
    failures = [row for row in rows if row["event"] == "failed"]
    spent = state_seconds(rows, len(gpus_per_replica), makespan_s)
    block: dict[str, Any] = {
        "num_failures": len(failures),
        "num_restarts": sum(1 for row in rows if row["event"] == "up" and row["cause"] == "fault"),
        # held when they failed, and routed to them before their failure was detected
        "num_requests_held": sum(row["num_held"] for row in rows if row["event"] in ("failed", "detected")),
        "num_retries": requests.num_retries,
        "num_requests_retried": requests.num_retried,
        "num_requests_lost": requests.counts["lost"],
    }
    for state in ("up", "starting", "down"):  # flat, with the unit last (a sweep's columns)
        block[f"{state}_replica_hours"] = sum(s[state] for s in spent) / SECONDS_PER_HOUR
    for state in ("up", "starting", "down"):
        gpu_s = sum(s[state] * g for s, g in zip(spent, gpus_per_replica, strict=True))
        block[f"{state}_gpu_hours"] = gpu_s / SECONDS_PER_HOUR
    total_h = len(gpus_per_replica) * makespan_s / SECONDS_PER_HOUR
    block["availability_frac"] = block["up_replica_hours"] / total_h if total_h > 0 else None
    return block


def autoscaler_summary(
    rows: Sequence[dict[str, Any]],
    gpus_per_replica: Sequence[int],
    makespan_s: float,
    pools: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, Any]:
    """The ``autoscaler`` block: its starts and drains, the replicas provisioned on average, and the
    GPU-hours provisioned against a fixed pool of every replica for the whole makespan. ``pools``:
    the replica indices of each pool scaled on its own (a disaggregated run), whose own figures
    follow in ``pools``."""
    spent = state_seconds(rows, len(gpus_per_replica), makespan_s)
    block = _provisioned(rows, spent, gpus_per_replica, range(len(gpus_per_replica)), makespan_s)
    if pools:
        block["pools"] = {
            role: _provisioned(rows, spent, gpus_per_replica, indices, makespan_s) for role, indices in pools.items()
        }
    return block


def _provisioned(
    rows: Sequence[dict[str, Any]],
    spent: Sequence[dict[str, float]],
    gpus_per_replica: Sequence[int],
    indices: Sequence[int],
    makespan_s: float,
) -> dict[str, Any]:
    """The autoscaler's figures over the replicas ``indices``."""
    chosen = set(indices)
    provisioned_s = [makespan_s - spent[i]["stopped"] for i in indices]
    gpus = [gpus_per_replica[i] for i in indices]
    gpu_hours = sum(p * g for p, g in zip(provisioned_s, gpus, strict=True)) / SECONDS_PER_HOUR
    fixed_gpu_hours = sum(gpus) * makespan_s / SECONDS_PER_HOUR
    ours = [row for row in rows if row["cause"] == "autoscaler" and row["at_s"] > 0 and row["replica"] in chosen]
    return {
        "num_starts": sum(1 for row in ours if row["event"] == "starting"),
        "num_drains": sum(1 for row in ours if row["event"] == "draining"),
        "num_stops": sum(1 for row in ours if row["event"] == "stopped"),
        "mean_replicas_provisioned": sum(provisioned_s) / makespan_s if makespan_s > 0 else None,
        "mean_replicas_up": sum(spent[i]["up"] for i in indices) / makespan_s if makespan_s > 0 else None,
        "provisioned_gpu_hours": gpu_hours,
        "fixed_pool_gpu_hours": fixed_gpu_hours,
        "gpu_hours_saved_frac": 1.0 - gpu_hours / fixed_gpu_hours if fixed_gpu_hours > 0 else None,
    }


def check_lifecycle(rows: Sequence[dict[str, Any]], requests: RequestTotals, detect_s: float = 0.0) -> list[str]:
    """Requests conserved across failures: each failure hands on or loses exactly what it held (with
    ``detect_s``, what it held and what reached it before the detection), the hand-overs are the
    requests' retries, and the lost ones are the requests lost."""
    problems = []
    pending: dict[int, int] = {}  # failed, not detected yet: requests held so far
    unbalanced = False
    for row in rows:
        held, handled = row["num_held"], row["num_retried"] + row["num_lost"]
        if row["event"] == "failed" and detect_s == 0:
            unbalanced |= held != handled
        elif row["event"] == "failed":
            unbalanced |= handled != 0
            pending[row["replica"]] = held
        elif row["event"] == "detected":
            unbalanced |= pending.pop(row["replica"], -1) + held != handled
    if unbalanced:
        problems.append("a failure's held requests are not its retried plus its lost ones")
    retried = sum(row["num_retried"] for row in rows)
    if retried != requests.num_retries:
        problems.append(f"failures handed on {retried} requests, the requests record {requests.num_retries} retries")
    lost = sum(row["num_lost"] for row in rows)
    if lost != requests.counts["lost"]:
        problems.append(f"failures lost {lost} requests, {requests.counts['lost']} requests are lost")
    times = [row["at_s"] for row in rows]
    if times != sorted(times):
        problems.append("lifecycle.parquet is not in time order")
    return problems
