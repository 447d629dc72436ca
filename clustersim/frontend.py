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
the token rate the server is streaming: the requests it handed to its replica that have not ended yet,
each at the token rate one request streams, estimated from the ones that completed
(``(output tokens - 1) / (finish - first token)``, averaged over the first :data:`RATE_SAMPLES` and
then weighing each new one by ``1 / RATE_SAMPLES``), capped at ``MAX_STREAMING_SHARE``. Requests
are handed over and end at the same instants in both simulation modes, so the estimate is the same in
both. Before the first completion no rate is known and the server parses at full speed: a burst
shorter than one request's life is parsed as if nothing streamed. (The token rate of completed
requests, the estimate before, lagged a request's life behind every change of load.)

Charging each request's streaming work in one piece when it is parsed would instead hold every
request behind the streaming of those before it, spreading apart a wave of requests sent together
that a real server parses together (docs/validation.md). Deliveries are timers at arrival priority, so
they interleave with arrivals at one instant in scheduling order, in both modes alike.
"""

from __future__ import annotations

from collections.abc import Callable

from simpy.events import Event

from clustersim.clock import Clock
from clustersim.workload.request import Request

ARRIVAL_PRIORITY = 1  # SimPy's NORMAL: the priority arrivals have
RATE_SAMPLES = 16  # assumption: the per-request streaming rate is the mean of about this many completions
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
        self._streaming: set[int] = set()  # handed to the replica and not ended: streaming, or soon
        self._tokens_per_s_per_request = 0.0  # one streaming request's token rate (completed requests)
        self._num_rates = 0  # completions in that estimate, at most RATE_SAMPLES

    def streaming_share(self) -> float:
        """The share of the server's time that streaming takes now (capped)."""
        rate_tokens_per_s = len(self._streaming) * self._tokens_per_s_per_request
        return min(self.per_output_token_s * rate_tokens_per_s, MAX_STREAMING_SHARE)

    def ended(self, request: Request) -> None:
        """``request``, which passed this front end, has ended; if it completed, its token rate joins
        the estimate of one request's."""
        self._streaming.discard(request.request_id)
        first, finished = request.first_token_at_s, request.finished_at_s
        if request.status != "completed" or request.output_tokens < 2 or not finished > first:  # NaN: unset
            return
        rate = (request.output_tokens - 1) / (finished - first)
        self._num_rates = min(self._num_rates + 1, RATE_SAMPLES)
        self._tokens_per_s_per_request += (rate - self._tokens_per_s_per_request) / self._num_rates

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
        ready_s = start_s + work_s / (1.0 - self.streaming_share())
        self.free_at_s = ready_s
        self.busy_s += work_s + self.per_output_token_s * request.output_tokens
        self.num_requests += 1
        self.delay_s += ready_s - now
        self.max_delay_s = max(self.max_delay_s, ready_s - now)
        if ready_s == now:
            self._streaming.add(request.request_id)
            deliver(request)
            return
        timer = self.clock.timer_at(ready_s, ARRIVAL_PRIORITY)
        self._passing[request.request_id] = request

        def handed(_: Event) -> None:
            del self._passing[request.request_id]
            self._streaming.add(request.request_id)
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
