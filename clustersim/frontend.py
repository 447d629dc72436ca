"""An engine's HTTP front end before one replica: its API server.

A served request is parsed and tokenized before the engine sees it, and its tokens are detokenized
and streamed back as they come. vLLM's OpenAI server does this in one process, beside the engine
core (its tokenizer is a single-thread executor, vLLM issue #25301: Hugging Face fast tokenizers are
not thread-safe, vLLM PR #34789). Requests are parsed one at a time, first come first served: the
server starts on the next waiting request when it hands one over, and a parse's work is
``per_request_s`` plus ``per_prompt_token_s`` for each token of its prompt (tokenizing it). The
streaming runs in the same process, interleaved with that work (an asyncio event loop), so the two
share the server: while it parses, streaming takes a share ``rho`` of its time and the parse the rest,
``rho`` the work the streamed tokens bring a second (``per_output_token_s`` times their rate), capped
at ``MAX_STREAMING_SHARE``, or that cap while tokens wait to be streamed. A parse in progress is
re-timed whenever ``rho`` changes (a request's first token, a request's end, the start of a parse), so
a request waiting behind others is parsed at the loads of its turn, not of its arrival. The token
rate is that of the requests it handed to its replica that have made their first token and not ended,
each at the token rate one request makes, estimated from the ones that completed (``(output tokens -
1) / (finish - first token)`` at the engine, averaged over the first :data:`RATE_SAMPLES` and then
weighing each new one by ``1 / RATE_SAMPLES``). Before the first completion, the rate is the
replica's modelled decode rate for those requests (``modelled_tokens_per_s``: their number, at most
the engine's batch, over one pure-decode step's time at their mean contexts): a burst sent at once
is throttled by the streaming of its first requests from the start, as a real server's is. Requests
are handed over, make their first tokens and end at the same instants in both simulation modes, and
the modelled rate is a function of the requests streaming, so the estimate is the same in both.

When the tokens come faster than the server streams them, they queue, first come first served, and
reach their clients late (:mod:`clustersim.streamlag`): a request's first token arrives after the
work waiting when it was made (its own included) and its last after the work waiting then (at least
its own), so its client-side TTFT, TPOT and end include the wait, and a closed-loop user sends its
next request when its last token arrives; the engine's steps and inter-token gaps do not.

Where the engine hands a request over only after the parses queued before it (``tokenize_after_queued``),
a request's work is two visits to the server: its parse (``per_request_s``: reading the request, rendering
its chat template) and, joining the back of the queue when the parse ends, its tokenizing and hand-off
(``per_prompt_token_s`` for each prompt token). A burst sent at once is then parsed whole before any of
it is tokenized and handed over, where parsing and tokenizing each request in turn would hand the first
over after one request's work. vLLM's API server does this in every release read, 0.10.2 to 0.19: in
0.11 the chat template is rendered on the event loop (serving_engine.py ``_preprocess_chat``, chat_utils.py
``apply_hf_chat_template``) and the first point where a request's coroutine yields is its tokenizing
(``AsyncMicrobatchTokenizer``, its own one-thread executor), whose batcher wakes only after the
handlers queued before it have rendered; process_inputs and the send to the engine core follow on the
loop, as the response starts streaming. From 0.19 (PR #34789) the render runs on the renderer's one-thread
pool (``--renderer-num-workers``), and the tokenizing is queued on the same pool behind every render
submitted before it.

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

import math
from collections import deque
from collections.abc import Callable

from clustersim.clock import Clock
from clustersim.streamlag import StreamLag
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
        tokenize_after_queued: bool = False,
    ) -> None:
        self.clock = clock
        self.tokenize_after_queued = tokenize_after_queued
        self.per_request_s = per_request_s
        self.latency_s = latency_s
        self.per_output_token_s = per_output_token_s
        self.per_prompt_token_s = per_prompt_token_s
        self.busy_s = 0.0
        self.num_requests = 0  # submitted
        self.num_delivered = 0  # handed to the replica
        self.delay_s = 0.0  # from arrival to the replica's queue, summed over the requests delivered
        self.max_delay_s = 0.0
        self.num_streamed = 0  # completed requests whose tokens it streamed
        self.late_s = 0.0  # how late their last tokens reached their clients, summed
        self.max_late_s = 0.0
        self.delivered_until_s = 0.0  # when the last of those last tokens reached its client
        # in the front end now, not yet delivered, with where each goes, when it arrived and whether its parse
        # is done (its tokenizing waits: tokenize_after_queued); head: being worked on now
        self._waiting: deque[tuple[Request, Callable[[Request], None], float, bool]] = deque()
        self._handing_over = False  # in the loop that hands requests over and starts the next
        self._parsing = False  # whether the head of the queue is being parsed
        self._parse_left_s = 0.0  # the head's parse work not done by _parse_since_s
        self._parse_since_s = 0.0
        self._parse_ticket = 0  # which hand-over timer counts (a parse re-timed leaves its old one behind)
        self._parse_ready_s = math.inf  # when the timer that counts fires
        self._inflow = 0.0  # streaming work arriving a second since the last change
        self._in_passage: dict[int, Request] = {}  # parsed, on their way to the replica (latency_s)
        self._handed: set[int] = set()  # handed to the replica and not ended
        self._streaming: dict[int, float] = {}  # of those, the ones that made their first token, and when
        self.lag = StreamLag()  # the tokens made that the server has not yet streamed
        self._tokens_per_s_per_request = 0.0  # one streaming request's token rate (completed requests)
        self._streaming_context_tokens = 0.0  # the streaming requests' mean contexts, summed
        self._num_rates = 0  # completions in that estimate, at most RATE_SAMPLES
        # before any completion: the tokens a second (num_seqs, context_tokens) would decode at its replica
        self.modelled_tokens_per_s: Callable[[int, float], float] | None = None

    def streaming_rate(self) -> float:
        """The tokens a second the requests streaming through this server make now (estimated)."""
        num = len(self._streaming)
        if self._num_rates or not num or self.modelled_tokens_per_s is None:
            return num * self._tokens_per_s_per_request
        return self.modelled_tokens_per_s(num, self._streaming_context_tokens)

    def streaming_share(self) -> float:
        """The share of the server's time that streaming takes now while it parses: all it may while
        tokens wait to be streamed, else the work they bring (capped either way)."""
        if self.lag.backlog_s(self.clock.now) > 0.0:
            return MAX_STREAMING_SHARE
        return min(self.per_output_token_s * self.streaming_rate(), MAX_STREAMING_SHARE)

    def parse_s(self, work_s: float) -> float:
        """How long ``work_s`` of parsing takes from now, as the streaming is now: at the server's
        share left while tokens wait to be streamed, then at what their arrival leaves."""
        first_rate, first_span_s, then_rate = self._parse_rates(self.clock.now)
        if work_s <= first_rate * first_span_s:
            return work_s / first_rate
        return first_span_s + (work_s - first_rate * first_span_s) / then_rate

    def _parse_rates(self, at_s: float) -> tuple[float, float, float]:
        """From ``at_s`` while the rates stay as they are: the parse's share of the server for how long,
        and its share after (the streaming waiting at ``at_s`` drained)."""
        waiting_s, inflow = self.lag.backlog_s(at_s), self._inflow
        after = 1.0 - min(inflow, MAX_STREAMING_SHARE)
        if waiting_s == 0.0:
            return after, 0.0, after
        if inflow >= MAX_STREAMING_SHARE:
            return 1.0 - MAX_STREAMING_SHARE, math.inf, after
        return 1.0 - MAX_STREAMING_SHARE, waiting_s / (MAX_STREAMING_SHARE - inflow), after

    def first_token(self, request: Request) -> None:
        """``request``, handed to this server's replica, made its first token: it streams from now on."""
        if request.request_id not in self._handed or request.request_id in self._streaming:
            return  # not through here, or made again after its replica failed: it streams already
        self._streaming[request.request_id] = self.clock.now
        self._streaming_context_tokens += _mean_context_tokens(request)
        self._restream()
        if self.per_output_token_s > 0.0:  # the first token to stream, the rest at the rate it decodes
            self._add_streaming(self.per_output_token_s)

    def ended(self, request: Request) -> float:
        """``request``, which passed this front end, has ended at its engine; if it completed, its token
        rate joins the estimate of one request's, and its first and last tokens' times become the
        times they reach its client. Returns how much later than now its last token does."""
        first, finished = request.first_token_at_s, request.finished_at_s
        late_s = 0.0
        if request.status == "completed" and self.per_output_token_s > 0.0:  # each token its own work too
            late_s = self.lag.lag_s(finished, self.per_output_token_s)
            request.first_token_at_s = min(first + self.lag.lag_s(first), finished + late_s)
            request.finished_at_s = finished + late_s
            self.num_streamed += 1
            self.late_s += late_s
            self.max_late_s = max(self.max_late_s, late_s)
            self.delivered_until_s = max(self.delivered_until_s, request.finished_at_s)
        self._handed.discard(request.request_id)
        if self._streaming.pop(request.request_id, None) is not None:
            self._streaming_context_tokens -= _mean_context_tokens(request)
        if request.status == "completed" and request.output_tokens >= 2 and finished > first:  # NaN: unset
            rate = (request.output_tokens - 1) / (finished - first)  # at its engine
            self._num_rates = min(self._num_rates + 1, RATE_SAMPLES)
            self._tokens_per_s_per_request += (rate - self._tokens_per_s_per_request) / self._num_rates
        self._restream()
        self.lag.forget_before(next(iter(self._streaming.values()), self.clock.now))
        return late_s

    def _restream(self) -> None:
        """The streaming's rates from now on, as the requests streaming and the parsing are now; a parse
        in progress is re-timed to them."""
        if self.per_output_token_s == 0.0:
            return
        now = self.clock.now
        if self._parsing:  # the work done since the last change, at the rates until now
            first_rate, first_span_s, then_rate = self._parse_rates(self._parse_since_s)
            span_s = now - self._parse_since_s
            done_s = first_rate * min(span_s, first_span_s) + then_rate * max(0.0, span_s - first_span_s)
            self._parse_left_s = max(0.0, self._parse_left_s - done_s)
            self._parse_since_s = now
        self._inflow = self.per_output_token_s * self.streaming_rate()
        self.lag.change(now, self._inflow, MAX_STREAMING_SHARE if self._parsing else 1.0)
        if self._parsing:
            self._time_the_parse()

    def _add_streaming(self, work_s: float) -> None:
        """``work_s`` of streaming arrives at once: a parse in progress is re-timed to it."""
        now = self.clock.now
        if self._parsing:
            self._restream()  # the parse's work done until now, at the streaming before this
        self.lag.add(now, work_s)
        if self._parsing:
            self._time_the_parse()

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
        self._waiting.append((request, deliver, self.clock.now, False))
        if not self._parsing:  # the server was idle: it starts on this one now
            self._start()

    def _start(self) -> None:
        """Start on the request at the head of the queue: its parse (and tokenizing, unless that waits
        for the parses queued behind it), or its tokenizing."""
        request, _, _, parsed = self._waiting[0]
        self._parsing = True
        tokenize_s = self.per_prompt_token_s * request.prompt_tokens
        if parsed:
            work_s = tokenize_s
            self.busy_s += work_s
        else:
            work_s = self.per_request_s + (0.0 if self.tokenize_after_queued else tokenize_s)
            self.busy_s += work_s + self.per_output_token_s * request.output_tokens
        self._parse_left_s, self._parse_since_s = work_s, self.clock.now
        if self.per_output_token_s > 0.0:
            self.lag.change(self.clock.now, self._inflow, MAX_STREAMING_SHARE)  # streaming shares the server
        self._time_the_parse()

    def _time_the_parse(self) -> None:
        """(Re)set the hand-over of the parse in progress to when its work left is done."""
        now = self.clock.now
        ready_s = now + self.parse_s(self._parse_left_s) if self.per_output_token_s > 0.0 else now + self._parse_left_s
        if ready_s == self._parse_ready_s:
            return
        self._parse_ticket += 1
        self._parse_ready_s = ready_s
        if ready_s == now:
            self._hand_over()
            return
        ticket = self._parse_ticket
        self.clock.timer_at(ready_s, ARRIVAL_PRIORITY).callbacks.append(lambda _: self._parsed(ticket))

    def _parsed(self, ticket: int) -> None:
        if ticket == self._parse_ticket:  # not re-timed since
            self._hand_over()

    def _hand_over(self) -> None:
        """The head request's work is done: deliver it (after its passage's latency), or queue its
        tokenizing behind the parses waiting; then start on the next one waiting."""
        request, deliver, arrived_s, parsed = self._waiting.popleft()
        self._parsing = False
        self._parse_ready_s = math.inf
        if self.per_output_token_s > 0.0:
            self.lag.change(self.clock.now, self._inflow, 1.0)  # streaming has the server to itself
        if self.tokenize_after_queued and not parsed:
            self._waiting.append((request, deliver, arrived_s, True))
        elif self.latency_s > 0.0:
            self._in_passage[request.request_id] = request
            self.clock.timer_at(self.clock.now + self.latency_s, ARRIVAL_PRIORITY).callbacks.append(
                lambda _: self._deliver(request, deliver, arrived_s)
            )
        else:
            self._deliver(request, deliver, arrived_s)
        if self._handing_over:  # work done at once inside the loop below: it starts the next
            return
        self._handing_over = True
        while self._waiting and not self._parsing:
            self._start()
        self._handing_over = False

    def _deliver(self, request: Request, deliver: Callable[[Request], None], arrived_s: float) -> None:
        self._in_passage.pop(request.request_id, None)
        delay_s = self.clock.now - arrived_s
        self.num_delivered += 1
        self.delay_s += delay_s
        self.max_delay_s = max(self.max_delay_s, delay_s)
        self._handed.add(request.request_id)
        deliver(request)  # may submit another request (a closed-loop user whose request was rejected)

    def close(self) -> list[Request]:
        """The clock stopped: the requests still in the front end, in no replica's queue (unfinished)."""
        return [request for request, _, _, _ in self._waiting] + list(self._in_passage.values())


def _mean_context_tokens(request: Request) -> float:
    """The context ``request`` attends to, on average over its decode steps."""
    return request.prompt_tokens + request.output_tokens / 2


def frontend_summary(frontends: list[FrontEnd], span_s: float) -> dict[str, float | int]:
    """The summary's ``frontend`` block: how busy the API servers were, how long requests spent there, and
    how late their last tokens reached their clients after their engines made them."""
    num = sum(f.num_requests for f in frontends)
    delivered = sum(f.num_delivered for f in frontends)
    streamed = sum(f.num_streamed for f in frontends)
    busy = [f.busy_s / span_s for f in frontends] if span_s > 0 else [0.0]
    return {
        "num_requests": num,
        "mean_busy_frac": sum(busy) / len(busy),
        "max_busy_frac": max(busy),
        "mean_delay_s": sum(f.delay_s for f in frontends) / delivered if delivered else 0.0,
        "max_delay_s": max(f.max_delay_s for f in frontends),
        "mean_stream_lag_s": sum(f.late_s for f in frontends) / streamed if streamed else 0.0,
        "max_stream_lag_s": max(f.max_late_s for f in frontends),
    }
