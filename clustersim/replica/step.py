"""A planned step, or a run of identical decode steps executed as one event, and its times (pure).

Decode steps of the same ``n`` sequences whose total context grows by ``n`` each step share a
*decode anchor*: the end of the k-th step after the anchor's start is the anchor's start time plus
the closed-form duration of k steps (:func:`clustersim.cost.runs.run_duration_s`). The step-by-step
mode and the fast path anchor the same steps (the anchor continues while the steps do), so every
step boundary is the same float in both, and a tie between an arrival and a boundary is decided
the same way in both.
"""

from __future__ import annotations

from collections.abc import Callable

from clustersim.cost.base import DecodeStepShape, StepBatch
from clustersim.cost.runs import RunClock
from clustersim.replica.seats import Seat


class DecodeAnchor:
    """Consecutive decode steps of ``num_seqs`` sequences from ``first_index``, started at ``started_at_s``."""

    __slots__ = ("clock", "first_context_tokens", "first_index", "last_index", "num_seqs", "shape", "started_at_s")

    def __init__(
        self, started_at_s: float, first_index: int, first_context_tokens: int, num_seqs: int, shape: DecodeStepShape
    ) -> None:
        self.started_at_s = started_at_s
        self.first_index = first_index
        self.first_context_tokens = first_context_tokens
        self.num_seqs = num_seqs
        self.shape = shape
        self.last_index = first_index - 1  # the last of its steps that has ended
        self.clock = RunClock(shape, first_context_tokens, num_seqs)

    def end_s(self, index: int) -> float:
        """When decode step ``index`` of this anchor ends."""
        return self.started_at_s + self.clock.duration_s(index - self.first_index + 1)

    def step_duration_s(self, index: int) -> float:
        """How long decode step ``index`` of this anchor lasts, by the cost formula (its gap)."""
        return self.shape.duration_s(self.first_context_tokens + self.num_seqs * (index - self.first_index))

    def continues(self, index: int, num_seqs: int, context_tokens: int, shape: DecodeStepShape) -> bool:
        """Whether a decode step (``index``, ``num_seqs``, total ``context_tokens``) directly follows this anchor's."""
        return (
            index == self.last_index + 1
            and num_seqs == self.num_seqs
            and shape is self.shape
            and context_tokens == self.first_context_tokens + num_seqs * (index - self.first_index)
        )


class Step:
    """What a replica executes between two of its events: one step, or ``num_steps`` decode steps.

    ``chunks``: (seat, prompt tokens it computes) for prefilling seats; ``anchor``: set for decode
    steps timed by a decode anchor (``None`` for steps with prefills or swap transfers, priced as
    one iteration ending at ``ends_at_s``); ``advances``: whether the decode index advances
    (``False`` when running decodes are paused).
    """

    __slots__ = (
        "advances",
        "anchor",
        "batch",
        "chunks",
        "ends_at_s",
        "external_before_tokens",
        "external_changed_at_step",
        "first_index",
        "num_preempted",
        "num_steps",
        "num_swapped_out",
        "released_in_flight",
        "started_at_s",
    )

    def __init__(
        self,
        started_at_s: float,
        first_index: int,
        batch: StepBatch,
        chunks: list[tuple[Seat, int]],
        num_preempted: int,
        advances: bool,
    ) -> None:
        self.started_at_s = started_at_s
        self.first_index = first_index
        self.num_steps = 1
        self.batch = batch
        self.chunks = chunks
        self.num_preempted = num_preempted
        self.num_swapped_out = 0
        self.advances = advances
        self.anchor: DecodeAnchor | None = None
        self.ends_at_s = started_at_s
        self.external_before_tokens = 0  # external fragmentation seen before the waiting head changed
        self.external_changed_at_step = -1  # first step whose end saw the new head (-1: it did not change)
        # (steps ended, blocks) of each pull cancelled during the run: those steps held the blocks
        self.released_in_flight: list[tuple[int, int]] | None = None

    def end_of(self, num_steps: int) -> float:
        """When the first ``num_steps`` steps have ended (``num_steps`` >= 1)."""
        if self.anchor is None:
            return self.ends_at_s
        return self.anchor.end_s(self.first_index + num_steps - 1)

    def set_length(self, num_steps: int) -> None:
        """Run ``num_steps`` steps (decode runs only) and end after the last."""
        self.num_steps = num_steps
        self.ends_at_s = self.end_of(num_steps)

    def count_ended(self, now_s: float, passed: Callable[[float], bool]) -> int:
        """How many of the steps have ended at ``now_s``; ``passed(end_s)`` tells whether an end (or a
        start: the same instant) at that time has already been processed."""
        if self.anchor is None or self.num_steps == 1:
            return 1 if passed(self.ends_at_s) else 0
        total = self.num_steps
        # an estimate from the mean step, corrected with the exact boundary times
        span_s = self.ends_at_s - self.started_at_s
        done = int((now_s - self.started_at_s) * total / span_s) if span_s > 0 else 0
        done = min(max(done, 0), total)
        while done > 0 and not passed(self.end_of(done)):
            done -= 1
        while done < total and passed(self.end_of(done + 1)):
            done += 1
        return done
