"""Replicas that fail, are repaired and start again cold (the scenario's ``faults``; SimPy processes).

A failure happens at the lifecycle priority of its instant (:mod:`clustersim.clock`): after the
step ends due then, before the arrivals. The replica keeps the steps that ended, loses the one in
progress and hands back every request it held; each is routed again among the replicas that are up
(a retry, prefilled again there like a recompute preemption) or lost (:meth:`Lifecycle.fail`). The
replica is not routed to until it has been repaired and has started again: ``repair_s``, then its
weights read from storage and the engine's start-up, on a fresh KV cache.

Failures stop once the run is over (every arrival process has ended and no replica holds a
request): a random failure then would only keep the clock running. Only a replica that is up or
draining can fail; a scripted failure of another does nothing, a random one is drawn again.
"""

from __future__ import annotations

import zlib
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from clustersim.clock import LIFECYCLE_PRIORITY
from clustersim.config.faults import Faults, MtbfFaults, ScriptedFaults
from clustersim.lifecycle import Lifecycle

FAULT_STREAM_KEY = zlib.crc32(b"faults")  # a replica's failure stream: spawn key (FAULT_STREAM_KEY, replica)
SECONDS_PER_HOUR = 3600.0
SERVING = ("up", "draining")  # the states in which a replica holds requests and can fail


def fault_rng(seed: int, replica: int) -> np.random.Generator:
    """Replica ``replica``'s failure stream under scenario ``seed`` (independent of every other stream)."""
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(FAULT_STREAM_KEY, replica)))


class FaultInjector:
    """Fails replicas by the scenario's ``faults`` and starts them again after their repair."""

    def __init__(self, lifecycle: Lifecycle, faults: Faults, seed: int) -> None:
        self.lifecycle = lifecycle
        self.faults = faults
        clock = lifecycle.clock
        if isinstance(faults, ScriptedFaults):
            clock.process(self._scripted(faults))
        else:
            for index in range(len(lifecycle.replicas)):
                clock.process(self._random(faults, index, fault_rng(seed, index)))

    def _scripted(self, faults: ScriptedFaults) -> Generator[simpy.Event, Any, None]:
        clock = self.lifecycle.clock
        for event in sorted(faults.events, key=lambda e: e.at_s):  # stable: same-time events in file order
            if event.at_s > clock.now:
                yield clock.timer_at(event.at_s, LIFECYCLE_PRIORITY)
            if self.lifecycle.run_over():
                return
            if self.lifecycle.states[event.replica] in SERVING:
                self.fail(event.replica, event.repair_s if event.repair_s is not None else faults.repair_s)

    def _random(self, faults: MtbfFaults, index: int, rng: np.random.Generator) -> Generator[simpy.Event, Any, None]:
        clock, lifecycle = self.lifecycle.clock, self.lifecycle
        mean_s = faults.mtbf_gpu_hours * SECONDS_PER_HOUR / lifecycle.slots[index].num_gpus
        while True:
            yield clock.timer_at(clock.now + float(rng.exponential(mean_s)), LIFECYCLE_PRIORITY)
            if lifecycle.run_over():
                return
            if lifecycle.states[index] not in SERVING:
                continue  # stopped or starting: no GPU time serving to fail (memoryless: draw again)
            yield self.fail(index, faults.repair_s)
            if faults.repair_s is None:
                return

    def fail(self, index: int, repair_s: float | None) -> simpy.Process:
        """Fail replica ``index`` now; returns the process that detects the failure, then repairs and
        starts the replica again (never, with ``repair_s`` None)."""
        faults = self.faults
        self.lifecycle.fail(index, faults.on_failure, faults.max_retries, detected=faults.detect_s == 0)
        return self.lifecycle.clock.process(self._recover(index, repair_s))

    def _recover(self, index: int, repair_s: float | None) -> Generator[simpy.Event, Any, None]:
        clock, faults = self.lifecycle.clock, self.faults
        if faults.detect_s > 0:
            yield clock.timer_at(clock.now + faults.detect_s, LIFECYCLE_PRIORITY)
            self.lifecycle.detect(index, faults.on_failure, faults.max_retries)
        if repair_s is None:
            return
        yield clock.timer_at(clock.now + repair_s, LIFECYCLE_PRIORITY)  # the repair starts once it is detected
        yield self.lifecycle.start(index, "fault", faults.cold_start)
