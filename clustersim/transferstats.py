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
    lost = ~np.isnan(col["kv_lost_at_s"])
    kv_bytes = col["kv_bytes"]
    released_s = col["released_at_s"]
    held_s = np.where(np.isnan(released_s), makespan_s, released_s) - col["prefilled_at_s"]
    return {
        "num_transfers": int(landed.sum()),
        "num_unlanded": int((~landed & ~lost).sum()),
        "num_kv_lost": int(lost.sum()),
        "kv_transferred_bytes": float(kv_bytes[landed].sum()),
        "mean_kv_bytes": float(kv_bytes[landed].mean()) if landed.any() else None,
        "decode_wait_s": _quantiles_s(col["pulled_at_s"] - col["prefilled_at_s"]),
        "link_wait_s": _quantiles_s(col["started_at_s"] - col["pulled_at_s"]),
        "transfer_s": _quantiles_s(col["landed_at_s"] - col["started_at_s"]),
        "mean_in_flight_bytes": float((kv_bytes * held_s).sum() / makespan_s) if makespan_s > 0 else 0.0,
    }


def check_transfers(transfers: pa.Table, requests: pa.Table, roles: list[str]) -> list[str]:
    """Requests conserved across transfers: a request's transfers one after another (a new one only
    after a failure sent it back to the prefill pool), each's moments in order, from a prefill to a
    decode replica; a request's first token came after its first transfer ended (landed, or its KV
    cache lost on the way and computed by the decode replica), and a completed request finished on the
    decode replica of its last transfer."""
    problems = []
    col = {name: transfers.column(name).to_numpy() for name in transfers.column_names}
    order = np.lexsort((col["prefilled_at_s"], col["request_id"]))
    col = {name: values[order] for name, values in col.items()}
    ids = col["request_id"]
    ended_s = np.where(np.isnan(col["landed_at_s"]), col["kv_lost_at_s"], col["landed_at_s"])
    again = ids[1:] == ids[:-1]  # a row followed by another of the same request
    if np.any(again & ~(ended_s[:-1] <= col["prefilled_at_s"][1:])):
        problems.append("a request's KV cache moved again before its previous transfer ended")
    times = [col[f"{name}_at_s"] for name in ("prefilled", "pulled", "started", "landed")]
    for earlier, later in itertools.pairwise(times):
        if np.any(later < earlier):  # NaN (not happened yet) compares False
            problems.append("a transfer's moments are out of order (prefilled <= pulled <= started <= landed)")
            break
    if np.any(col["kv_lost_at_s"] < col["prefilled_at_s"]) or np.any(
        ~np.isnan(col["kv_lost_at_s"]) & ~np.isnan(col["landed_at_s"])
    ):
        problems.append("a transfer's KV cache was lost before its prompt was done, or after it landed")
    landed = ~np.isnan(col["landed_at_s"])
    if np.any(col["released_at_s"] < col["prefilled_at_s"]) or np.any(
        col["released_at_s"][landed] != col["landed_at_s"][landed]
    ):
        problems.append("a prefill replica let a KV cache go before its prompt was done, or not when it landed")
    role = np.array(roles)
    if np.any(role[col["prefill_replica"]] != "prefill"):
        problems.append("a transfer started on a replica that does not prefill")
    routed = col["decode_replica"] >= 0
    if np.any(role[col["decode_replica"][routed]] != "decode"):
        problems.append("a transfer went to a replica that does not decode")
    req = {name: requests.column(name).to_numpy(zero_copy_only=False) for name in ("request_id", "first_token_at_s")}
    completed = requests.column("status").to_numpy(zero_copy_only=False) == "completed"
    replica = requests.column("replica").to_numpy()
    served = ~np.isnan(req["first_token_at_s"])
    # a request's first token came in its first transfer that ended (landed, or lost and computed by
    # the decode replica); it was last served on the decode replica of its last transfer
    first = np.r_[True, ids[1:] != ids[:-1]] if len(ids) else np.zeros(0, bool)
    last = np.r_[ids[1:] != ids[:-1], True] if len(ids) else np.zeros(0, bool)
    first_ended_at = np.full(len(replica), np.nan)
    first_ended_at[ids[first]] = ended_s[first]
    landed_on = np.full(len(replica), -1)
    landed_on[ids[last]] = col["decode_replica"][last]
    order = np.argsort(req["request_id"])
    first_token = req["first_token_at_s"][order]
    served, replica, completed = served[order], replica[order], completed[order]
    if np.any(served & ~(first_ended_at <= first_token)):
        problems.append("a request got its first token before its KV cache landed, or without one")
    if np.any(completed & (landed_on != replica)):
        problems.append("a request was finished on another replica than its last transfer went to")
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
