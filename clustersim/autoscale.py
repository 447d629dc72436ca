"""The autoscaler: start and stop replicas of the pool by load (the scenario's ``autoscaler``).

Policies are pure: given what the replicas up hold, each recommends a replica count with the
Horizontal Pod Autoscaler's rule, ``ceil(ready x metric / target)`` (no change within the
tolerance). The SimPy process around them ticks every ``interval_s`` at the lifecycle priority,
stabilizes the recommendation as HPA does (scale up to the lowest recommendation of the last
``scale_up_window_s``, down to the highest of the last ``scale_down_window_s``; never down while a
replica is starting) and applies it:
draining replicas are wanted back first, then stopped ones start cold (lowest index first); a scale
down drains the replicas holding the fewest requests (the highest index on ties). Sources: the
Kubernetes HPA documentation (algorithm, tolerance 0.1, 15 s sync period, stabilization windows 0 s
up and 300 s down) and Knative's concurrency target for ``queue_length``; ``slo`` scales on the share
of recent requests that missed a TTFT target, over the share allowed.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

import simpy

from clustersim.clock import LIFECYCLE_PRIORITY
from clustersim.config.faults import Autoscaler, KVUseAutoscaler, QueueLengthAutoscaler, SloAutoscaler
from clustersim.lifecycle import ROUTED, Lifecycle, State
from clustersim.registry import Registry
from clustersim.replica.replica import Replica
from clustersim.workload.request import Request


def recommend(num_ready: int, current: int, metric: float, target: float, tolerance_frac: float) -> int:
    """HPA's desired count: ``ceil(num_ready * metric / target)``, or ``current`` (the replicas up or
    starting) when the metric is within the tolerance of its target."""
    ratio = metric / target
    if abs(ratio - 1.0) <= tolerance_frac:
        return current
    return math.ceil(num_ready * ratio)


class LoadPolicy(Protocol):
    """Measures the load the rule compares with ``target`` (None: nothing to measure now)."""

    target: float

    def measure(self, up: Sequence[Replica], now_s: float) -> float | None: ...

    def heard(self, request: Request, now_s: float) -> None:
        """``request`` ended now (completed, rejected or lost)."""
        ...


class QueueLength:
    """Requests queued or running per replica up."""

    def __init__(self, config: Autoscaler) -> None:
        assert isinstance(config, QueueLengthAutoscaler)
        self.target = config.target_outstanding_per_replica

    def measure(self, up: Sequence[Replica], now_s: float) -> float | None:
        return sum(r.num_outstanding for r in up) / len(up)

    def heard(self, request: Request, now_s: float) -> None:
        pass


class KVUse:
    """The mean fraction of KV blocks in use on the replicas up."""

    def __init__(self, config: Autoscaler) -> None:
        assert isinstance(config, KVUseAutoscaler)
        self.target = config.target_kv_used_frac

    def measure(self, up: Sequence[Replica], now_s: float) -> float | None:
        return sum(r.num_used_kv_blocks / r.num_kv_blocks for r in up) / len(up)

    def heard(self, request: Request, now_s: float) -> None:
        pass


class SloMisses:
    """The share of the requests ended in the last ``window_s`` that missed the TTFT target, over
    the share allowed (the rule's target is then 1)."""

    def __init__(self, config: Autoscaler) -> None:
        assert isinstance(config, SloAutoscaler)
        self.config = config
        self.target = 1.0
        self._ended: deque[tuple[float, bool]] = deque()  # (end time, missed), in time order

    def heard(self, request: Request, now_s: float) -> None:
        if request.status == "completed":
            self._ended.append((now_s, self.missed(request)))
        elif request.status in ("rejected", "lost"):
            self._ended.append((now_s, True))

    def missed(self, request: Request) -> bool:
        """Whether a completed request missed a target (its TPOT: none with a single output token)."""
        ttft_s, tpot_s = self.config.ttft_s, self.config.tpot_s
        if ttft_s is not None and request.first_token_at_s - request.arrival_at_s > ttft_s:
            return True
        if tpot_s is None or request.output_tokens < 2:
            return False
        return (request.finished_at_s - request.first_token_at_s) / (request.output_tokens - 1) > tpot_s

    def measure(self, up: Sequence[Replica], now_s: float) -> float | None:
        ended = self._ended
        while ended and ended[0][0] < now_s - self.config.window_s:
            ended.popleft()
        if not ended:
            return None
        misses = sum(1 for _, missed in ended if missed)
        return misses / len(ended) / (1.0 - self.config.target_attainment_frac)


AUTOSCALERS: Registry[Callable[[Autoscaler], LoadPolicy]] = Registry(
    "autoscaler", [("queue_length", QueueLength), ("kv_use", KVUse), ("slo", SloMisses)]
)


class AutoscalerProcess:
    """Ticks every ``interval_s``, recommends, stabilizes and starts or drains replicas: those of
    ``pool`` (replica indices, in order; None: every replica), measured over that pool alone."""

    def __init__(self, lifecycle: Lifecycle, config: Autoscaler, pool: Sequence[int] | None = None) -> None:
        self.lifecycle = lifecycle
        self.config = config
        self.policy = AUTOSCALERS.get(config.kind)(config)
        lifecycle.listeners.append(self.policy.heard)
        self.pool = list(pool) if pool is not None else list(range(len(lifecycle.replicas)))
        self.max_replicas = len(self.pool)
        initial = config.initial_replicas if config.initial_replicas is not None else config.min_replicas
        for index in self.pool[initial:]:
            lifecycle.stop_at_start(index)
        # (time, recommendation) within the longer window; the starting pool counts as time 0's
        self._history: deque[tuple[float, int]] = deque([(0.0, initial)])
        lifecycle.clock.process(self._run())

    def _run(self) -> Generator[simpy.Event, Any, None]:
        clock, lifecycle, config = self.lifecycle.clock, self.lifecycle, self.config
        tick = 0
        while True:
            tick += 1
            yield clock.timer_at(tick * config.interval_s, LIFECYCLE_PRIORITY)
            if lifecycle.run_over():
                return
            self.apply(self.desired(clock.now))

    def _count(self, *states: State) -> int:
        states_now = self.lifecycle.states
        return sum(1 for index in self.pool if states_now[index] in states)

    def _up(self) -> list[Replica]:
        """The pool's replicas a router may choose, in replica order."""
        lifecycle = self.lifecycle
        return [lifecycle.replicas[i] for i in self.pool if lifecycle.states[i] in ROUTED]

    def desired(self, now_s: float) -> int:
        """The stabilized count of replicas wanted now (the current one when none is up to measure)."""
        config = self.config
        current = self._count("up", "starting")
        up = self._up()
        metric = self.policy.measure(up, now_s) if up else None
        if metric is None:
            wanted = current
        else:
            wanted = recommend(len(up), current, metric, self.policy.target, config.tolerance_frac)
        if self._count("starting"):
            wanted = max(wanted, current)  # no scale down while a start is on its way
        wanted = min(max(wanted, config.min_replicas), self.max_replicas)
        history = self._history
        history.append((now_s, wanted))
        keep_s = max(config.scale_up_window_s, config.scale_down_window_s)
        while history[0][0] < now_s - keep_s:
            history.popleft()
        if wanted > current:
            return max(current, min(w for t, w in history if t >= now_s - config.scale_up_window_s))
        if wanted < current:
            return min(current, max(w for t, w in history if t >= now_s - config.scale_down_window_s))
        return current

    def apply(self, wanted: int) -> None:
        """Start or drain replicas until ``wanted`` are up or starting (the failed ones wait for repair)."""
        lifecycle = self.lifecycle
        current = self._count("up", "starting")
        states, pool = lifecycle.states, self.pool
        for index in [i for i in pool if states[i] == "draining"][: max(0, wanted - current)]:
            lifecycle.undrain(index)
            current += 1
        for index in [i for i in pool if states[i] == "stopped"][: max(0, wanted - current)]:
            lifecycle.start(index, "autoscaler", self.config.cold_start)
            current += 1
        if wanted < current:
            up = [i for i in pool if states[i] == "up"]
            up.sort(key=lambda i: (lifecycle.replicas[i].num_outstanding, -i))
            for index in up[: current - wanted]:
                lifecycle.drain(index)
