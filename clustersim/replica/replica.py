"""One GPU replica as a SimPy process: plan a step, price it, wait for it to end, account for it.

The process is a thin shell around :class:`~clustersim.replica.core.Core`, which holds the state
and makes every decision. It waits on timers at absolute times with the same-instant order of
:mod:`clustersim.clock`: a step's end comes before the arrivals due at that instant, and the next
plan after them, so a request arriving exactly at a step boundary is admitted at that boundary.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from clustersim.clock import Clock, plan_priority, step_end_priority
from clustersim.frontend import FrontEnd
from clustersim.replica.core import Core
from clustersim.workload.request import Request


class Replica:
    """A model instance that batches requests iteration by iteration."""

    def __init__(self, clock: Clock, core: Core) -> None:
        self.clock = clock
        self.index = core.spec.index
        self.core = core
        self._end_priority = step_end_priority(self.index)
        self._plan_priority = plan_priority(self.index)
        self._wakeup: simpy.Event | None = None
        self.frontend: FrontEnd | None = None  # its API server, where requests sent here wait to reach its queue
        self.process = clock.process(self._run())

    # ------------------------------------------------------------------ what a router sees
    @property
    def num_outstanding(self) -> int:
        """Requests sent here and not yet ended: in its front end, queued or holding a seat (what a load
        balancer counting its open requests to this replica sees)."""
        return self.core.num_outstanding + self._num_incoming

    @property
    def num_waiting(self) -> int:
        """Requests sent here not holding a seat: in its front end or queued."""
        return self.core.num_waiting + self._num_incoming

    @property
    def _num_incoming(self) -> int:
        """Requests sent here still in its front end."""
        return self.frontend.num_passing if self.frontend is not None else 0

    @property
    def holds_nothing(self) -> bool:
        """No request queued or seated here, and no KV cache kept here for a transfer (it may stop)."""
        core = self.core
        return core.num_outstanding == 0 and not core.remote.sending

    @property
    def num_used_kv_blocks(self) -> int:
        """KV blocks in use at this instant."""
        return self.core.kv_used_blocks(self.clock.now, self._planned)

    @property
    def num_kv_blocks(self) -> int:
        return self.core.kv.pool.num_total_blocks

    # ------------------------------------------------------------------ arrivals
    def enqueue(self, request: Request, front: bool = False) -> None:
        """Accept a routed request (at the queue's head if ``front``): queue it (waking an idle replica),
        or reject it if it can never be served."""
        outcome = self.core.enqueue(request, self.clock.now, self._ended, self._planned, front)
        if outcome == "cut":
            self._end_sooner()
        elif outcome == "queued":
            self.wake()

    def withdraw(self, request: Request) -> None:
        """Take a waiting request out of the queue (its KV cache was lost on its way here)."""
        if self.core.withdraw(request, self.clock.now, self._ended, self._planned):
            self._end_sooner()

    def cancel_pull(self, request: Request) -> None:
        """A KV cache on its way here will not land (its prefill replica failed): free its blocks."""
        self.core.cancel_pull(request, self.clock.now, self._ended)

    def wake(self) -> None:
        """An idle replica plans again at this instant (something it waited for happened); a busy one
        plans at the end of its step anyway."""
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def _end_sooner(self) -> None:
        """The run in flight now ends at an earlier boundary: wait for that one instead.

        When that boundary is at a later instant, the process's wait moves to a timer there directly
        (what an interrupt would do, without its event and exception; where a timer is created does
        not change when it fires, its replica's step-end priority being its own). A boundary at this
        very instant goes through an interrupt, which orders it after the events due before it now.
        """
        step, process = self.core.in_flight, self.process
        assert step is not None  # only a run in flight is cut
        if step.ends_at_s > self.clock.now:
            waited = process._target
            waited.callbacks.remove(process._resume)
            timer = self.clock.timer_at(step.ends_at_s, self._end_priority)
            timer.callbacks.append(process._resume)
            process._target = timer
        else:
            process.interrupt()

    def _ended(self, at_s: float) -> bool:
        return self.clock.passed(at_s, self._end_priority)

    def _planned(self, at_s: float) -> bool:
        return self.clock.passed(at_s, self._plan_priority)

    # ------------------------------------------------------------------ the loop
    def _run(self) -> Generator[simpy.Event, Any, None]:
        clock, core = self.clock, self.core
        end_priority, plan_priority = self._end_priority, self._plan_priority
        while True:
            now = clock.now
            if clock.peek() == now:  # plan after every arrival and step end of this instant
                yield clock.timer_at(now, plan_priority)
            else:  # nothing else is due now: planning at once is planning at this priority
                clock.note_processed(plan_priority)
            hold_s = core.hold_until_s(now)
            if hold_s is not None:
                yield clock.any_of([self._arm_wakeup(), clock.timer_at(hold_s, plan_priority)])
                self._wakeup = None
                continue
            step = core.plan(now)
            if step is None:
                yield self._arm_wakeup()
                self._wakeup = None
                continue
            core.in_flight = step
            while True:
                try:
                    yield clock.timer_at(step.ends_at_s, end_priority)
                    break
                except simpy.Interrupt:  # an arrival moved the end earlier: wait for the new one
                    pass
            core.in_flight = None
            core.end(step, step.num_steps, clock.now)

    def _arm_wakeup(self) -> simpy.Event:
        self._wakeup = self.clock.event()
        return self._wakeup

    # ------------------------------------------------------------------ failure and restart
    def halt(self, fresh: Core) -> list[Request]:
        """The replica stops now (it failed, or was stopped empty): its process is dropped where it
        waits (nothing will resume it), the steps that ended are accounted for and the one in
        progress is lost; ``fresh`` (an empty core) stands in while it is not serving. Returns every
        request it held."""
        process = self.process
        target = process._target
        if target is not None and target.callbacks is not None and process._resume in target.callbacks:
            target.callbacks.remove(process._resume)
        process._generator.close()
        # it is over: an interrupt already scheduled for it (a run cut at this instant, by a request another
        # replica failing at the same instant sent here) finds it dead and does nothing (SimPy's Interruption)
        process._ok, process._value = True, None
        self._wakeup = None
        held = self.core.fail(self.clock.now, self._ended)
        self.core = fresh
        return held

    def restart(self, core: Core) -> None:
        """The replica serves again from now, on ``core`` (empty queues, an empty KV cache)."""
        self.core = core
        self.process = self.clock.process(self._run())

    def stop(self) -> list[Request]:
        """Close the books when the clock stops; returns the requests still unfinished here."""
        return self.core.stop(self.clock.now, self._ended, self._planned)

    def kv_blocks_of_running(self) -> int:
        return self.core.kv_blocks_of_running()
