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
from clustersim.logstats import MemoryTotals, StepTotals
from clustersim.metrics import is_value


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


def check_steps(steps: pa.Table | StepTotals, requests: pa.Table, scenario: Scenario) -> list[str]:
    """Token conservation between the two logs, and the per-step limits."""
    limits = scenario.scheduler
    if isinstance(steps, pa.Table):
        num_replicas = int(pc.max(steps.column("replica")).as_py() or 0) + 1 if steps.num_rows else 1
        steps = StepTotals.of(steps, num_replicas, limits.max_num_batched_tokens)
    problems: list[str] = []
    if steps.bad_emission:
        problems.append("a step emitted fewer tokens than it decoded, or more than its decodes plus prefills")
    emitted_by_requests = int(pc.sum(requests.column("num_emitted_tokens")).as_py() or 0)
    if steps.emitted_tokens != emitted_by_requests:
        problems.append(
            f"token conservation: steps emitted {steps.emitted_tokens} tokens, requests record {emitted_by_requests}"
        )
    if steps.max_num_seqs > limits.max_num_seqs:
        problems.append(f"a step ran {steps.max_num_seqs} sequences > max_num_seqs {limits.max_num_seqs}")
    if steps.max_over_budget_tokens:
        problems.append(
            f"a step batched {steps.max_over_budget_tokens} tokens > max_num_batched_tokens "
            f"{limits.max_num_batched_tokens}"
        )
    if steps.bad_kv:
        problems.append("a step used more KV blocks than the replica has (or fewer than none)")
    return problems


def check_memory(memory: pa.Table | MemoryTotals) -> list[str]:
    """The KV ledger: no category is negative and the categories add up to the capacity."""
    totals = MemoryTotals.of(memory) if isinstance(memory, pa.Table) else memory
    problems = []
    if totals.negative:
        problems.append("a KV ledger category is negative")
    if totals.unbalanced:
        problems.append("the KV ledger categories do not add up to the capacity")
    return problems


def check_run(
    requests: pa.Table,
    steps: pa.Table | StepTotals,
    scenario: Scenario,
    replicas: list[ReplicaEndState],
    memory: pa.Table | MemoryTotals | None = None,
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
