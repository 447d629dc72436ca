"""Waiting queues: the order in which a replica considers waiting requests (pure, no simpy).

Every queue puts preempted requests first (they hold partial output), then orders the rest; a
disaggregated request whose KV cache has landed goes first too, and a request preempted later goes
behind it, since the blocks it holds come free only once it runs (:func:`push_front_of`):

* ``fcfs``: arrival order.
* ``shortest_prompt_first``: shortest prompt first, with aging: a request's key is
  ``prompt_tokens - aging_tokens_per_s x waited_s``, so long prompts are not starved. Since every
  key falls at the same rate, ordering by ``prompt_tokens + aging_tokens_per_s x arrival_at_s``
  is the same at every instant: a heap keeps it.
* ``priority``: the tenant's priority (higher first), then arrival order.
* ``fair_share``: weighted fair share between tenants: the tenant with the least admitted work
  (prompt + output tokens) per unit of weight goes next; arrival order within a tenant.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from clustersim.config.scenario import FairShareOrdering, Ordering, ShortestPromptFirstOrdering
from clustersim.registry import Registry
from clustersim.workload.request import LANDED, Request


def push_front_of(front: deque[Request], request: Request) -> None:
    """Put ``request`` at the front of ``front``, behind the requests there whose KV cache has landed
    (each holds its blocks until it runs: a preempted request ahead of them that needs blocks would wait
    for blocks that only they can free)."""
    if request.remote_kv == LANDED or not front or front[0].remote_kv != LANDED:
        front.appendleft(request)
        return
    index = 1
    while index < len(front) and front[index].remote_kv == LANDED:
        index += 1
    front.insert(index, request)


class WaitingQueue(Protocol):
    """What the replica needs from a waiting queue."""

    def __len__(self) -> int: ...

    def push(self, request: Request) -> None:
        """A new arrival."""

    def push_front(self, request: Request) -> None:
        """A preempted request: it goes before every new arrival."""

    def peek(self) -> Request:
        """The request to consider next (the queue is not empty)."""

    def pop(self) -> Request:
        """Remove and return :meth:`peek`; called when it is admitted or shed."""

    def remove(self, request: Request) -> None:
        """Take ``request`` (waiting here) out of the queue, wherever it is (rare: its KV cache was lost)."""

    def __iter__(self) -> Iterator[Request]: ...


class FcfsQueue:
    """First come, first served."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque[Request] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._items)

    def push(self, request: Request) -> None:
        self._items.append(request)

    def push_front(self, request: Request) -> None:
        push_front_of(self._items, request)

    def peek(self) -> Request:
        return self._items[0]

    def pop(self) -> Request:
        return self._items.popleft()

    def remove(self, request: Request) -> None:
        self._items.remove(request)


class _KeyedQueue:
    """Preempted requests first (LIFO, like a deque's left end), then a heap on a static key."""

    __slots__ = ("_front", "_heap")

    def __init__(self) -> None:
        self._front: deque[Request] = deque()
        self._heap: list[tuple[float, float, int, Request]] = []

    def _key(self, request: Request) -> float:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._front) + len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        yield from self._front
        yield from (item[3] for item in sorted(self._heap))

    def push(self, request: Request) -> None:
        heapq.heappush(self._heap, (self._key(request), request.arrival_at_s, request.request_id, request))

    def push_front(self, request: Request) -> None:
        push_front_of(self._front, request)

    def peek(self) -> Request:
        return self._front[0] if self._front else self._heap[0][3]

    def pop(self) -> Request:
        return self._front.popleft() if self._front else heapq.heappop(self._heap)[3]

    def remove(self, request: Request) -> None:
        if request in self._front:
            self._front.remove(request)
            return
        self._heap = [item for item in self._heap if item[3] is not request]
        heapq.heapify(self._heap)


class ShortestPromptFirstQueue(_KeyedQueue):
    """Shortest prompt first, aged by ``aging_tokens_per_s`` so that long prompts are served too."""

    __slots__ = ("aging_tokens_per_s",)

    def __init__(self, aging_tokens_per_s: float) -> None:
        super().__init__()
        self.aging_tokens_per_s = aging_tokens_per_s

    def _key(self, request: Request) -> float:
        return request.prompt_tokens + self.aging_tokens_per_s * request.arrival_at_s


class PriorityQueue(_KeyedQueue):
    """Higher tenant priority first; arrival order within a priority."""

    __slots__ = ("priorities",)

    def __init__(self, priorities: Mapping[str, int]) -> None:
        super().__init__()
        self.priorities = priorities

    def _key(self, request: Request) -> float:
        return -float(self.priorities.get(request.tenant, 0))


class FairShareQueue:
    """Weighted fair share of admitted work between tenants; arrival order within each tenant."""

    __slots__ = ("_front", "_per_tenant", "_served", "_size", "weights")

    def __init__(self, weights: Mapping[str, float]) -> None:
        self.weights = weights
        self._front: deque[Request] = deque()
        self._per_tenant: dict[str, deque[Request]] = {}
        self._served: dict[str, float] = {}
        self._size = 0

    def __len__(self) -> int:
        return len(self._front) + self._size

    def __iter__(self) -> Iterator[Request]:
        yield from self._front
        for queue in self._per_tenant.values():
            yield from queue

    def push(self, request: Request) -> None:
        tenant = request.tenant
        queue = self._per_tenant.setdefault(tenant, deque())
        if not queue:  # a tenant becoming active starts at the least-served active tenant's level
            active = [self._served[t] / self.weights.get(t, 1.0) for t, q in self._per_tenant.items() if q]
            floor = min(active) * self.weights.get(tenant, 1.0) if active else 0.0
            self._served[tenant] = max(self._served.get(tenant, 0.0), floor)
        queue.append(request)
        self._size += 1

    def push_front(self, request: Request) -> None:
        push_front_of(self._front, request)

    def _next_tenant(self) -> str:
        # least admitted work per unit weight; ties by tenant name (deterministic)
        waiting = [t for t, q in self._per_tenant.items() if q]
        return min(waiting, key=lambda t: (self._served[t] / self.weights.get(t, 1.0), t))

    def peek(self) -> Request:
        if self._front:
            return self._front[0]
        return self._per_tenant[self._next_tenant()][0]

    def pop(self) -> Request:
        if self._front:
            return self._front.popleft()
        tenant = self._next_tenant()
        request = self._per_tenant[tenant].popleft()
        self._served[tenant] += request.prompt_tokens + request.output_tokens
        self._size -= 1
        return request

    def remove(self, request: Request) -> None:
        if request in self._front:
            self._front.remove(request)
            return
        self._per_tenant[request.tenant].remove(request)
        self._size -= 1


QueueFactory = Callable[[Ordering, Mapping[str, int]], WaitingQueue]  # (config, tenant priorities) -> queue


def _fcfs(ordering: Ordering, priorities: Mapping[str, int]) -> WaitingQueue:
    return FcfsQueue()


def _shortest_prompt_first(ordering: Ordering, priorities: Mapping[str, int]) -> WaitingQueue:
    assert isinstance(ordering, ShortestPromptFirstOrdering)
    return ShortestPromptFirstQueue(ordering.aging_tokens_per_s)


def _priority(ordering: Ordering, priorities: Mapping[str, int]) -> WaitingQueue:
    return PriorityQueue(priorities)


def _fair_share(ordering: Ordering, priorities: Mapping[str, int]) -> WaitingQueue:
    assert isinstance(ordering, FairShareOrdering)
    return FairShareQueue(ordering.weights)


ORDERINGS: Registry[QueueFactory] = Registry(
    "ordering",
    [
        ("fcfs", _fcfs),
        ("shortest_prompt_first", _shortest_prompt_first),
        ("priority", _priority),
        ("fair_share", _fair_share),
    ],
)


def make_queue(ordering: Ordering, priorities: Mapping[str, int]) -> WaitingQueue:
    """The waiting queue for an ordering config (``priorities``: tenant name -> priority)."""
    return ORDERINGS.get(ordering.kind)(ordering, priorities)
