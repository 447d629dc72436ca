"""Invariants checked at the end of every run, from the Parquet logs (vectorised, so they stay on).

A violation is a bug in clustersim, never bad input: it is raised loudly as
:class:`InvariantViolation` with every failed check listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clustersim.config.scenario import Scenario
from clustersim.itl import GapBins
from clustersim.lifecyclestats import check_lifecycle
from clustersim.logstats import MemoryTotals, StepTotals
from clustersim.requeststats import RequestTotals


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


def check_requests(requests: pa.Table | RequestTotals) -> list[str]:
    """Conservation of requests and causality of each request's timestamps."""
    totals = RequestTotals.of(requests) if isinstance(requests, pa.Table) else requests
    problems: list[str] = []
    if totals.bad_ids or totals.missing_ids:
        problems.append(f"request ids are not exactly 0..{totals.num_rows - 1} once each")
    if totals.num_other_status:
        problems.append(
            f"{totals.num_other_status} requests have a status other than completed/rejected/unfinished/lost"
        )
    if totals.causality_ids:
        problems.append(
            "causality: arrival <= first scheduled <= first token <= finished fails for requests "
            f"{totals.causality_ids}"
        )
    if totals.completed_wrong_length:
        problems.append("completed requests whose emitted tokens differ from their output length")
    if totals.unfinished_all_emitted:
        problems.append("unfinished, rejected or lost requests that emitted all their tokens")
    if totals.rejected_emitted_unpreempted:
        problems.append("rejected requests that emitted tokens without being preempted or retried")
    return problems


def check_steps(steps: pa.Table | StepTotals, requests: pa.Table | RequestTotals, scenario: Scenario) -> list[str]:
    """Token conservation between the two logs, and the per-step limits."""
    if isinstance(steps, pa.Table):  # every replica under the scenario's scheduler limits
        limits = scenario.scheduler
        num_replicas = int(pc.max(steps.column("replica")).as_py() or 0) + 1 if steps.num_rows else 1
        steps = StepTotals.of(
            steps, num_replicas, [limits.max_num_batched_tokens] * num_replicas, [limits.max_num_seqs] * num_replicas
        )
    problems: list[str] = []
    if steps.bad_emission:
        problems.append("a step emitted fewer tokens than it decoded, or more than its decodes plus prefills")
    if isinstance(requests, pa.Table):
        emitted_by_requests = int(pc.sum(requests.column("num_emitted_tokens")).as_py() or 0)
    else:
        emitted_by_requests = requests.emitted_tokens
    if steps.emitted_tokens != emitted_by_requests:
        problems.append(
            f"token conservation: steps emitted {steps.emitted_tokens} tokens, requests record {emitted_by_requests}"
        )
    if steps.over_seqs is not None:
        problems.append("a step ran {} sequences > max_num_seqs {}".format(*steps.over_seqs))
    if steps.over_tokens is not None:
        problems.append("a step batched {} tokens > its token budget {}".format(*steps.over_tokens))
    if steps.bad_kv:
        problems.append(
            "a step used more KV blocks than the replica has (or fewer than none, or its peak below its last)"
        )
    return problems


def check_gaps(gaps: Mapping[str, dict[int, list[float]]], requests: RequestTotals, which: str = "") -> list[str]:
    """Inter-token gaps conserved: ``itl.parquet`` holds one gap per token after each request's
    first, and its greatest gap is the greatest request's. ``which``: ``"measured "`` when ``gaps``
    and ``requests`` are a measurement window's (its gaps were counted apart as the run went)."""
    bins = GapBins.merged(gaps.values())
    problems = []
    if bins.num_gaps != requests.num_gaps:
        problems.append(
            f"gap conservation: itl.parquet holds {bins.num_gaps} {which}gaps, the {which}requests' tokens make "
            f"{requests.num_gaps}"
        )
    greatest = max(bins.maxs_s) if bins.num_gaps else -np.inf
    if greatest != requests.max_itl_s:
        problems.append(
            f"the greatest {which}gap in itl.parquet ({greatest}) is not the greatest {which}request's "
            f"({requests.max_itl_s})"
        )
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
    requests: pa.Table | RequestTotals,
    steps: pa.Table | StepTotals,
    scenario: Scenario,
    replicas: list[ReplicaEndState],
    memory: pa.Table | MemoryTotals | None = None,
    gaps: Mapping[str, dict[int, list[float]]] | None = None,
    measured: tuple[Mapping[str, dict[int, list[float]]], RequestTotals] | None = None,
    lifecycle: Sequence[dict[str, Any]] | None = None,
) -> None:
    """Raise :class:`InvariantViolation` listing every broken invariant of a finished run.

    ``measured``: with a measurement window, the measured requests' gap bins and totals (their gaps
    are conserved too). ``lifecycle``: with faults, the rows of ``lifecycle.parquet`` (requests
    conserved across failures).
    """
    if isinstance(requests, pa.Table):
        requests = RequestTotals.of(requests)
    problems = check_requests(requests) + check_steps(steps, requests, scenario)
    if memory is not None:
        problems += check_memory(memory)
    if gaps is not None:
        problems += check_gaps(gaps, requests)
    if measured is not None:
        problems += check_gaps(*measured, "measured ")
    if lifecycle is not None:
        problems += check_lifecycle(lifecycle, requests, scenario.faults.detect_s if scenario.faults else 0.0)
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
