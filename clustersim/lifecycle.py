"""The replicas' states and the moves between them (SimPy), shared by failures and the autoscaler.

A replica is ``up`` (routed to), ``failing`` (failed, not detected yet: still routed to, serving
nothing), ``starting`` (cold: weights from storage, then the engine's start-up), ``draining``
(routed nothing new; stops once it holds no request), ``stopped`` (its GPUs released) or ``down``
(failed and detected, being repaired). Every move happens at the lifecycle priority of its instant
(:mod:`clustersim.clock`) and is a row of ``lifecycle.parquet``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal

import simpy

from clustersim.clock import LIFECYCLE_PRIORITY, Clock
from clustersim.config.faults import ColdStart
from clustersim.records import LifecycleRecord
from clustersim.replica.core import Core
from clustersim.replica.replica import Replica
from clustersim.workload.request import Request

State = Literal["up", "failing", "starting", "draining", "stopped", "down"]
ROUTED = ("up", "failing")  # a failed replica is routed to until its failure is detected
Cause = Literal["fault", "autoscaler"]


def cold_start_s(weight_bytes: float, cold_start: ColdStart) -> float:
    """Seconds from power-on to serving: the weights read from storage, then the engine's start-up."""
    return weight_bytes / cold_start.storage_bandwidth_bytes_per_s + cold_start.engine_init_s


@dataclass(frozen=True)
class Slot:
    """What starting replica ``index`` again needs: a fresh core, its weights' size and GPU count."""

    new_core: Callable[[], Core]  # empty queues and KV cache
    weight_bytes: float
    num_gpus: int


class Lifecycle:
    """The pool's states: which replicas a router may choose (``up``, in replica order: the same list
    object as ``replicas`` while every one is up, so a run without moves routes as before)."""

    def __init__(
        self,
        clock: Clock,
        replicas: list[Replica],
        slots: list[Slot],
        on_final: Callable[[Request], None],
        run_over: Callable[[], bool],
    ) -> None:
        self.clock = clock
        self.replicas = replicas
        self.slots = slots
        self.on_final = on_final
        self.run_over = run_over
        self.dispatch: Callable[[Request], None] = lambda request: None  # set by the run
        # set by a disaggregated run: what else a failed replica held (its KV pulls on the wire), whether
        # a request has a replica up to go to (its pool's), and what a lost request lets go of
        self.also_held: Callable[[int], list[Request]] = lambda index: []
        self.can_route: Callable[[Request], bool] = lambda request: bool(self.up)
        self.on_lost: Callable[[Request], None] = lambda request: None
        self.states: list[State] = ["up"] * len(replicas)
        self.up: list[Replica] = replicas
        self.rows: list[LifecycleRecord] = []
        self._drained: dict[int, simpy.Event] = {}
        self.listeners: list[Callable[[Request, float], None]] = []  # hear of every request that ends, and when
        self._unnoticed: dict[int, int] = {}  # failing, not detected: how many requests it held when it failed
        self._failed_at_s: dict[int, float] = {}

    def count(self, *states: State) -> int:
        return sum(1 for state in self.states if state in states)

    def _move(
        self, index: int, state: State, cause: Cause, held: int = 0, retried: int = 0, lost: int = 0, event: str = ""
    ) -> None:
        self._set_state(index, state)
        self.rows.append(LifecycleRecord(index, self.clock.now, event or state, cause, held, retried, lost))

    def _set_state(self, index: int, state: State) -> None:
        self.states[index] = state
        self.up = [r for r, s in zip(self.replicas, self.states, strict=True) if s in ROUTED]

    # ------------------------------------------------------------------ starting and stopping
    def stop_at_start(self, index: int) -> None:
        """Replica ``index`` starts the run stopped (the autoscaler's spare slots)."""
        self._halt(index)
        self._move(index, "stopped", "autoscaler")

    def start(self, index: int, cause: Cause, cold_start: ColdStart) -> simpy.Process:
        """Start replica ``index`` cold now: it is ``starting`` at once, ``up`` when the process ends."""
        self._move(index, "starting", cause)
        return self.clock.process(self._started(index, cause, cold_start))

    def _started(self, index: int, cause: Cause, cold_start: ColdStart) -> Generator[simpy.Event, Any, None]:
        clock, slot = self.clock, self.slots[index]
        yield clock.timer_at(clock.now + cold_start_s(slot.weight_bytes, cold_start), LIFECYCLE_PRIORITY)
        self.replicas[index].restart(slot.new_core())
        self._move(index, "up", cause)

    def drain(self, index: int) -> None:
        """Route nothing new to replica ``index``; stop it once it holds no request."""
        self._move(index, "draining", "autoscaler")
        if self.replicas[index].holds_nothing:
            self._stop(index)
            return
        drained = self._drained[index] = self.clock.event()
        self.clock.process(self._stop_when(index, drained))

    def undrain(self, index: int) -> None:
        """A draining replica is wanted again: it is up at once (no cold start)."""
        self._drained.pop(index, None)
        self._move(index, "up", "autoscaler")

    def _stop_when(self, index: int, drained: simpy.Event) -> Generator[simpy.Event, Any, None]:
        yield drained
        if self._drained.get(index) is drained:  # still draining (not wanted back meanwhile)
            del self._drained[index]
            self._stop(index)

    def _stop(self, index: int) -> None:
        self._halt(index)
        self._move(index, "stopped", "autoscaler")

    def request_ended(self, request: Request) -> None:
        """Hear of every request that ends (the run's ``on_final``): a draining replica may be empty now."""
        for listener in self.listeners:
            listener(request, self.clock.now)
        if request.replica >= 0:
            self.let_go(request.replica)

    def let_go(self, index: int) -> None:
        """Replica ``index`` let go of a request or of a KV cache it kept for a transfer: if it is
        draining and holds nothing now, it stops."""
        drained = self._drained.get(index) if self.states[index] == "draining" else None
        if drained is not None and not drained.triggered and self.replicas[index].holds_nothing:
            drained.succeed()

    def _halt(self, index: int) -> list[Request]:
        return self.replicas[index].halt(self.slots[index].new_core())

    # ------------------------------------------------------------------ failing
    def fail(self, index: int, on_failure: str, max_retries: int, detected: bool = True) -> None:
        """Replica ``index`` fails now and loses its work. ``detected``: the router knows at once, and
        each request it held is handed on (``retry``) or lost; else it stays routed to, holding what it
        held and what arrives, until :meth:`detect`."""
        self._drained.pop(index, None)
        self._failed_at_s[index] = self.clock.now
        held = self._halt(index)  # a fresh core stands in, with no process: it serves nothing
        held += self.also_held(index)
        if detected:
            self._set_state(index, "down")  # before routing the held requests again
            retried = self._hand_on(index, held, on_failure, max_retries)
            self._move(index, "down", "fault", len(held), retried, len(held) - retried, event="failed")
        else:  # what it held waits in the stand-in's queue with what arrives (the end of the run finds it there)
            waiting = self.replicas[index].core.waiting
            for request in held:
                waiting.push(request)
            self._unnoticed[index] = len(held)
            self._move(index, "failing", "fault", len(held), event="failed")

    def detect(self, index: int, on_failure: str, max_retries: int) -> None:
        """The router learns that replica ``index`` failed: hand on or lose what it held and what
        was routed to it since."""
        num_held = self._unnoticed.pop(index)
        everything = self._halt(index)  # what it held when it failed, then what arrived
        self._set_state(index, "down")
        retried = self._hand_on(index, everything, on_failure, max_retries)
        arrived = len(everything) - num_held
        self._move(index, "down", "fault", arrived, retried, len(everything) - retried, event="detected")

    def _hand_on(self, index: int, held: list[Request], on_failure: str, max_retries: int) -> int:
        """Route each request again, or lose it; returns how many were routed."""
        failed_at_s = self._failed_at_s[index]
        retried = 0
        for request in held:
            reason = f"replica {index} failed at {failed_at_s:.3f} s"
            if on_failure == "lose":
                self._lose(request, reason)
            elif request.num_retries >= max_retries:
                self._lose(request, f"{reason} after {request.num_retries} retries")
            elif not self.can_route(request):
                self._lose(request, f"{reason} and no replica was up to retry on")
            else:
                request.num_retries += 1
                self.dispatch(request)
                retried += 1
        return retried

    def _lose(self, request: Request, reason: str) -> None:
        self.on_lost(request)
        request.status = "lost"
        request.reject_reason = reason
        self.on_final(request)
