"""The SimPy process that turns a tenant's arrival stream into requests handed to the router."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import simpy

from clustersim.workload.arrivals import ArrivalTuple
from clustersim.workload.request import Request


@dataclass
class RequestBudget:
    """Shared by all tenants of a run: request ids, and the stop condition on arrivals."""

    max_requests: int | None
    horizon_s: float | None
    num_created: int = 0
    exhausted: bool = field(default=False)

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


def arrival_process(
    env: simpy.Environment,
    tenant: str,
    arrivals: Iterator[ArrivalTuple],
    budget: RequestBudget,
    dispatch: Callable[[Request], None],
) -> Generator[simpy.Event, Any, None]:
    """Create each request at its arrival time and dispatch it.

    Requests that arrive at the same instant are dispatched together without yielding, so a
    replica starting an iteration at that instant sees all of them.
    """
    for arrival_at_s, prompt_tokens, output_tokens in arrivals:
        if arrival_at_s > env.now:
            yield env.timeout(arrival_at_s - env.now)
        request_id = budget.take(arrival_at_s)
        if request_id is None:
            return
        dispatch(Request(request_id, tenant, arrival_at_s, prompt_tokens, output_tokens))
