"""An engine's HTTP front end before one replica: its API server.

A served request is parsed and tokenized before the engine sees it, and its tokens are detokenized
and streamed back as they come. vLLM's OpenAI server does this in one process, beside the engine
core (its tokenizer is a single-thread executor, vLLM issue #25301: Hugging Face fast tokenizers are
not thread-safe, vLLM PR #34789). Requests are parsed one at a time, first come first served: a
request arriving at ``t`` starts at ``max(t, free)`` and reaches the replica's queue when its work is
done, ``per_request_s`` plus ``per_prompt_token_s`` for each token of its prompt (tokenizing it). The
streaming runs in the same process, interleaved with that work (an asyncio event loop), so it is a
load on the server rather than a queue in front of it: while a share ``rho`` of the server's time goes
to streaming, a request's parse takes ``work / (1 - rho)``. ``rho`` is ``per_output_token_s`` times
the token rate the server is streaming, estimated from the requests it passed that have completed: an
exponentially weighted rate of their output tokens with a time constant of ``STREAMING_TIME_CONSTANT_S``
(completions are the same in both simulation modes, so the estimate is too), capped at
``MAX_STREAMING_SHARE``.
Charging each request's streaming work in one piece when it is parsed would instead hold every
request behind the streaming of those before it, spreading apart a wave of requests sent together
that a real server parses together (docs/validation.md). Deliveries are timers at arrival priority, so
they interleave with arrivals at one instant in scheduling order, in both modes alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from simpy.events import Event

from clustersim.clock import Clock
from clustersim.workload.request import Request

ARRIVAL_PRIORITY = 1  # SimPy's NORMAL: the priority arrivals have
STREAMING_TIME_CONSTANT_S = 10.0  # assumption: the streaming rate's memory, several requests' lives
MAX_STREAMING_SHARE = 0.9  # assumption: streaming leaves the server at least a tenth of its time to parse


class FrontEnd:
    """The API server of one replica (a single server; no work when its costs are 0)."""

    def __init__(
        self, clock: Clock, per_request_s: float, per_output_token_s: float, per_prompt_token_s: float = 0.0
    ) -> None:
        self.clock = clock
        self.per_request_s = per_request_s
        self.per_output_token_s = per_output_token_s
        self.per_prompt_token_s = per_prompt_token_s
        self.free_at_s = 0.0
        self.busy_s = 0.0
        self.num_requests = 0
        self.delay_s = 0.0  # from arrival to the replica's queue, summed over requests
        self.max_delay_s = 0.0
        self._passing: dict[int, Request] = {}  # in the front end now, by request id (not yet delivered)
        self._rate_tokens_per_s = 0.0  # the streaming rate estimated at _rate_at_s (completed requests)
        self._rate_at_s = 0.0

    def _streaming_rate(self, at_s: float) -> float:
        """The estimated streaming rate (output tokens per second) at ``at_s``: the last estimate, decayed."""
        return self._rate_tokens_per_s * math.exp((self._rate_at_s - at_s) / STREAMING_TIME_CONSTANT_S)

    def streaming_share(self, at_s: float) -> float:
        """The share of the server's time that streaming takes at ``at_s`` (capped)."""
        return min(self.per_output_token_s * self._streaming_rate(at_s), MAX_STREAMING_SHARE)

    def streamed(self, request: Request) -> None:
        """``request``, which passed this front end, has completed: its output tokens were streamed."""
        now = self.clock.now
        self._rate_tokens_per_s = self._streaming_rate(now) + request.output_tokens / STREAMING_TIME_CONSTANT_S
        self._rate_at_s = now

    @property
    def num_passing(self) -> int:
        """Requests in this front end now (not yet delivered to its replica)."""
        return len(self._passing)

    @property
    def active(self) -> bool:
        return self.per_request_s > 0.0 or self.per_output_token_s > 0.0 or self.per_prompt_token_s > 0.0

    def submit(self, request: Request, deliver: Callable[[Request], None]) -> None:
        """Pass ``request`` through the front end, then ``deliver`` it to the replica."""
        now = self.clock.now
        start_s = max(now, self.free_at_s)
        work_s = self.per_request_s + self.per_prompt_token_s * request.prompt_tokens
        ready_s = start_s + work_s / (1.0 - self.streaming_share(start_s))
        self.free_at_s = ready_s
        self.busy_s += work_s + self.per_output_token_s * request.output_tokens
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
