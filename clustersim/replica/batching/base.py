"""What a batching policy is: the order in which it composes a step's primitives (pure).

A policy never touches replica state itself: it calls the primitives of a :class:`StepBuilder`
(grow and include the running decodes, bring swapped sequences back, continue started prompts,
admit waiting heads), which apply each decision. The replica's fast path needs nothing more from
a policy: a plan that only grew the running decodes repeats unchanged at the next boundaries until
a sequence finishes, the KV pool runs short, the waiting head changes while admission is open, or
a time-dependent rule (SLO admission) acts, because admission walks the waiting queue in order, stops at the first head
that does not fit, and nothing it checks (seats, free blocks, token budget) grows during a run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sized
from dataclasses import dataclass
from typing import ClassVar, Protocol

from clustersim.config.reserve import DecodeReserve
from clustersim.workload.request import Request


class Waiting(Sized, Iterable[Request], Protocol):
    """The waiting queue, as a policy may look at it."""


@dataclass(frozen=True, slots=True)
class StepLimits:
    """The knobs that bound one step of one replica (the scenario's ``scheduler``)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    batch_wait_s: float = 0.0
    long_prefill_token_threshold: int = 0  # a prompt's tokens in one step at most (0: the budget's)
    num_scheduler_steps: int = 1  # decode steps per scheduling decision (vLLM V0 multi-step; 1: every step)
    # pipeline stages, each with a micro-batch in flight (clustersim.cost.pipeline): a step holds that
    # many micro-batches, each with its own max_num_batched_tokens (a prompt's chunk stays within one)
    num_micro_batches: int = 1
    # admission holds back KV for the running requests' future tokens (SGLang: clustersim.replica.reservation)
    decode_reserve: DecodeReserve | None = None

    @property
    def step_tokens(self) -> int:
        """The tokens one step may hold: every micro-batch's budget."""
        return self.max_num_batched_tokens * self.num_micro_batches


class StepBuilder(Protocol):
    """The primitives a policy composes into one step (see :mod:`clustersim.replica.builder`)."""

    @property
    def num_seats(self) -> int:
        """Sequences holding a seat (prefilling or decoding)."""
        ...

    @property
    def num_prefills(self) -> int:
        """Prompt chunks in the step so far."""
        ...

    @property
    def num_preempted(self) -> int:
        """Sequences preempted while composing this step."""
        ...

    @property
    def num_waiting(self) -> int:
        """Requests in the waiting queue (deferred ones excluded)."""
        ...

    @property
    def now_s(self) -> float: ...

    def decode(self) -> None:
        """Include the running decodes, giving each sequence that crosses a KV block boundary its
        block and preempting the most recently admitted sequences when the pool is short."""

    def swap_in(self) -> None:
        """Bring swapped-out sequences back, oldest first, while seats and blocks allow."""

    def continue_prefills(self) -> None:
        """Give started prompts their next chunks, in admission order, within the token budget."""

    def admit(self, chunked: bool, max_admitted: int | None = None) -> int:
        """Admit waiting heads in order while they fit (a seat, their KV blocks, the token budget:
        whole prompts, or any budget left when ``chunked``), at most ``max_admitted`` of them;
        returns how many were admitted."""
        ...


class BatchingPolicy(Protocol):
    """One batching policy, registered under its ``kind`` (the scenario's ``scheduler.policy``).

    ``whole_sequence_kv``: sequences reserve KV for prompt + output on admission (no growth, no
    preemption). ``chunks_prompts``: prompts longer than the token budget are split, so they are
    never refused for their length. ``kv_per_chunk``: a prompt takes KV blocks for each chunk as it
    is scheduled rather than for the whole prompt on admission. ``holds``: an idle replica may wait
    before planning (:meth:`hold_until_s`). ``multi_step``: it can plan runs of decode steps as one
    decision (``scheduler.num_scheduler_steps``).
    """

    kind: ClassVar[str]
    whole_sequence_kv: ClassVar[bool]
    chunks_prompts: ClassVar[bool]
    kv_per_chunk: ClassVar[bool]
    holds: ClassVar[bool]  # whether hold_until_s may ever hold
    multi_step: ClassVar[bool]
    seqs_per_micro_batch: ClassVar[bool]  # max_num_seqs bounds each pipeline micro-batch, not the replica

    @classmethod
    def build(cls, limits: StepLimits) -> BatchingPolicy:
        """The policy for a replica with these limits."""
        ...

    def plan(self, step: StepBuilder) -> None:
        """Compose the next step."""

    def hold_until_s(self, now_s: float, num_seats: int, waiting: Waiting) -> float | None:
        """Keep an idle replica waiting (for a fuller batch) until this time or the next arrival; None: plan now."""
        ...


class PolicyBase:
    """Defaults: KV grows with the sequences, whole prompts, never holds."""

    kind: ClassVar[str] = ""
    whole_sequence_kv: ClassVar[bool] = False
    chunks_prompts: ClassVar[bool] = False
    kv_per_chunk: ClassVar[bool] = False
    holds: ClassVar[bool] = False
    multi_step: ClassVar[bool] = False
    seqs_per_micro_batch: ClassVar[bool] = False

    @classmethod
    def build(cls, limits: StepLimits) -> BatchingPolicy:
        policy: BatchingPolicy = cls()
        return policy

    def plan(self, step: StepBuilder) -> None:
        raise NotImplementedError

    def hold_until_s(self, now_s: float, num_seats: int, waiting: Waiting) -> float | None:
        return None
