"""An engine's HTTP front end before one replica: its API server, one request at a time.

A served request is parsed and tokenized before the engine sees it, and its tokens are detokenized
and streamed back as they come. vLLM's OpenAI server does this in one process, beside the engine
core (its tokenizer is a single-thread executor, vLLM issue #25301), so requests queue there when
they come faster than it handles them. The front end is a single first-come-first-served server:
a request arriving at ``t`` starts at ``max(t, free)``, reaches the replica's queue
``per_request_s`` later, and keeps the server busy for ``per_output_token_s`` per output token
after that (the streaming work, counted at admission: the server's busy time is exact, when within
the request's life it is spent is not). Deliveries are timers at arrival priority, so they
interleave with arrivals at one instant in scheduling order, in both modes alike.
"""

from __future__ import annotations

from collections.abc import Callable

from simpy.events import Event

from clustersim.clock import Clock
from clustersim.workload.request import Request

ARRIVAL_PRIORITY = 1  # SimPy's NORMAL: the priority arrivals have


class FrontEnd:
    """The API server of one replica (a single server; no work when both costs are 0)."""

    def __init__(self, clock: Clock, per_request_s: float, per_output_token_s: float) -> None:
        self.clock = clock
        self.per_request_s = per_request_s
        self.per_output_token_s = per_output_token_s
        self.free_at_s = 0.0
        self.busy_s = 0.0
        self.num_requests = 0
        self.delay_s = 0.0  # from arrival to the replica's queue, summed over requests
        self.max_delay_s = 0.0
        self._passing: dict[int, Request] = {}  # in the front end now, by request id (not yet delivered)

    @property
    def active(self) -> bool:
        return self.per_request_s > 0.0 or self.per_output_token_s > 0.0

    def submit(self, request: Request, deliver: Callable[[Request], None]) -> None:
        """Pass ``request`` through the front end, then ``deliver`` it to the replica."""
        now = self.clock.now
        start_s = max(now, self.free_at_s)
        ready_s = start_s + self.per_request_s
        work_s = self.per_request_s + self.per_output_token_s * request.output_tokens
        self.free_at_s = start_s + work_s
        self.busy_s += work_s
        self.num_requests += 1
        self.delay_s += ready_s - now
        self.max_delay_s = max(self.max_delay_s, ready_s - now)
        if ready_s == now:
            deliver(request)
            return
        timer = self.clock.timer_at(ready_s, ARRIVAL_PRIORITY)
        self._passing[request.request_id] = request

        def handed(_: Event) -> None:
            del self._passing[request.request_id]
            deliver(request)

        timer.callbacks.append(handed)

    def close(self) -> list[Request]:
        """The clock stopped: the requests still in the front end, in no replica's queue (unfinished)."""
        return list(self._passing.values())


def frontend_summary(frontends: list[FrontEnd], span_s: float) -> dict[str, float | int]:
    """The summary's ``frontend`` block: how busy the API servers were and how long requests spent there."""
    num = sum(f.num_requests for f in frontends)
    busy = [f.busy_s / span_s for f in frontends] if span_s > 0 else [0.0]
    return {
        "num_requests": num,
        "mean_busy_frac": sum(busy) / len(busy),
        "max_busy_frac": max(busy),
        "mean_delay_s": sum(f.delay_s for f in frontends) / num if num else 0.0,
        "max_delay_s": max(f.max_delay_s for f in frontends),
    }
