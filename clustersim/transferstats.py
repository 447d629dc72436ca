"""The figures and invariants of ``transfers.parquet`` (a disaggregated run's KV caches on the move)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def read_transfers(path: Path) -> pa.Table:
    return pq.read_table(path)


def _quantiles_s(values: np.ndarray[Any, Any]) -> dict[str, float | None]:
    values = values[~np.isnan(values)]
    if not len(values):
        return {"mean": None, "p50": None, "p99": None, "max": None}
    p50, p99 = np.percentile(values, [50, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p99": float(p99), "max": float(values.max())}


def transfers_summary(transfers: pa.Table, makespan_s: float) -> dict[str, Any]:
    """The summary's ``disaggregation`` block: how many KV caches moved and how big, how long each
    waited for its decode replica to take it (back-pressure), for the link and on the wire, and the
    KV bytes the prefill pool held for them on average (from the prompt's end to the landing)."""
    col = {name: transfers.column(name).to_numpy() for name in transfers.column_names}
    landed = ~np.isnan(col["landed_at_s"])
    kv_bytes = col["kv_bytes"]
    held_s = np.where(landed, col["landed_at_s"], makespan_s) - col["prefilled_at_s"]
    return {
        "num_transfers": int(landed.sum()),
        "num_unlanded": int((~landed).sum()),
        "kv_transferred_bytes": float(kv_bytes[landed].sum()),
        "mean_kv_bytes": float(kv_bytes[landed].mean()) if landed.any() else None,
        "decode_wait_s": _quantiles_s(col["pulled_at_s"] - col["prefilled_at_s"]),
        "link_wait_s": _quantiles_s(col["started_at_s"] - col["pulled_at_s"]),
        "transfer_s": _quantiles_s(col["landed_at_s"] - col["started_at_s"]),
        "mean_in_flight_bytes": float((kv_bytes * held_s).sum() / makespan_s) if makespan_s > 0 else 0.0,
    }


def check_transfers(transfers: pa.Table, requests: pa.Table, roles: list[str]) -> list[str]:
    """Requests conserved across transfers: at most one per request, its moments in order, from a
    prefill to a decode replica; every request that got a token did so on the decode replica its KV
    cache landed on, after it landed."""
    problems = []
    col = {name: transfers.column(name).to_numpy() for name in transfers.column_names}
    ids = col["request_id"]
    if len(np.unique(ids)) != len(ids):
        problems.append("a request's KV cache moved more than once")
    times = [col[f"{name}_at_s"] for name in ("prefilled", "pulled", "started", "landed")]
    for earlier, later in itertools.pairwise(times):
        if np.any(later < earlier):  # NaN (not happened yet) compares False
            problems.append("a transfer's moments are out of order (prefilled <= pulled <= started <= landed)")
            break
    role = np.array(roles)
    if np.any(role[col["prefill_replica"]] != "prefill"):
        problems.append("a transfer started on a replica that does not prefill")
    routed = col["decode_replica"] >= 0
    if np.any(role[col["decode_replica"][routed]] != "decode"):
        problems.append("a transfer went to a replica that does not decode")
    req = {name: requests.column(name).to_numpy(zero_copy_only=False) for name in ("request_id", "first_token_at_s")}
    replica = requests.column("replica").to_numpy()
    served = ~np.isnan(req["first_token_at_s"])
    landed_at = np.full(len(replica), np.nan)
    landed_on = np.full(len(replica), -1)
    landed_at[ids] = col["landed_at_s"]
    landed_on[ids] = col["decode_replica"]
    order = np.argsort(req["request_id"])
    first_token = req["first_token_at_s"][order]
    served, replica = served[order], replica[order]
    if np.any(served & ~(landed_at <= first_token)):
        problems.append("a request got its first token before its KV cache landed, or without one")
    if np.any(served & (landed_on != replica)):
        problems.append("a request was decoded on another replica than its KV cache landed on")
    return problems


def pool_summary(per_replica: list[dict[str, Any]], roles: list[str]) -> dict[str, Any]:
    """Each pool's size and how busy its replicas were (means over them; a replica that never ran a
    step has no batch size and is left out of that mean): what sizes the split."""

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    pools: dict[str, Any] = {}
    for role in ("prefill", "decode"):
        rows = [row for row in per_replica if roles[row["replica"]] == role]
        pools[f"{role}_pool"] = {
            "num_replicas": len(rows),
            "mean_busy_frac": mean([row["busy_frac"] for row in rows]),
            "mean_batch_seqs": mean([row["mean_batch_seqs"] for row in rows]),
        }
    return pools
