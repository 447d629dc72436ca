"""The simulated clock: a SimPy environment whose order of events at one instant is explicit.

SimPy processes the events due at one instant by ``(priority, scheduling order)``. Scheduling
order depends on when an event was created, which differs between the step-by-step mode and the
fast path (a run of decode steps is one event there), so clustersim never lets it decide anything
observable. At one instant, events run in this order:

1. the horizon (the clock stops before anything else due then happens);
2. step ends, by replica index: tokens are emitted and finished requests retire;
3. replica failures and restarts (:mod:`clustersim.faults`), in scheduling order: a failure keeps
   the steps that ended at its instant, and the arrivals of that instant see the replica down;
4. KV caches handed from prefill to decode replicas and landed there (:mod:`clustersim.disagg`), in
   scheduling order (the order of the step ends and plans that started them: the same in both modes);
5. SimPy's own events (process starts, interrupts), then arrivals, think times and completions
   (SimPy's ``NORMAL`` priority, in scheduling order: their times do not depend on the mode);
6. plans, by replica index: each replica decides its next step having seen every arrival and
   every step end of the instant.

Timers are scheduled at absolute times (``now + (t - now)`` can round away from ``t``), so a
step boundary computed the same way in both modes is the same float in both.
"""

from __future__ import annotations

from heapq import heappop, heappush

import simpy
from simpy.core import EmptySchedule, StopSimulation
from simpy.events import Event, EventCallbacks, EventPriority

HORIZON_PRIORITY = -(1 << 62)
STEP_END_PRIORITY = -(1 << 61)  # + replica index
LIFECYCLE_PRIORITY = -(1 << 60)  # failures and restarts
TRANSFER_PRIORITY = -(1 << 59)  # KV caches handed on and landed between replicas (disaggregation)
PLAN_PRIORITY = 2  # + replica index; SimPy's URGENT is 0 and NORMAL 1


def step_end_priority(replica_index: int) -> int:
    """The priority of replica ``replica_index``'s step ends."""
    return STEP_END_PRIORITY + replica_index


def plan_priority(replica_index: int) -> int:
    """The priority of replica ``replica_index``'s plans."""
    return PLAN_PRIORITY + replica_index


class Timer(Event):
    """An event that fires at the absolute time ``at_s`` with the given same-instant ``priority``."""

    def __init__(self, clock: Clock, at_s: float, priority: int) -> None:
        self.env = clock
        self.callbacks: EventCallbacks = []
        self._ok = True
        self._value = None
        heappush(clock._queue, (at_s, EventPriority(priority), next(clock._eid), self))


class Clock(simpy.Environment):
    """A SimPy environment that counts the events it processes and knows the priority of the current one."""

    def __init__(self) -> None:
        super().__init__()
        self.num_events = 0
        # the highest priority processed so far at the current instant: every event due now with a
        # priority at most this has run (new events may still be scheduled now, at lower priorities)
        self.instant_priority = HORIZON_PRIORITY
        self._instant_s = 0.0

    def step(self) -> None:
        """Process the next event (SimPy's ``Environment.step``, also counting it and its priority)."""
        try:
            self._now, priority, _, event = heappop(self._queue)
        except IndexError:
            raise EmptySchedule from None
        if priority > self.instant_priority or self._now > self._instant_s:
            self.instant_priority = priority
            self._instant_s = self._now
        self.num_events += 1
        callbacks, event.callbacks = event.callbacks, None  # type: ignore[assignment]
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            event.callbacks = callbacks[callbacks.index(callback) + 1 :]
            self.schedule(event, EventPriority(-1))
            raise
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc

    def note_processed(self, priority: int) -> None:
        """Something with ``priority`` ran now without an event of its own (nothing else was due before it)."""
        if priority > self.instant_priority:
            self.instant_priority = priority

    def timer_at(self, at_s: float, priority: int) -> Timer:
        """An event firing at absolute time ``at_s`` (not before now) with ``priority``."""
        return Timer(self, at_s, priority)

    def passed(self, at_s: float, priority: int) -> bool:
        """Whether an event at ``(at_s, priority)`` would already have been processed by now."""
        return at_s < self._now or (at_s == self._now and priority <= self.instant_priority)
