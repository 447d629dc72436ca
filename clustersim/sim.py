"""Wire one run from its plan: the clock, the replicas, the router and the traffic, then run it.

Nothing here checks a setting or writes a summary: :mod:`clustersim.runplan` resolved and checked
everything, and :mod:`clustersim.runner` owns the run folder, the invariants and the summary.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from clustersim.clock import HORIZON_PRIORITY, Clock
from clustersim.eventlog import RunLog
from clustersim.faults import FaultInjector, Pool, ReplicaRestart, cold_start_s
from clustersim.replica.admission import SloAdmission
from clustersim.replica.core import Core
from clustersim.replica.queues import make_queue
from clustersim.replica.replica import Replica
from clustersim.router import ROUTERS
from clustersim.runplan import RunPlan
from clustersim.workload.request import Request
from clustersim.workload.source import Completions, RequestBudget, Traffic, start_workload
from clustersim.workload.traces import TenantData
from clustersim.workload.window import ArrivalWindow, WindowMarks


@contextmanager
def _few_collections() -> Iterator[None]:
    """Run with the objects alive so far frozen and rarer garbage collections (about a tenth of a
    run's time otherwise goes to traversing the same long-lived objects again and again)."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def core_maker(plan: RunPlan, log: RunLog, on_final: Callable[[Request], None]) -> Callable[[int], Core]:
    """``make(index)``: a fresh core for replica ``index`` (empty queues and KV cache)."""
    scenario = plan.scenario
    sched = scenario.scheduler
    groups = plan.replica_groups()

    def make(index: int) -> Core:
        group = groups[index]
        return Core(
            plan.replica_spec(index, group),
            plan.policy.build(plan.limits),
            plan.allocator(plan.kv_spec(group)),
            SloAdmission(sched.slo_admission, plan.ttft_targets_s, group.cost_model),
            group.cost_model,
            log,
            on_final,
            make_queue(sched.ordering, plan.priorities),
        )

    return make


def build_replicas(plan: RunPlan, clock: Clock, log: RunLog, on_final: Callable[[Request], None]) -> list[Replica]:
    """One replica per slot of the plan's groups, in replica order."""
    make = core_maker(plan, log, on_final)
    return [Replica(clock, make(index)) for index in range(len(plan.replica_groups()))]


def start_faults(
    plan: RunPlan,
    clock: Clock,
    log: RunLog,
    pool: Pool,
    dispatch: Callable[[Request], None],
    on_final: Callable[[Request], None],
    traffic: Traffic,
) -> FaultInjector:
    """Start the scenario's failures over ``pool`` (its ``faults`` section is set)."""
    faults = plan.scenario.faults
    assert faults is not None
    make = core_maker(plan, log, on_final)
    restarts = [
        ReplicaRestart(
            functools.partial(make, index),
            cold_start_s(group.model.weight_bytes(), faults.cold_start),
            group.tensor_parallel * group.pipeline_parallel,
        )
        for index, group in enumerate(plan.replica_groups())
    ]

    def run_over() -> bool:
        return traffic.arrivals_over() and not any(r.num_outstanding for r in pool.replicas)

    return FaultInjector(clock, faults, plan.scenario.seed, pool, restarts, dispatch, on_final, run_over)


def simulate(
    plan: RunPlan,
    log: RunLog,
    clock: Clock,
    workload_data: dict[str, TenantData],
    window: ArrivalWindow | None = None,
) -> list[Replica]:
    """Run the SimPy model to its stop condition; every request ends up in ``log``.

    ``workload_data``: the traces the tenants read (:func:`clustersim.workload.traces.load_workload_data`).
    ``window``: which arrivals the summary measures (:func:`clustersim.workload.window.resolve_window`).
    Returns the replicas as they are when the clock stopped.
    """
    scenario = plan.scenario
    completions = Completions(clock)

    def on_final(request: Request) -> None:
        log.record_request(request)
        completions.notify(request)  # closed-loop users wait for their request to end

    replicas = build_replicas(plan, clock, log, on_final)
    router = ROUTERS.get(scenario.router.kind)(scenario.router, scenario.seed)
    pool = Pool(replicas)

    def dispatch(request: Request) -> None:
        replicas[router.choose(request, replicas)].enqueue(request)

    def dispatch_up(request: Request) -> None:  # with faults: among the replicas up now
        up = pool.up
        if up:
            up[router.choose(request, up)].enqueue(request)
        else:
            request.status, request.reject_reason = "rejected", "no replica was up (every one had failed)"
            on_final(request)

    budget = RequestBudget(scenario.stop.max_requests, scenario.stop.horizon_s)
    if window is not None:
        budget.marks = WindowMarks(window)
    send = dispatch if scenario.faults is None else dispatch_up
    traffic = Traffic(clock, scenario.seed, workload_data, budget, send, completions, scenario.kv.prefix_block_tokens)
    start_workload(traffic, scenario.workload.tenants)
    if scenario.faults is not None:
        log.lifecycle = start_faults(plan, clock, log, pool, dispatch_up, on_final, traffic).rows
    with _few_collections():
        if scenario.stop.horizon_s is not None:
            clock.run(until=clock.timer_at(scenario.stop.horizon_s, HORIZON_PRIORITY))  # before anything else due then
        else:
            clock.run()
    for replica in replicas:
        for request in replica.stop():
            log.record_request(request)
    return replicas
