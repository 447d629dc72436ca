"""The SimPy processes that turn tenants' traffic into requests handed to the router.

Open-loop tenants (every arrival kind but ``closed_loop``) are one process each, walking the
tenant's pure arrival stream (:mod:`clustersim.workload.arrivals`). A closed-loop tenant is one
process per user: send a request, wait until it ends, think, send the next. The simulator tells
the users that a request ended through :class:`Completions` (``notify`` from its ``on_final``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import simpy

from clustersim.config.workload import ClosedLoopArrivals, Tenant
from clustersim.errors import ClusterSimError
from clustersim.registry import Registry
from clustersim.workload.arrivals import (
    STREAMS,
    ArrivalTuple,
    ThinkDraw,
    TracedArrival,
    closed_loop_draws,
    tenant_arrivals,
)
from clustersim.workload.conversation import Conversation
from clustersim.workload.documents import prompt_ids
from clustersim.workload.request import Request
from clustersim.workload.traces import TenantData
from clustersim.workload.window import WindowMarks

Dispatch = Callable[[Request], None]

MAX_INSTANT_REJECTIONS = 1000  # a closed-loop user whose requests are all rejected with no think time


@dataclass
class RequestBudget:
    """Shared by all tenants of a run: request ids, the stop condition on arrivals, and the marks of
    the measurement window (None: every request is measured)."""

    max_requests: int | None
    horizon_s: float | None
    num_created: int = 0
    exhausted: bool = field(default=False)
    marks: WindowMarks | None = None

    def take(self, arrival_at_s: float) -> int | None:
        """The next request id, or None when the run accepts no more arrivals."""
        if self.exhausted:
            return None
        if self.horizon_s is not None and arrival_at_s > self.horizon_s:
            return None
        if self.max_requests is not None and self.num_created >= self.max_requests:
            self.exhausted = True
            return None
        request_id = self.num_created
        self.num_created += 1
        return request_id


class Completions:
    """Events that closed-loop users wait on, triggered when their request ends (completed or rejected).

    ``expect`` before dispatching (a request can be rejected during dispatch); the simulator calls
    ``notify`` for every request that ends; requests nobody waits for cost one dict lookup.
    """

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._waiting: dict[int, simpy.Event] = {}

    def expect(self, request: Request) -> simpy.Event:
        event = self.env.event()
        self._waiting[request.request_id] = event
        return event

    def awaited(self, request: Request) -> bool:
        """Whether a closed-loop user waits for ``request`` to end."""
        return request.request_id in self._waiting

    def notify(self, request: Request) -> None:
        event = self._waiting.pop(request.request_id, None)
        if event is not None:
            event.succeed(request)


def arrival_process(
    env: simpy.Environment,
    tenant: str,
    arrivals: Iterator[ArrivalTuple] | Iterator[TracedArrival],
    budget: RequestBudget,
    dispatch: Dispatch,
) -> Generator[simpy.Event, Any, None]:
    """Create each request at its arrival time and dispatch it.

    Requests that arrive at the same instant are dispatched together without yielding, so a
    replica starting an iteration at that instant sees all of them.
    """
    for item in arrivals:
        arrival_at_s = item[0]
        if arrival_at_s > env.now:
            yield env.timeout(arrival_at_s - env.now)
        request_id = budget.take(arrival_at_s)
        if request_id is None:
            return
        # the simulated clock, not the requested time: now + (t - now) can round one ulp below t, and
        # a request must never be scheduled before the arrival it records
        request = Request(request_id, tenant, env.now, item[1], item[2])
        if len(item) == 5:
            request.session_id = item[3]
            request.prefix_hash_ids = item[4]
        if budget.marks is not None:
            budget.marks.mark(request)
        dispatch(request)


def closed_loop_user(
    env: simpy.Environment,
    tenant: str,
    user: int,
    start_s: float,
    draws: Iterator[ThinkDraw],
    budget: RequestBudget,
    dispatch: Dispatch,
    completions: Completions,
    conversation: Conversation | None = None,
    client: ClientThread | None = None,
    documents: DocumentCounter | None = None,
) -> Generator[simpy.Event, Any, None]:
    """One user: its first request at ``start_s``, then each a think time after the previous one ended
    (and after ``client`` has done its work on it; with ``conversation``, each a turn of a multi-turn chat;
    with ``documents``, each prompt cut from the document of its draw).

    Raises :class:`ClusterSimError` if the user's requests are rejected :data:`MAX_INSTANT_REJECTIONS`
    times in a row at one instant (zero think time and lengths no replica can serve): time would
    never advance.
    """
    delay_s = start_s
    num_instant_rejections = 0
    while True:
        think_s, prompt_tokens, output_tokens = next(draws)
        ids = documents.next_ids(prompt_tokens) if documents is not None else ()  # the draw's document
        if delay_s > 0:
            yield env.timeout(delay_s)
        request_id = budget.take(env.now)
        if request_id is None:
            return
        if conversation is None:
            request = Request(
                request_id, tenant, env.now, prompt_tokens, output_tokens, session_id=user, prefix_hash_ids=ids
            )  # fmt: skip
        else:
            prompt_tokens, ids = conversation.next_turn(prompt_tokens, output_tokens)
            request = Request(
                request_id, tenant, env.now, prompt_tokens, output_tokens, session_id=user,
                prefix_hash_ids=ids, ids_cover_output=True,
            )  # fmt: skip
        if budget.marks is not None:
            budget.marks.mark(request)
        ended = completions.expect(request)
        dispatch(request)
        yield ended
        if conversation is not None:
            conversation.ended(prompt_tokens, output_tokens, request.status == "completed")
        delay_s = think_s if client is None else think_s + client.done_at_s(env.now, request.prompt_tokens) - env.now
        rejected_now = request.status == "rejected" and request.arrival_at_s == env.now and delay_s == 0
        num_instant_rejections = num_instant_rejections + 1 if rejected_now else 0
        if num_instant_rejections >= MAX_INSTANT_REJECTIONS:
            raise ClusterSimError(
                f"tenant '{tenant}': user {user} had {num_instant_rejections} requests in a row rejected at "
                f"{env.now:g} s with no think time ({request.reject_reason}); time cannot advance"
            )


class DocumentCounter:
    """A closed-loop tenant's document counter, shared by its users: the request of the tenant's
    ``k``-th length draw reads document ``k`` (a benchmark client pairs its ``k``-th prompt with its
    ``k``-th lengths; a user takes its draw when its previous request ends, before it thinks)."""

    __slots__ = ("block_tokens", "num_drawn", "tenant_index")

    def __init__(self, tenant_index: int, block_tokens: int) -> None:
        self.tenant_index = tenant_index
        self.block_tokens = block_tokens
        self.num_drawn = 0

    def next_ids(self, prompt_tokens: int) -> tuple[int, ...]:
        """The prefix ids of the next draw's prompt, cut from the next document."""
        ids = prompt_ids(self.tenant_index, self.num_drawn, prompt_tokens, self.block_tokens)
        self.num_drawn += 1
        return ids


class ClientThread:
    """A benchmark client's one thread: its work on each request that ended (``per_request_s`` plus
    ``per_prompt_token_s`` per prompt token), one request at a time in the order they ended."""

    __slots__ = ("free_at_s", "per_prompt_token_s", "per_request_s")

    def __init__(self, per_request_s: float, per_prompt_token_s: float) -> None:
        self.per_request_s = per_request_s
        self.per_prompt_token_s = per_prompt_token_s
        self.free_at_s = 0.0

    def done_at_s(self, now_s: float, prompt_tokens: int) -> float:
        """When its work on a request of ``prompt_tokens`` that ended at ``now_s`` is done."""
        self.free_at_s = max(now_s, self.free_at_s) + self.per_request_s + self.per_prompt_token_s * prompt_tokens
        return self.free_at_s


@dataclass(frozen=True)
class Traffic:
    """What every tenant's processes share: the clock, the seed, the data read from disk, the request
    budget, where requests go and where completions come from."""

    env: simpy.Environment
    seed: int
    data: dict[str, TenantData]
    budget: RequestBudget
    dispatch: Dispatch
    completions: Completions
    prefix_block_tokens: int = 512  # tokens a conversation's block id stands for (the scenario's kv setting)
    conversation_ids: Iterator[int] = field(default_factory=itertools.count)
    processes: list[simpy.Process] = field(default_factory=list)  # every arrival process and user started

    def arrivals_over(self) -> bool:
        """Whether every arrival process and user has ended (no request will arrive any more)."""
        return not any(process.is_alive for process in self.processes)


def _with_documents(arrivals: Iterator[ArrivalTuple], tenant_index: int, block_tokens: int) -> Iterator[TracedArrival]:
    """An open-loop tenant's arrivals, the ``k``-th carrying the prefix ids of document ``k``."""
    for k, (arrival_at_s, prompt, output) in enumerate(arrivals):
        yield arrival_at_s, prompt, output, -1, prompt_ids(tenant_index, k, prompt, block_tokens)


def _start_stream(traffic: Traffic, tenant: Tenant, tenant_index: int) -> None:
    arrivals = tenant_arrivals(tenant, traffic.seed, traffic.data.get(tenant.name))
    if tenant.documents is not None:
        arrivals = _with_documents(arrivals, tenant_index, traffic.prefix_block_tokens)  # type: ignore[arg-type]
    process = arrival_process(traffic.env, tenant.name, arrivals, traffic.budget, traffic.dispatch)
    traffic.processes.append(traffic.env.process(process))


def _start_users(traffic: Traffic, tenant: Tenant, tenant_index: int) -> None:
    arrival = tenant.arrival
    assert isinstance(arrival, ClosedLoopArrivals)
    draws = closed_loop_draws(tenant, traffic.seed, traffic.data.get(tenant.name))
    documents = None if tenant.documents is None else DocumentCounter(tenant_index, traffic.prefix_block_tokens)
    env = traffic.env
    # users start in order and each first takes one request from the budget, so with max_requests M
    # only the first M users send any request (and none sends a second): the others are not started
    max_requests = traffic.budget.max_requests
    num_started = arrival.num_users if max_requests is None else min(arrival.num_users, max_requests)
    client = None
    if arrival.client_time_per_request_s or arrival.client_time_per_prompt_token_s:
        client = ClientThread(arrival.client_time_per_request_s, arrival.client_time_per_prompt_token_s)
    for user in range(num_started):
        start_s = user * arrival.ramp_up_s / arrival.num_users
        conversation = None
        if arrival.turns_per_conversation > 1:
            conversation = Conversation(
                arrival.turns_per_conversation,
                arrival.max_context_tokens,
                traffic.prefix_block_tokens,
                traffic.conversation_ids,
            )
        traffic.processes.append(
            env.process(
                closed_loop_user(
                    env,
                    tenant.name,
                    user,
                    start_s,
                    draws,
                    traffic.budget,
                    traffic.dispatch,
                    traffic.completions,
                    conversation,
                    client,
                    documents,
                )
            )
        )


ARRIVALS: Registry[Callable[[Traffic, Tenant, int], None]] = Registry(
    "arrival process",
    [*((kind, _start_stream) for kind in STREAMS.names()), ("closed_loop", _start_users)],
)


def start_workload(traffic: Traffic, tenants: tuple[Tenant, ...]) -> None:
    """Start every tenant's processes (in tenant order; a closed-loop tenant's users in user order)."""
    for index, tenant in enumerate(tenants):
        ARRIVALS.get(tenant.arrival.kind)(traffic, tenant, index)
