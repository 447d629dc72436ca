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
up and 300 s down) and Knative's concurrency target for ``queue_length``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy

from clustersim.clock import LIFECYCLE_PRIORITY
from clustersim.config.faults import Autoscaler, KVUseAutoscaler, QueueLengthAutoscaler
from clustersim.lifecycle import Lifecycle
from clustersim.registry import Registry
from clustersim.replica.replica import Replica

Metric = Callable[[Sequence[Replica]], float]  # the load per replica up


def mean_outstanding(replicas: Sequence[Replica]) -> float:
    """Requests queued or running per replica."""
    return sum(r.num_outstanding for r in replicas) / len(replicas)


def mean_kv_used_frac(replicas: Sequence[Replica]) -> float:
    """The mean fraction of KV blocks in use."""
    return sum(r.num_used_kv_blocks / r.num_kv_blocks for r in replicas) / len(replicas)


def recommend(num_ready: int, current: int, metric: float, target: float, tolerance_frac: float) -> int:
    """HPA's desired count: ``ceil(num_ready * metric / target)``, or ``current`` (the replicas up or
    starting) when the metric is within the tolerance of its target."""
    ratio = metric / target
    if abs(ratio - 1.0) <= tolerance_frac:
        return current
    return math.ceil(num_ready * ratio)


def _queue_length(config: Autoscaler) -> tuple[Metric, float]:
    assert isinstance(config, QueueLengthAutoscaler)
    return mean_outstanding, config.target_outstanding_per_replica


def _kv_use(config: Autoscaler) -> tuple[Metric, float]:
    assert isinstance(config, KVUseAutoscaler)
    return mean_kv_used_frac, config.target_kv_used_frac


AUTOSCALERS: Registry[Callable[[Autoscaler], tuple[Metric, float]]] = Registry(
    "autoscaler", [("queue_length", _queue_length), ("kv_use", _kv_use)]
)


class AutoscalerProcess:
    """Ticks every ``interval_s``, recommends, stabilizes and starts or drains replicas."""

    def __init__(self, lifecycle: Lifecycle, config: Autoscaler) -> None:
        self.lifecycle = lifecycle
        self.config = config
        self.metric, self.target = AUTOSCALERS.get(config.kind)(config)
        self.max_replicas = len(lifecycle.replicas)
        initial = config.initial_replicas if config.initial_replicas is not None else config.min_replicas
        for index in range(initial, self.max_replicas):
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

    def desired(self, now_s: float) -> int:
        """The stabilized count of replicas wanted now (the current one when none is up to measure)."""
        lifecycle, config = self.lifecycle, self.config
        current = lifecycle.count("up", "starting")
        if lifecycle.up:
            metric = self.metric(lifecycle.up)
            wanted = recommend(len(lifecycle.up), current, metric, self.target, config.tolerance_frac)
        else:
            wanted = current
        if lifecycle.count("starting"):
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
        current = lifecycle.count("up", "starting")
        states = lifecycle.states
        for index in [i for i, s in enumerate(states) if s == "draining"][: max(0, wanted - current)]:
            lifecycle.undrain(index)
            current += 1
        for index in [i for i, s in enumerate(states) if s == "stopped"][: max(0, wanted - current)]:
            lifecycle.start(index, "autoscaler", self.config.cold_start)
            current += 1
        if wanted < current:
            up = [i for i, s in enumerate(states) if s == "up"]
            up.sort(key=lambda i: (lifecycle.replicas[i].num_outstanding, -i))
            for index in up[: current - wanted]:
                lifecycle.drain(index)
