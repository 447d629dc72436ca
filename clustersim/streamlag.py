"""The streaming an API server has not caught up with: tokens its engine made that have not yet reached
their clients (pure; :mod:`clustersim.frontend` keeps one per front end).

An engine's API server detokenizes and streams each token the engine makes (vLLM's OpenAI server in
its asyncio process; trtllm-serve's in its Python server unless post-processing workers are set,
TensorRT-LLM PR #5122; SGLang in its detokenizer process). It does so in the order the tokens come,
``per_output_token_s`` of its work each, and the engine does not wait for it: when the engine makes
tokens faster than the server streams them, they queue, and reach their clients late. Benchmarks that
send 1,000 requests at once to one GPU show it: trtllm-serve's stream delivered 3,615-4,001 tokens a
second on average with inter-token gaps of a median 0.07-0.12 ms (tokens reaching the client in
bursts) and a peak of 18,641 tokens a second (GPUStack's performance lab, GPT-OSS-20B and Qwen3-14B
on one H100, trtllm-serve 1.2.0rc1; validation/corpus/gpustack.csv).

The queue is a fluid one, kept per event, never per token: between two of its server's events, the
streaming work arrives at a constant rate (``inflow``: the per-token work times the tokens a second
its replica's streaming requests make, :meth:`clustersim.frontend.FrontEnd.streaming_rate`) and is
done at a constant rate (``drain``: the whole server, or the streaming share of it while it parses a
request), so the work waiting, ``max(0, backlog + (inflow - drain) * t)``, is exact within each piece.
First come first served, a token made at ``t`` reaches its client ``backlog(t) / drain(t)`` later.
Both simulation modes update it at the same events (a front end's events are the same in both).
"""

from __future__ import annotations

import bisect


class StreamLag:
    """The work an API server has yet to do on the tokens its engine made, as a function of time."""

    def __init__(self) -> None:
        # the pieces of the backlog since the oldest one still needed, each (start, backlog then, rates)
        self._starts_s: list[float] = [0.0]
        self._backlogs_s: list[float] = [0.0]
        self._inflows: list[float] = [0.0]  # seconds of streaming work arriving per second
        self._drains: list[float] = [1.0]  # seconds of streaming work done per second (while any waits)
        self._first = 0  # index of the oldest piece kept
        self._drain_now = 1.0  # the rate work is done at now (a piece keeps an older one while nothing waits)

    def change(self, now_s: float, inflow: float, drain: float) -> None:
        """From ``now_s`` on, work arrives at ``inflow`` and is done at ``drain`` a second."""
        self._drain_now = drain
        last_inflow, last_drain = self._inflows[-1], self._drains[-1]
        same = inflow == last_inflow and (drain == last_drain or inflow <= min(drain, last_drain))
        if same and (drain == last_drain or self.backlog_s(now_s) == 0.0):
            return  # nothing waits nor will: the rate it would be done at changes no answer
        backlog_s = self.backlog_s(now_s)
        if now_s == self._starts_s[-1]:  # a second change at one instant replaces the piece begun there
            self._backlogs_s[-1], self._inflows[-1], self._drains[-1] = backlog_s, inflow, drain
            return
        self._starts_s.append(now_s)
        self._backlogs_s.append(backlog_s)
        self._inflows.append(inflow)
        self._drains.append(drain)

    def add(self, now_s: float, work_s: float) -> None:
        """``work_s`` more of streaming work arrives at once at ``now_s`` (a request's first token)."""
        backlog_s = self.backlog_s(now_s) + work_s
        if now_s == self._starts_s[-1]:
            self._backlogs_s[-1], self._drains[-1] = backlog_s, self._drain_now
            return
        self._starts_s.append(now_s)
        self._backlogs_s.append(backlog_s)
        self._inflows.append(self._inflows[-1])
        self._drains.append(self._drain_now)

    def backlog_s(self, at_s: float) -> float:
        """The streaming work waiting at ``at_s`` (at or after the oldest piece kept)."""
        k = self._piece(at_s)
        return max(0.0, self._backlogs_s[k] + (self._inflows[k] - self._drains[k]) * (at_s - self._starts_s[k]))

    def lag_s(self, at_s: float, own_work_s: float = 0.0) -> float:
        """How much later than ``at_s`` a token made at ``at_s`` reaches its client: the work waiting
        then (which, fluid, holds its own) at the rate it is done then, but at least ``own_work_s`` (its
        own, when nothing waits)."""
        k = self._piece(at_s)
        backlog = self._backlogs_s[k] + (self._inflows[k] - self._drains[k]) * (at_s - self._starts_s[k])
        return max(backlog / self._drains[k], own_work_s)

    def forget_before(self, at_s: float) -> None:
        """No later question asks of a time before ``at_s``: let the pieces that ended by then go."""
        first = bisect.bisect_right(self._starts_s, at_s, self._first) - 1
        self._first = max(first, self._first)
        if self._first > 64 and self._first * 2 > len(self._starts_s):
            for pieces in (self._starts_s, self._backlogs_s, self._inflows, self._drains):
                del pieces[: self._first]
            self._first = 0

    def _piece(self, at_s: float) -> int:
        if at_s >= self._starts_s[-1]:
            return len(self._starts_s) - 1
        return max(bisect.bisect_right(self._starts_s, at_s, self._first) - 1, self._first)
