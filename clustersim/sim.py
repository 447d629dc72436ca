"""Wire one run from its plan: the clock, the replicas, the router and the traffic, then run it.

Nothing here checks a setting or writes a summary: :mod:`clustersim.runplan` resolved and checked
everything, and :mod:`clustersim.runner` owns the run folder, the invariants and the summary.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from clustersim.acceptance import AcceptanceDraws
from clustersim.autoscale import AutoscalerProcess
from clustersim.clock import HORIZON_PRIORITY, Clock
from clustersim.config.scenario import Scenario
from clustersim.disagg import Endpoint, KVTransfers
from clustersim.eventlog import RunLog
from clustersim.faults import FaultInjector
from clustersim.frontend import ARRIVAL_PRIORITY, FrontEnd, frontend_summary
from clustersim.lifecycle import Lifecycle, Slot
from clustersim.replica.admission import SloAdmission
from clustersim.replica.core import Core
from clustersim.replica.queues import make_queue
from clustersim.replica.replica import Replica
from clustersim.router import ROUTER_STREAM_KEY, ROUTERS
from clustersim.runplan import RunPlan
from clustersim.workload.request import AWAITING_PULL, NO_REMOTE_KV, Request
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


def core_maker(
    plan: RunPlan,
    log: RunLog,
    on_final: Callable[[Request], None],
    on_first_token: Callable[[Request], None] | None = None,
) -> Callable[[int], Core]:
    """``make(index)``: a fresh core for replica ``index`` (empty queues and KV cache)."""
    scenario = plan.scenario
    sched = scenario.scheduler
    groups = plan.replica_groups()

    def make(index: int) -> Core:
        group = groups[index]
        spec = plan.replica_spec(index, group)
        return Core(
            spec,
            plan.policy.build(spec.limits),
            plan.allocator(plan.kv_spec(group)),
            SloAdmission(sched.slo_admission, plan.ttft_targets_s, group.cost_model),
            group.cost_model,
            log,
            on_final,
            make_queue(sched.ordering, plan.priorities),
            on_first_token,
        )

    return make


def start_transfers(plan: RunPlan, clock: Clock, replicas: list[Replica]) -> KVTransfers:
    """The hand-over of prompts from the prefill pool to the decode pool (a disaggregated scenario)."""
    assert plan.scenario.disaggregation is not None
    groups = plan.replica_groups()
    endpoints = [Endpoint(g.tensor_parallel * g.pipeline_parallel, g.kv_bytes_per_token) for g in groups]
    return KVTransfers(clock, replicas, endpoints, plan.scenario.disaggregation, plan.scenario.seed)


def start_lifecycle(
    plan: RunPlan,
    clock: Clock,
    replicas: list[Replica],
    make: Callable[[int], Core],
    on_final: Callable[[Request], None],
    traffic: Traffic,
) -> Lifecycle:
    """The pool's lifecycle, with the scenario's failures and autoscaler started over it; ``make``
    builds a replica's fresh core (:func:`core_maker`)."""
    scenario = plan.scenario
    groups = plan.replica_groups()
    slots = [
        Slot(functools.partial(make, i), g.model.weight_bytes(), g.tensor_parallel * g.pipeline_parallel)
        for i, g in enumerate(groups)
    ]

    def run_over() -> bool:
        return traffic.arrivals_over() and not any(r.num_outstanding for r in replicas)

    lifecycle = Lifecycle(clock, replicas, slots, on_final, run_over)
    for role, scaler in scenario.autoscalers().items():  # the whole cluster's, or each pool's
        pool = None if role == "both" else [i for i, g in enumerate(groups) if g.role == role]
        AutoscalerProcess(lifecycle, scaler, pool)
    if scenario.faults is not None:
        FaultInjector(lifecycle, scenario.faults, scenario.seed)
    return lifecycle


def start_traffic(
    plan: RunPlan,
    clock: Clock,
    workload_data: dict[str, TenantData],
    window: ArrivalWindow | None,
    dispatch: Callable[[Request], None],
    completions: Completions,
) -> Traffic:
    """The tenants' arrival processes, started, sending each arrival to ``dispatch``."""
    scenario = plan.scenario
    budget = RequestBudget(scenario.stop.max_requests, scenario.stop.horizon_s)
    if window is not None:
        budget.marks = WindowMarks(window)
    traffic = Traffic(
        clock, scenario.seed, workload_data, budget, dispatch, completions, scenario.kv.prefix_block_tokens
    )
    start_workload(traffic, scenario.workload.tenants)
    return traffic


def pools_move_apart(lifecycle: Lifecycle, transfers: KVTransfers) -> None:
    """The lifecycle of a disaggregated run: each request goes back to a replica of the pool it needs
    (a decode replica if its KV cache waits at its prefill replica, else a prefill one), a failed
    replica held the KV pulls on the wire to it too, a lost request's KV cache is let go, and a
    draining prefill replica stops once the last KV cache it kept has moved on."""

    def up_in(role: str) -> list[Replica]:
        return [r for r in lifecycle.up if r.core.spec.role == role]

    def can_route(request: Request) -> bool:
        return bool(up_in("decode" if request.remote_kv == AWAITING_PULL else "prefill"))

    def on_lost(request: Request) -> None:
        if request.remote_kv == AWAITING_PULL:
            transfers.drop(request)

    transfers.up_decode = lambda: up_in("decode")
    lifecycle.also_held = transfers.failed
    lifecycle.can_route = can_route
    lifecycle.on_lost = on_lost
    transfers.released = lifecycle.let_go


def make_frontends(plan: RunPlan, clock: Clock) -> list[FrontEnd] | None:
    """Each replica's HTTP front end (:mod:`clustersim.frontend`), or None when no request passes one
    (``cluster.frontend: false``, engines without front-end costs, or the ``unit`` cost model, which
    prices no engine at all)."""
    if not plan.scenario.cluster.frontend or plan.scenario.cost.kind == "unit":
        return None
    frontends = [
        FrontEnd(
            clock,
            e.frontend_per_request_s,
            e.frontend_per_output_token_s,
            e.frontend_per_prompt_token_s,
            e.frontend_latency_s,
            e.frontend_tokenize_after_queued,
        )
        for e in (g.gpu.engine for g in plan.replica_groups())
    ]
    return frontends if any(f.active for f in frontends) else None


def with_acceptance(scenario: Scenario, dispatch: Callable[[Request], None]) -> Callable[[Request], None]:
    """``dispatch``, first giving each arrival its share of the decode steps when requests differ in
    speculative acceptance rate (:mod:`clustersim.acceptance`); as is otherwise."""
    if scenario.speculative is None:
        return dispatch
    draws = AcceptanceDraws(scenario.speculative, [t.name for t in scenario.workload.tenants], scenario.seed)
    if draws.all_full:
        return dispatch

    def arrive(request: Request) -> None:
        draws.assign(request)
        dispatch(request)

    return arrive


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
    lifecycle: Lifecycle | None = None

    passed: dict[int, FrontEnd] = {}  # the front end each request in flight passed, by request id
    # ended at their engines, their last tokens not yet at clients that wait for them (a request nobody
    # waits for is recorded when it ends, its times already the client's: no event for its delivery)
    streaming: dict[int, Request] = {}

    def on_final(request: Request) -> None:
        front = passed.pop(request.request_id, None)
        late_s = front.ended(request) if front is not None else 0.0  # its tokens' times become the client's
        if late_s > 0.0 and completions.awaited(request):  # a user sends its next one when the last token is in
            streaming[request.request_id] = request
            clock.timer_at(clock.now + late_s, ARRIVAL_PRIORITY).callbacks.append(lambda _: reached(request))
        else:
            reached(request)
        if lifecycle is not None:
            lifecycle.request_ended(request)  # a draining replica may be empty now

    def reached(request: Request) -> None:
        """``request``'s last token reached its client (or it ended without one)."""
        streaming.pop(request.request_id, None)
        log.record_request(request)
        completions.notify(request)  # closed-loop users wait for their request to end

    def on_first_token(request: Request) -> None:
        front = passed.get(request.request_id)
        if front is not None:
            front.first_token(request)  # it streams through its API server from now on

    frontends = make_frontends(plan, clock)
    make = core_maker(plan, log, on_final, on_first_token if frontends is not None else None)
    replicas = [Replica(clock, make(index)) for index in range(plan.num_replicas)]  # in replica order
    router = ROUTERS.get(scenario.router.kind)(scenario.router, scenario.seed, ROUTER_STREAM_KEY)
    transfers = start_transfers(plan, clock, replicas) if scenario.disaggregation is not None else None
    if transfers is not None:
        log.transfers = transfers.rows
    routed = transfers.prefill_pool if transfers is not None else replicas  # where arrivals go

    for replica, front in zip(replicas, frontends, strict=True) if frontends is not None else ():
        replica.frontend = front  # routers count the requests in it as sent to the replica
        front.modelled_tokens_per_s = lambda n, c, replica=replica: replica.core.decode_tokens_per_s(n, c)

    def through_front_end(replica: Replica, request: Request, deliver: Callable[[Request], None]) -> None:
        """Pass ``request`` through ``replica``'s front end (counted as sent to it while there)."""
        assert replica.frontend is not None
        passed[request.request_id] = replica.frontend
        replica.frontend.submit(request, deliver)

    def dispatch(request: Request) -> None:
        replica = routed[router.choose(request, routed)]
        if frontends is None:
            replica.enqueue(request)
        else:
            through_front_end(replica, request, replica.enqueue)

    def reject(request: Request, reason: str) -> None:
        request.status, request.reject_reason = "rejected", reason
        on_final(request)

    def dispatch_up(request: Request, fresh: bool = False) -> None:  # with a lifecycle: among the replicas up now
        assert lifecycle is not None
        if transfers is not None and request.remote_kv == AWAITING_PULL:  # its KV cache waits at its prefill
            transfers.hand_on_again(request)  # replica, and the decode replica that held it failed
            return
        up = lifecycle.up
        if transfers is not None:
            up = [r for r in up if r.core.spec.role == "prefill"]
            request.remote_kv, request.remote_kv_blocks = NO_REMOTE_KV, 0  # a KV cache that had landed is lost
        if up and fresh and frontends is not None:  # a new arrival passes its replica's front end first
            replica = up[router.choose(request, up)]
            through_front_end(replica, request, lambda r: delivered_up(replica, r))
        elif up:
            up[router.choose(request, up)].enqueue(request)
        else:
            reject(request, "no replica was up" if transfers is None else "no prefill replica was up")

    def delivered_up(replica: Replica, request: Request) -> None:  # out of the front end: still up?
        assert lifecycle is not None
        if replica in lifecycle.up:
            replica.enqueue(request)
        else:
            dispatch_up(request)

    def make_wired(index: int) -> Core:  # a fresh core after a failure takes part in the hand-overs too
        core = make(index)
        if transfers is not None:
            transfers.wire(core)
        return core

    moving = scenario.moves_replicas
    arrive = with_acceptance(scenario, functools.partial(dispatch_up, fresh=True) if moving else dispatch)
    traffic = start_traffic(plan, clock, workload_data, window, arrive, completions)
    if transfers is not None:
        transfers.reject = reject
    if moving:
        lifecycle = start_lifecycle(plan, clock, replicas, make_wired, on_final, traffic)
        lifecycle.dispatch = dispatch_up
        log.lifecycle = lifecycle.rows
        if transfers is not None:
            pools_move_apart(lifecycle, transfers)
    with _few_collections():
        if scenario.stop.horizon_s is not None:
            clock.run(until=clock.timer_at(scenario.stop.horizon_s, HORIZON_PRIORITY))  # before anything else due then
        else:
            clock.run()
    if frontends is not None:
        # the clock ran to the horizon; else to its last event, or a last token reaching its client
        delivered_until_s = max(f.delivered_until_s for f in frontends)
        span_s = clock.now if scenario.stop.horizon_s is not None else max(clock.now, delivered_until_s)
        log.frontend = frontend_summary(frontends, span_s)
    in_flight = transfers.close() if transfers is not None else []  # in no replica's queue
    in_flight += [r for f in frontends or [] for r in f.close()]  # still in an API server at the horizon
    in_flight += streaming.values()  # completed at their engines, their last tokens due at their clients later
    for request in [*(r for replica in replicas for r in replica.stop()), *in_flight]:
        log.record_request(request)
    return replicas
