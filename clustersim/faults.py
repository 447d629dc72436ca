"""Replicas that fail, are repaired and start again cold (the scenario's ``faults``; SimPy processes).

A failure happens at the lifecycle priority of its instant (:mod:`clustersim.clock`): after the
step ends due then, before the arrivals. The replica keeps the steps that ended, loses the one in
progress and hands back every request it held; each is routed again among the replicas that are up
(a retry, prefilled again there like a recompute preemption) or lost. The replica is not routed to
until it has been repaired and has started again: ``repair_s``, then its weights read from storage
and the engine's start-up (:class:`~clustersim.config.faults.ColdStart`), on a fresh KV cache.

Failures stop once the run is over (every arrival process has ended and no replica holds a
request): a random failure then would only keep the clock running. Every change of a replica's
state is a row of ``lifecycle.parquet``; the summary's ``faults`` block totals them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from clustersim.clock import LIFECYCLE_PRIORITY, Clock
from clustersim.config.faults import ColdStart, Faults, MtbfFaults, ScriptedFaults
from clustersim.records import LifecycleRecord
from clustersim.replica.replica import Replica
from clustersim.workload.request import Request

FAULT_STREAM_KEY = zlib.crc32(b"faults")  # a replica's failure stream: spawn key (FAULT_STREAM_KEY, replica)
SECONDS_PER_HOUR = 3600.0


def cold_start_s(weight_bytes: float, cold_start: ColdStart) -> float:
    """Seconds from power-on to serving: the weights read from storage, then the engine's start-up."""
    return weight_bytes / cold_start.storage_bandwidth_bytes_per_s + cold_start.engine_init_s


def fault_rng(seed: int, replica: int) -> np.random.Generator:
    """Replica ``replica``'s failure stream under scenario ``seed`` (independent of every other stream)."""
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(FAULT_STREAM_KEY, replica)))


class Pool:
    """The replicas a router may choose from: those up, in replica order (the same list object while
    every replica is up, so routing without faults is untouched)."""

    def __init__(self, replicas: list[Replica]) -> None:
        self.replicas = replicas
        self.up: list[Replica] = replicas
        self._is_up = [True] * len(replicas)

    def is_up(self, index: int) -> bool:
        return self._is_up[index]

    def set_up(self, index: int, up: bool) -> None:
        self._is_up[index] = up
        self.up = [r for r, u in zip(self.replicas, self._is_up, strict=True) if u]


@dataclass(frozen=True)
class ReplicaRestart:
    """What restarting replica ``index`` needs: a fresh core's maker and its cold start in seconds."""

    new_core: Callable[[], Any]  # () -> Core, a fresh one with empty queues and KV cache
    cold_start_s: float
    num_gpus: int


class FaultInjector:
    """Fails replicas by the scenario's ``faults`` and starts them again; logs each change of state."""

    def __init__(
        self,
        clock: Clock,
        faults: Faults,
        seed: int,
        pool: Pool,
        restarts: list[ReplicaRestart],
        dispatch: Callable[[Request], None],
        on_final: Callable[[Request], None],
        run_over: Callable[[], bool],
    ) -> None:
        self.clock = clock
        self.faults = faults
        self.pool = pool
        self.restarts = restarts
        self.dispatch = dispatch
        self.on_final = on_final
        self.run_over = run_over
        self.rows: list[LifecycleRecord] = []
        if isinstance(faults, ScriptedFaults):
            clock.process(self._scripted(faults))
        else:
            for index in range(len(pool.replicas)):
                clock.process(self._random(faults, index, fault_rng(seed, index)))

    # ------------------------------------------------------------------ the processes
    def _scripted(self, faults: ScriptedFaults) -> Generator[simpy.Event, Any, None]:
        for event in sorted(faults.events, key=lambda e: e.at_s):  # stable: same-time events in file order
            if event.at_s > self.clock.now:
                yield self.clock.timer_at(event.at_s, LIFECYCLE_PRIORITY)
            if self.run_over():
                return
            if self.pool.is_up(event.replica):
                repair_s = event.repair_s if event.repair_s is not None else faults.repair_s
                self.fail(event.replica, repair_s)

    def _random(self, faults: MtbfFaults, index: int, rng: np.random.Generator) -> Generator[simpy.Event, Any, None]:
        mean_s = faults.mtbf_gpu_hours * SECONDS_PER_HOUR / self.restarts[index].num_gpus
        while True:
            at_s = self.clock.now + float(rng.exponential(mean_s))
            yield self.clock.timer_at(at_s, LIFECYCLE_PRIORITY)
            if self.run_over():
                return
            back = self.fail(index, faults.repair_s)
            if back is None:
                return
            yield back

    def _restart(self, index: int, repair_s: float) -> Generator[simpy.Event, Any, None]:
        clock = self.clock
        yield clock.timer_at(clock.now + repair_s, LIFECYCLE_PRIORITY)
        self._row(index, "starting", 0, 0, 0)
        restart = self.restarts[index]
        yield clock.timer_at(clock.now + restart.cold_start_s, LIFECYCLE_PRIORITY)
        self.pool.replicas[index].restart(restart.new_core())
        self.pool.set_up(index, True)
        self._row(index, "up", 0, 0, 0)

    # ------------------------------------------------------------------ a failure
    def fail(self, index: int, repair_s: float | None) -> simpy.Process | None:
        """Fail replica ``index`` now: hand on or lose what it held; returns the process that starts
        it again (None: it never comes back)."""
        replica = self.pool.replicas[index]
        self.pool.set_up(index, False)
        held = replica.fail(self.restarts[index].new_core())
        now = self.clock.now
        num_retried = num_lost = 0
        for request in held:
            if self.faults.on_failure == "lose":
                self._lose(request, f"replica {index} failed at {now:.3f} s")
            elif request.num_retries >= self.faults.max_retries:
                self._lose(request, f"replica {index} failed at {now:.3f} s after {request.num_retries} retries")
            elif not self.pool.up:
                self._lose(request, f"replica {index} failed at {now:.3f} s and no replica was up to retry on")
            else:
                request.num_retries += 1
                self.dispatch(request)
                num_retried += 1
                continue
            num_lost += 1
        self._row(index, "failed", len(held), num_retried, num_lost)
        return None if repair_s is None else self.clock.process(self._restart(index, repair_s))

    def _lose(self, request: Request, reason: str) -> None:
        request.status = "lost"
        request.reject_reason = reason
        self.on_final(request)

    def _row(self, index: int, event: str, num_held: int, num_retried: int, num_lost: int) -> None:
        self.rows.append(LifecycleRecord(index, self.clock.now, event, num_held, num_retried, num_lost))
