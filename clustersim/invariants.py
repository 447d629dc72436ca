"""Invariants checked at the end of every run, from the Parquet logs (vectorised, so they stay on).

A violation is a bug in clustersim, never bad input: it is raised loudly as
:class:`InvariantViolation` with every failed check listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clustersim.config.scenario import Scenario
from clustersim.metrics import is_value
from clustersim.records import LEDGER_CATEGORIES


class InvariantViolation(AssertionError):
    """The simulator broke one of its own guarantees (a bug: please report it with the scenario).

    ``out_dir``: the run folder whose files are kept for the report (set by the runner).
    """

    out_dir: Path | None = None


@dataclass(frozen=True)
class ReplicaEndState:
    """What a replica holds when the run ends: for the KV conservation check."""

    kv_used_blocks: int
    kv_blocks_of_running: int


def _np(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False))


def _times(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(pc.fill_null(table.column(name), np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)


def check_requests(requests: pa.Table) -> list[str]:
    """Conservation of requests and causality of each request's timestamps."""
    problems: list[str] = []
    ids = _np(requests, "request_id")
    if ids.size and (np.unique(ids).size != ids.size or ids.min() != 0 or ids.max() != ids.size - 1):
        problems.append(f"request ids are not exactly 0..{ids.size - 1} once each")
    status = {s: is_value(requests.column("status"), s) for s in ("completed", "rejected", "unfinished")}
    counted = sum(int(np.count_nonzero(mask)) for mask in status.values())
    if counted != requests.num_rows:
        problems.append(
            f"{requests.num_rows - counted} requests have a status other than completed/rejected/unfinished"
        )
    arrival, scheduled = _times(requests, "arrival_at_s"), _times(requests, "first_scheduled_at_s")
    first_token, finished = _times(requests, "first_token_at_s"), _times(requests, "finished_at_s")
    done = status["completed"]
    with np.errstate(invalid="ignore"):
        ordered = (arrival <= scheduled) & (scheduled <= first_token) & (first_token <= finished)
    if np.any(done & ~ordered):
        bad = ids[done & ~ordered][:3].tolist()
        problems.append(f"causality: arrival <= first scheduled <= first token <= finished fails for requests {bad}")
    emitted, outputs = _np(requests, "num_emitted_tokens"), _np(requests, "output_tokens")
    if np.any(done & (emitted != outputs)):
        problems.append("completed requests whose emitted tokens differ from their output length")
    if np.any(~done & (emitted >= outputs)):
        problems.append("unfinished or rejected requests that emitted all their tokens")
    if np.any(status["rejected"] & (emitted != 0) & (np.asarray(requests.column("num_preemptions")) == 0)):
        problems.append("rejected requests that emitted tokens without being preempted")
    return problems


def check_steps(steps: pa.Table, requests: pa.Table, scenario: Scenario) -> list[str]:
    """Token conservation between the two logs, and the per-step limits."""
    problems: list[str] = []
    num_steps = _np(steps, "num_steps")
    decode, prefill_seqs = _np(steps, "num_decode_tokens"), _np(steps, "num_prefill_seqs")
    emitted = _np(steps, "num_emitted_tokens")
    if np.any(emitted < decode) or np.any(emitted > decode + prefill_seqs):
        problems.append("a step emitted fewer tokens than it decoded, or more than its decodes plus prefills")
    emitted_by_steps = int((num_steps * emitted).sum())
    emitted_by_requests = int(_np(requests, "num_emitted_tokens").sum())
    if emitted_by_steps != emitted_by_requests:
        problems.append(
            f"token conservation: steps emitted {emitted_by_steps} tokens, requests record {emitted_by_requests}"
        )
    limits = scenario.scheduler
    num_seqs = _np(steps, "num_seqs")
    if np.any(num_seqs > limits.max_num_seqs):
        problems.append(f"a step ran {int(num_seqs.max())} sequences > max_num_seqs {limits.max_num_seqs}")
    tokens = _np(steps, "num_prefill_tokens") + decode
    over = (tokens > limits.max_num_batched_tokens) & (prefill_seqs != 1)  # 1: a lone recompute may exceed it
    if np.any(over):
        problems.append(
            f"a step batched {int(tokens[over].max())} tokens > max_num_batched_tokens {limits.max_num_batched_tokens}"
        )
    used, total = _np(steps, "kv_used_blocks"), _np(steps, "kv_total_blocks")
    if np.any(used > total) or np.any(used < 0):
        problems.append("a step used more KV blocks than the replica has (or fewer than none)")
    return problems


def check_memory(memory: pa.Table) -> list[str]:
    """The KV ledger: no category is negative and the categories add up to the capacity."""
    if memory.num_rows == 0:
        return []
    parts = np.stack([_np(memory, c).astype(np.float64) for c in LEDGER_CATEGORIES])
    capacity = _np(memory, "capacity_bytes").astype(np.float64)
    problems = []
    if np.any(parts < -1e-6 * capacity):
        problems.append("a KV ledger category is negative")
    if np.any(np.abs(parts.sum(axis=0) - capacity) > 1e-9 * capacity):
        problems.append("the KV ledger categories do not add up to the capacity")
    return problems


def check_run(
    requests: pa.Table,
    steps: pa.Table,
    scenario: Scenario,
    replicas: list[ReplicaEndState],
    memory: pa.Table | None = None,
) -> None:
    """Raise :class:`InvariantViolation` listing every broken invariant of a finished run."""
    problems = check_requests(requests) + check_steps(steps, requests, scenario)
    if memory is not None:
        problems += check_memory(memory)
    for index, replica in enumerate(replicas):
        if replica.kv_used_blocks != replica.kv_blocks_of_running:
            problems.append(
                f"KV blocks not conserved on replica {index}: pool says {replica.kv_used_blocks} in use, "
                f"running sequences hold {replica.kv_blocks_of_running}"
            )
    if problems:
        raise InvariantViolation(
            f"clustersim broke {len(problems)} of its invariants (a bug; please report it with the scenario): "
            + "; ".join(problems)
        )
