"""Run one scenario into a folder: plan it, simulate it, check the invariants, write the summary.

The folder holds ``requests.parquet``, ``steps.parquet``, ``memory.parquet``, ``itl.parquet`` and
``summary.json``; with a measurement window (the scenario's ``metrics``) the summary's request
figures are those of the measured requests.
While the run is going (and if it fails) an ``INCOMPLETE`` marker says its files are partial; each
file is written under a temporary name and moved into place. The summary is computed from the
Parquet logs and the plan alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from clustersim import __version__
from clustersim.clock import Clock
from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario
from clustersim.config.scenario import Scenario
from clustersim.config.speculative import BetaAcceptance, Speculative
from clustersim.eventlog import RunLog
from clustersim.invariants import InvariantViolation, ReplicaEndState, check_run
from clustersim.lifecyclestats import autoscaler_summary, faults_summary, read_lifecycle
from clustersim.logstats import MemoryTotals, StepTotals, gap_bins_of
from clustersim.metrics import Measured, kv_summary, summarize
from clustersim.outdir import claimed_folder, new_default_folder
from clustersim.requeststats import RequestTotals
from clustersim.runplan import RunPlan, plan_run
from clustersim.sim import simulate
from clustersim.transferstats import check_transfers, pool_summary, read_transfers, transfers_summary
from clustersim.workload.traces import TenantData, load_workload_data
from clustersim.workload.window import ArrivalWindow, resolve_window


@dataclass(frozen=True)
class RunResult:
    """Where a run's outputs are, and its summary."""

    out_dir: Path
    summary: dict[str, Any]


def scenario_metadata(scenario: Scenario) -> dict[str, str]:
    """Key-value metadata stamped on every output file (a scenario that measures every request is
    written without its ``metrics`` section, as before there was one: its hash is unchanged)."""
    resolved = scenario.model_dump_json(exclude=None if scenario.metrics.windowed else {"metrics"})
    return {
        "clustersim.version": __version__,
        "clustersim.scenario": resolved,
        "clustersim.scenario_sha256": hashlib.sha256(resolved.encode("utf-8")).hexdigest(),
    }


def _write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(partial, path)


Watch = Callable[[Clock, RunLog], AbstractContextManager[object]]


def run_scenario(
    loaded: LoadedScenario, out_dir: Path | None = None, catalogue: Catalogue | None = None, watch: Watch | None = None
) -> RunResult:
    """Run one scenario and write its logs and ``summary.json`` to ``out_dir`` (None: a new folder
    ``runs/<name>-<time>``)."""
    return run_plan(plan_run(loaded, catalogue), out_dir, watch)


def run_plan(plan: RunPlan, out_dir: Path | None = None, watch: Watch | None = None) -> RunResult:
    """Run a planned scenario and write its logs and ``summary.json`` to ``out_dir`` (None: a new
    folder ``runs/<name>-<time>``). ``watch``: a context held while the simulation runs, given the
    clock and the logs to read from (the progress display); it must not change them."""
    workload_data = load_workload_data(plan.scenario.workload, plan.base_dir, plan.source)  # before any output
    window = resolve_window(plan.scenario, workload_data, plan.source)
    if out_dir is None:
        out_dir = new_default_folder(plan.scenario.name)
    with claimed_folder(out_dir):
        return _run_into(plan, workload_data, window, out_dir, watch)


def _run_into(
    plan: RunPlan,
    workload_data: dict[str, TenantData],
    window: ArrivalWindow | None,
    out_dir: Path,
    watch: Watch | None = None,
) -> RunResult:
    incomplete = out_dir / "INCOMPLETE"
    incomplete.write_text("this run did not finish; its files are partial\n", encoding="utf-8")
    log = RunLog(out_dir, scenario_metadata(plan.scenario), measured=window is not None)
    clock = Clock()
    try:
        with watch(clock, log) if watch is not None else contextlib.nullcontext():
            replicas = simulate(plan, log, clock, workload_data, window)
    except BaseException as exc:
        log.abort()
        incomplete.write_text(f"this run did not finish: {type(exc).__name__}: {exc}\n", encoding="utf-8")
        raise
    log.close()
    # the step and memory logs are read a batch at a time; the reasons are text no check or figure
    # needs, so they stay on disk
    limits = [plan.group_limits(group) for group in plan.replica_groups()]  # a micro-batch's each, with PP
    budgets, caps = [lim.step_tokens for lim in limits], [lim.max_num_seqs for lim in limits]
    steps = StepTotals.of(out_dir / "steps.parquet", plan.num_replicas, budgets, caps)
    memory = MemoryTotals.of(out_dir / "memory.parquet")
    requests = RequestTotals.of(out_dir / "requests.parquet")
    gaps = gap_bins_of(out_dir / "itl.parquet")
    measured = None
    if window is not None:
        measured = measured_requests(out_dir, window, requests)
    try:
        ends = [ReplicaEndState(r.core.kv.pool.num_used_blocks, r.kv_blocks_of_running()) for r in replicas]
        measured_logs = (measured.gaps, measured.requests) if measured is not None else None
        lifecycle = read_lifecycle(out_dir / "lifecycle.parquet") if plan.scenario.moves_replicas else None
        check_run(requests, steps, plan.scenario, ends, memory, gaps, measured_logs, lifecycle)
        transfers = checked_transfers(plan, out_dir)
    except InvariantViolation as exc:
        incomplete.write_text(f"this run broke an invariant; its files are kept for the bug report: {exc}\n")
        exc.out_dir = out_dir
        raise
    summary = summarize_run(plan, requests, steps, memory, gaps, measured)
    summary.update(design_blocks(plan, summary, requests, lifecycle, transfers))
    if log.frontend is not None:
        summary["frontend"] = log.frontend
    summary["simulator"] = {"fast_forward": plan.scenario.simulation.fast_forward, "num_events": clock.num_events}
    _write_json_atomically(out_dir / "summary.json", summary)
    incomplete.unlink()
    return RunResult(out_dir, summary)


def checked_transfers(plan: RunPlan, out_dir: Path) -> pa.Table | None:
    """A disaggregated run's ``transfers.parquet``, its invariants checked (None for other runs)."""
    if not plan.scenario.disaggregated:
        return None
    transfers = read_transfers(out_dir / "transfers.parquet")
    roles = [group.role for group in plan.replica_groups()]
    problems = check_transfers(transfers, pq.read_table(out_dir / "requests.parquet"), roles)
    if problems:
        raise InvariantViolation("clustersim broke its transfer invariants (a bug): " + "; ".join(problems))
    return transfers


def design_blocks(
    plan: RunPlan,
    summary: dict[str, Any],
    requests: RequestTotals,
    lifecycle: list[dict[str, Any]] | None,
    transfers: pa.Table | None,
) -> dict[str, Any]:
    """The summary's blocks of the scenario's optional designs: ``faults``, ``autoscaler``,
    ``disaggregation``, ``speculative``."""
    scenario, blocks = plan.scenario, {}
    groups = plan.replica_groups()
    if lifecycle is not None:
        gpus = [group.tensor_parallel * group.pipeline_parallel for group in groups]
        if scenario.faults is not None:
            blocks["faults"] = faults_summary(lifecycle, gpus, summary["makespan_s"], requests)
        scaled = scenario.autoscalers()
        if scaled:
            pools = {
                role: [i for i, group in enumerate(groups) if group.role == role] for role in scaled if role != "both"
            }
            blocks["autoscaler"] = autoscaler_summary(lifecycle, gpus, summary["makespan_s"], pools)
    if transfers is not None:
        blocks["disaggregation"] = {
            **transfers_summary(transfers, summary["makespan_s"]),
            **pool_summary(summary["replicas"]["per_replica"], [group.role for group in groups]),
        }
    if scenario.speculative is not None:
        spec = scenario.speculative
        blocks["speculative"] = speculative_summary(spec, [t.name for t in scenario.workload.tenants])
    return blocks


def speculative_summary(spec: Speculative, tenants: list[str]) -> dict[str, Any]:
    """The ``speculative`` block: the section, E at the default rate, and with rates that differ by
    tenant or by request, each tenant's rate and mean E and the pace decode steps are priced at."""
    block: dict[str, Any] = {**spec.model_dump(), "tokens_per_verify_step": spec.tokens_per_step()}
    if not spec.uniform(tenants):
        block["max_tokens_per_verify_step"] = spec.max_tokens_per_step(tenants)
        block["tenants"] = {
            t: {"acceptance_rate": _dumped(spec.rate_of(t)), "tokens_per_verify_step": spec.tokens_per_step(t)}
            for t in tenants
        }
    return block


def _dumped(rate: float | BetaAcceptance) -> float | dict[str, Any]:
    return rate.model_dump() if isinstance(rate, BetaAcceptance) else rate


def measured_requests(out_dir: Path, window: ArrivalWindow, requests: RequestTotals) -> Measured:
    """The measured requests of a run folder written with ``window``: their totals and gap bins, and
    the summary's ``window`` block. Their throughput is per second of their arrivals' span, from the
    first measured arrival to the last: the rate at which the steady load asks for tokens, which a
    cluster that keeps up delivers (one that does not shows it in its latencies)."""
    totals = RequestTotals.of(out_dir / "requests.parquet", measured_only=True, tenants=requests.tenants)
    first_s, last_s = totals.earliest_arrival_s, totals.latest_arrival_s
    span_s = last_s - first_s if first_s is not None and last_s is not None else 0.0
    first_arrival_s = requests.earliest_arrival_s
    block = {
        **window.metrics.model_dump(),
        "from_arrival_s": window.start_s(first_arrival_s) if first_arrival_s is not None else None,
        "to_arrival_s": window.end_s if window.end_s < math.inf else None,
        "from_request": window.first_index,
        "to_request": window.end_index - 1 if window.end_index is not None else None,
        "num_measured": totals.num_arrived,
        "num_excluded": requests.num_arrived - totals.num_arrived,
        "first_measured_arrival_s": first_s,
        "last_measured_arrival_s": last_s,
        "span_s": span_s,
    }
    return Measured(totals, gap_bins_of(out_dir / "itl.parquet", measured_only=True), span_s, block)


def kv_cache_summary(plan: RunPlan) -> list[dict[str, Any]]:
    """Each replica group's KV cache as its engine sizes it, in the figures engines log (vLLM: 'GPU KV
    cache size: N tokens'; the memory profile's weights, activation peak and memory outside torch)."""
    gib = 2.0**30
    groups = []
    for group in plan.groups:
        memory = group.kv_memory
        entry: dict[str, Any] = {
            "group": group.field_path,
            "tokens_per_replica": group.num_kv_blocks * plan.scenario.kv.block_size_tokens,
            "blocks_per_replica": group.num_kv_blocks,
        }
        if memory is not None:
            entry.update(
                rule=group.gpu.engine.kv_memory_rule,
                gpu_memory_gib=memory.total_bytes / gib,
                gpu_memory_frac=plan.scenario.kv.gpu_memory_frac,
                weights_gib_per_gpu=memory.weight_bytes / gib,
                activations_gib_per_gpu=memory.activation_bytes / gib,
                runtime_gib_per_gpu=memory.runtime_bytes / gib,
                kv_gib_per_gpu=memory.kv_bytes / gib,
            )
        groups.append(entry)
    return groups


def summarize_run(
    plan: RunPlan,
    requests: RequestTotals,
    steps: StepTotals,
    memory: MemoryTotals,
    gaps: dict[str, dict[int, list[float]]],
    measured: Measured | None = None,
) -> dict[str, Any]:
    """``summary.json`` (the simulator's own figures aside) from the logs (the step and memory logs'
    totals, the gap bins; the measured requests' with a measurement window) and the plan."""
    scenario = plan.scenario
    span_s = requests.makespan_s(scenario.stop.horizon_s)
    num_preemptions = requests.num_preemptions
    num_swaps = steps.num_swaps
    return {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "clustersim_version": __version__,
        "kv_blocks_per_replica": [group.num_kv_blocks for group in plan.replica_groups()],
        "kv_cache": kv_cache_summary(plan),
        **summarize(requests, steps, span_s, plan.num_replicas, scenario.slo, plan.tenant_slos, gaps, measured),
        "kv": kv_summary(
            memory, num_preemptions, requests.prefix_hit_rate() if scenario.kv.prefix_caching else None, num_swaps
        ),
    }
