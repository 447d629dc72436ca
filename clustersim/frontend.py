"""An engine's HTTP front end before one replica: its API server.

A served request is parsed and tokenized before the engine sees it, and its tokens are detokenized
and streamed back as they come. vLLM's OpenAI server does this in one process, beside the engine
core (its tokenizer is a single-thread executor, vLLM issue #25301: Hugging Face fast tokenizers are
not thread-safe, vLLM PR #34789). Requests are parsed one at a time, first come first served: the
server starts on the next waiting request when it hands one over, and a parse's work is
``per_request_s`` plus ``per_prompt_token_s`` for each token of its prompt (tokenizing it). The
streaming runs in the same process, interleaved with that work (an asyncio event loop), so it is a
load on the server rather than a queue in front of it: while a share ``rho`` of the server's time goes
to streaming, a parse takes ``work / (1 - rho)``, ``rho`` taken when the parse starts (so a request
waiting behind others is parsed at the load of its turn, not of its arrival), and streaming takes
no more of the parse than the requests streaming then have tokens to stream. ``rho`` is
``per_output_token_s`` times the token rate the server is streaming: the requests it handed to its
replica that have not ended yet, each at the token rate one request streams, estimated from the ones
that completed (``(output tokens - 1) / (finish - first token)``, averaged over the first
:data:`RATE_SAMPLES` and then weighing each new one by ``1 / RATE_SAMPLES``), capped at
``MAX_STREAMING_SHARE``. Before the first completion, the rate is the replica's modelled decode rate
for those requests (``modelled_tokens_per_s``: their number, at most the engine's batch, over one
pure-decode step's time at their mean contexts): a burst sent at once is throttled by the streaming
of its first requests from the start, as a real server's is, rather than parsed at full speed for a
request's whole life. Requests are handed over and end at the same instants in both simulation
modes, and the modelled rate is a function of the requests handed over, so the estimate is the same
in both.

Beyond its work, a request may spend ``latency_s`` in passage that occupies no server: the HTTP
round trip and the hand-offs between the server's processes (vLLM's API server and engine core, SGLang's
tokenizer manager, scheduler and detokenizer, each a ZMQ hop), which many requests make at once. A
request is handed to its replica that long after its parse ends, while the server starts on the next.

Charging each request's streaming work in one piece when it is parsed would instead hold every
request behind the streaming of those before it, spreading apart a wave of requests sent together
that a real server parses together (docs/validation.md). Deliveries are timers at arrival priority, so
they interleave with arrivals at one instant in scheduling order, in both modes alike.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from clustersim.clock import Clock
from clustersim.workload.request import Request

ARRIVAL_PRIORITY = 1  # SimPy's NORMAL: the priority arrivals have
RATE_SAMPLES = 16  # assumption: the per-request streaming rate is the mean of about this many completions
MAX_STREAMING_SHARE = 0.9  # assumption: streaming leaves the server at least a tenth of its time to parse


class FrontEnd:
    """The API server of one replica (a single server; no work when its costs are 0)."""

    def __init__(
        self,
        clock: Clock,
        per_request_s: float,
        per_output_token_s: float,
        per_prompt_token_s: float = 0.0,
        latency_s: float = 0.0,
    ) -> None:
        self.clock = clock
        self.per_request_s = per_request_s
        self.latency_s = latency_s
        self.per_output_token_s = per_output_token_s
        self.per_prompt_token_s = per_prompt_token_s
        self.busy_s = 0.0
        self.num_requests = 0  # submitted
        self.num_delivered = 0  # handed to the replica
        self.delay_s = 0.0  # from arrival to the replica's queue, summed over the requests delivered
        self.max_delay_s = 0.0
        # in the front end now, not yet delivered, with where each goes and when it arrived; head: parsing now
        self._waiting: deque[tuple[Request, Callable[[Request], None], float]] = deque()
        self._parsing = False  # whether the head of the queue is being parsed
        self._in_passage: dict[int, Request] = {}  # parsed, on their way to the replica (latency_s)
        self._streaming: set[int] = set()  # handed to the replica and not ended: streaming, or soon
        self._tokens_per_s_per_request = 0.0  # one streaming request's token rate (completed requests)
        self._streaming_context_tokens = 0.0  # the streaming requests' mean contexts, summed
        self._streaming_output_tokens = 0  # the streaming requests' output tokens, summed
        self._num_rates = 0  # completions in that estimate, at most RATE_SAMPLES
        # before any completion: the tokens a second (num_seqs, context_tokens) would decode at its replica
        self.modelled_tokens_per_s: Callable[[int, float], float] | None = None

    def streaming_share(self) -> float:
        """The share of the server's time that streaming takes now (capped)."""
        num = len(self._streaming)
        if self._num_rates or not num or self.modelled_tokens_per_s is None:
            rate_tokens_per_s = num * self._tokens_per_s_per_request
        else:
            rate_tokens_per_s = self.modelled_tokens_per_s(num, self._streaming_context_tokens)
        return min(self.per_output_token_s * rate_tokens_per_s, MAX_STREAMING_SHARE)

    def parse_s(self, work_s: float) -> float:
        """How long ``work_s`` of parsing takes from now: ``work / (1 - rho)``, but streaming takes no
        more of it than the requests streaming now have tokens left to stream (at most all of theirs)."""
        share = self.streaming_share()
        if share == 0.0:
            return work_s
        return min(work_s / (1.0 - share), work_s + self.per_output_token_s * self._streaming_output_tokens)

    def ended(self, request: Request) -> None:
        """``request``, which passed this front end, has ended; if it completed, its token rate joins
        the estimate of one request's."""
        if request.request_id in self._streaming:
            self._streaming.remove(request.request_id)
            self._streaming_context_tokens -= _mean_context_tokens(request)
            self._streaming_output_tokens -= request.output_tokens
        first, finished = request.first_token_at_s, request.finished_at_s
        if request.status != "completed" or request.output_tokens < 2 or not finished > first:  # NaN: unset
            return
        rate = (request.output_tokens - 1) / (finished - first)
        self._num_rates = min(self._num_rates + 1, RATE_SAMPLES)
        self._tokens_per_s_per_request += (rate - self._tokens_per_s_per_request) / self._num_rates

    @property
    def num_passing(self) -> int:
        """Requests in this front end now (not yet delivered to its replica)."""
        return len(self._waiting) + len(self._in_passage)

    @property
    def active(self) -> bool:
        costs = (self.per_request_s, self.per_output_token_s, self.per_prompt_token_s, self.latency_s)
        return any(cost > 0.0 for cost in costs)

    def submit(self, request: Request, deliver: Callable[[Request], None]) -> None:
        """Pass ``request`` through the front end, then ``deliver`` it to the replica."""
        self.num_requests += 1
        self._waiting.append((request, deliver, self.clock.now))
        if not self._parsing:  # the server was idle: it starts on this one now
            self._start()

    def _start(self) -> None:
        """Start parsing the request at the head of the queue, at the streaming share of now."""
        request = self._waiting[0][0]
        self._parsing = True
        now = self.clock.now
        work_s = self.per_request_s + self.per_prompt_token_s * request.prompt_tokens
        ready_s = now + self.parse_s(work_s)
        self.busy_s += work_s + self.per_output_token_s * request.output_tokens
        if ready_s == now:
            self._hand_over()
            return
        self.clock.timer_at(ready_s, ARRIVAL_PRIORITY).callbacks.append(lambda _: self._hand_over())

    def _hand_over(self) -> None:
        """The head request is parsed: deliver it (after its passage's latency), then start on the next one
        waiting."""
        request, deliver, arrived_s = self._waiting.popleft()
        self._parsing = False
        if self.latency_s > 0.0:
            self._in_passage[request.request_id] = request
            self.clock.timer_at(self.clock.now + self.latency_s, ARRIVAL_PRIORITY).callbacks.append(
                lambda _: self._deliver(request, deliver, arrived_s)
            )
        else:
            self._deliver(request, deliver, arrived_s)
        if self._waiting and not self._parsing:
            self._start()

    def _deliver(self, request: Request, deliver: Callable[[Request], None], arrived_s: float) -> None:
        self._in_passage.pop(request.request_id, None)
        delay_s = self.clock.now - arrived_s
        self.num_delivered += 1
        self.delay_s += delay_s
        self.max_delay_s = max(self.max_delay_s, delay_s)
        self._streaming.add(request.request_id)
        self._streaming_context_tokens += _mean_context_tokens(request)
        self._streaming_output_tokens += request.output_tokens
        deliver(request)  # may submit another request (a closed-loop user whose request was rejected)

    def close(self) -> list[Request]:
        """The clock stopped: the requests still in the front end, in no replica's queue (unfinished)."""
        return [request for request, _, _ in self._waiting] + list(self._in_passage.values())


def _mean_context_tokens(request: Request) -> float:
    """The context ``request`` attends to, on average over its decode steps."""
    return request.prompt_tokens + request.output_tokens / 2


def frontend_summary(frontends: list[FrontEnd], span_s: float) -> dict[str, float | int]:
    """The summary's ``frontend`` block: how busy the API servers were and how long requests spent there."""
    num = sum(f.num_requests for f in frontends)
    delivered = sum(f.num_delivered for f in frontends)
    busy = [f.busy_s / span_s for f in frontends] if span_s > 0 else [0.0]
    return {
        "num_requests": num,
        "mean_busy_frac": sum(busy) / len(busy),
        "max_busy_frac": max(busy),
        "mean_delay_s": sum(f.delay_s for f in frontends) / delivered if delivered else 0.0,
        "max_delay_s": max(f.max_delay_s for f in frontends),
    }
