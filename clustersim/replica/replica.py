"""One GPU replica's iteration-level scheduler, as a SimPy process.

Each iteration: grow decoding sequences that cross a KV block boundary (preempting the most
recently admitted when no block is free), let the batching policy admit waiting requests and
assign prompt chunks, price the step, ``yield`` its duration, then emit tokens and retire
finished requests.

Work is per event, never per token per sequence. Decoding sequences advance together, one token
per *decode step*; the replica counts decode steps with its decode index ``D`` (a ``vllm``
prefill-only step pauses the decodes and does not advance it). A decoding sequence's token count
and context length are affine in ``D``, so the loop keeps only aggregates: the number of decoding
sequences, the sum of their context offsets, and the sequences bucketed by context offset modulo
the block size (bucket ``(1 - D) mod block_size`` is exactly the set that needs a new block at
decode step ``D``). Finishes come from a heap keyed by decode index.

Fast forward: a pure-decode iteration is followed by identical ones until the next finish, the
step where the KV pool would run out, a waiting request's SLO deadline, or an arrival that could
be admitted; such a run is one event whose duration is the closed-form sum of its steps
(:mod:`clustersim.cost.runs`), and one ``steps.parquet`` row with ``num_steps`` > 1. Token times
equal the step-by-step mode's.

Same-instant ordering (documented contract): when a step ends at time t, tokens are emitted and
finished requests retire at t first; then every other event already due at t (arrivals) runs;
then the next iteration admits. So a request arriving exactly at a step boundary is admitted at
that boundary.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import simpy

from clustersim.architecture import blocks_for_tokens
from clustersim.cost.base import CostModel, DecodeStepShape, StepBatch
from clustersim.cost.runs import run_duration_s, steps_done_by
from clustersim.eventlog import RunLog
from clustersim.kvcache.contiguous import ContiguousSpace
from clustersim.kvcache.paged import BlockPool
from clustersim.kvcache.prefix import PrefixCache, Segment
from clustersim.replica.policies import (
    BatchingPolicy,
    BatchLimits,
    SloAdmission,
    admits,
    blocks_to_admit,
    misses_ttft,
    prefill_tokens_of,
    rejection_reason,
    token_budget,
)
from clustersim.replica.queues import FcfsQueue, WaitingQueue
from clustersim.workload.request import Request


class ReplicaStalledError(RuntimeError):
    """The replica has waiting requests but can admit none while idle: a bug, reported loudly."""


class _Seat:
    """A sequence holding a seat: prefilling (``done_tokens < prefill_tokens``) or decoding.

    Decoding counters are affine in the decode index D: KV tokens needed at decode step D are
    ``kv_offset + D``; tokens emitted after decode step D are ``emit_base + D``.
    """

    __slots__ = (
        "alive",
        "cached_tokens",
        "decoding",
        "done_tokens",
        "emit_base",
        "finish_index",
        "hit_segments",
        "kv_offset",
        "order",
        "own_segments",
        "prefill_tokens",
        "region_start",
        "request",
        "reserved_blocks",
    )

    def __init__(self, request: Request, order: int, prefill_tokens: int, reserved_blocks: int) -> None:
        self.request = request
        self.order = order
        self.prefill_tokens = prefill_tokens
        self.done_tokens = 0
        self.reserved_blocks = reserved_blocks
        self.decoding = False
        self.kv_offset = 0
        self.emit_base = 0
        self.finish_index = 0
        self.region_start = -1  # where its region starts in a contiguous space
        self.cached_tokens = 0  # leading prompt tokens reused from the prefix cache (whole blocks)
        self.hit_segments: list[Segment] = []  # the cached segments it reuses (pinned while it runs)
        self.own_segments: list[Segment] = []  # its prompt's other segments: cached when it leaves
        self.alive = True


@dataclass(frozen=True)
class ReplicaSpec:
    """Everything fixed about one replica."""

    index: int
    policy: BatchingPolicy
    limits: BatchLimits
    num_kv_blocks: int
    max_model_len_tokens: int
    fast_forward: bool = True
    batch_wait_s: float = 0.0
    slo_admission: SloAdmission = "off"
    ttft_targets_s: Mapping[str, float] = field(default_factory=dict)
    allocator: Literal["paged", "contiguous"] = "paged"
    watermark_blocks: int = 0
    kv_bytes_per_token: float = 0.0  # over the replica's GPUs, for the memory ledger
    prefix_caching: bool = False
    prefix_block_tokens: int = 512  # tokens one prefix hash id stands for (Mooncake traces: 512)
    shared_prefix_tokens: Mapping[str, int] = field(default_factory=dict)  # tenant -> system prompt tokens
    preemption: Literal["recompute", "swap"] = "recompute"
    host_swap_blocks: int = 0  # blocks of host memory a swapped-out sequence may use
    pcie_bandwidth_bytes_per_s: float = 0.0  # prices swap traffic


class _InFlight:
    """The step, or run of identical decode steps, the replica is executing."""

    __slots__ = (
        "advances",
        "batch",
        "chunks",
        "cuttable",
        "duration_total_s",
        "extra_s",
        "first_context",
        "first_index",
        "num_preempted",
        "num_steps",
        "shape",
        "started_at_s",
    )

    def __init__(
        self,
        started_at_s: float,
        first_index: int,
        num_steps: int,
        batch: StepBatch,
        chunks: list[tuple[_Seat, int]],
        num_preempted: int,
        shape: DecodeStepShape | None,
        advances: bool,
    ) -> None:
        self.started_at_s = started_at_s
        self.first_index = first_index  # the decode index of the first step
        self.num_steps = num_steps
        self.batch = batch
        self.chunks = chunks  # (seat, prompt tokens it processes this step)
        self.num_preempted = num_preempted
        self.shape = shape  # set for pure-decode steps (closed-form duration)
        self.advances = advances  # whether the decode index advances (False: vllm prefill-only step)
        self.cuttable = False  # an admissible arrival may end the run early
        self.first_context = batch.decode_context_tokens
        self.duration_total_s = 0.0
        self.extra_s = 0.0  # swap transfers of this (single) step

    def duration_s(self, num_steps: int, cost_model: CostModel) -> float:
        """Duration of the first ``num_steps`` steps: closed form for decode runs, else the cost model."""
        extra_s = self.extra_s if num_steps > 0 else 0.0
        if self.shape is not None:
            return run_duration_s(self.shape, self.first_context, self.batch.num_decode_seqs, num_steps) + extra_s
        return cost_model.step_duration_s(self.batch) + extra_s if num_steps == 1 else 0.0


class Replica:
    """A model instance that batches requests iteration by iteration."""

    def __init__(
        self,
        env: simpy.Environment,
        spec: ReplicaSpec,
        cost_model: CostModel,
        log: RunLog,
        on_final: Callable[[Request], None],
        waiting: WaitingQueue | None = None,
    ) -> None:
        self.env = env
        self.spec = spec
        self.cost_model = cost_model
        self.log = log
        self.on_final = on_final
        self.pool = BlockPool(spec.num_kv_blocks)
        self.waiting: WaitingQueue = waiting if waiting is not None else FcfsQueue()
        self.deferred: deque[Request] = deque()  # predicted to miss their TTFT: served when nothing else waits
        self.seats: dict[int, _Seat] = {}  # admission order: the last is the preemption victim
        self.busy_s = 0.0
        self.num_preemptions = 0
        self._policy = spec.policy
        self._limits = spec.limits
        self._block_size = spec.limits.block_size_tokens
        self._growing = spec.limits.reservation == "grow"  # otherwise whole regions are reserved up front
        self.space = ContiguousSpace(spec.num_kv_blocks) if spec.allocator == "contiguous" else None
        self._filled_blocks = 0  # blocks the decoding sequences' tokens fill (= what they hold when paged)
        self._prefill_done_sum = 0  # prompt tokens already in the KV cache of sequences still prefilling
        self.prefix = PrefixCache() if spec.prefix_caching else None
        self.swapped: deque[tuple[Request, int, int]] = deque()  # (request, KV tokens, host blocks), oldest first
        self._host_used_blocks = 0
        self._swap_blocks_this_step = 0  # blocks copied over PCIe (out or in) by the step being planned
        self.num_swaps = 0
        self._decoder_cached_sum = 0  # cached prefix tokens of the decoding sequences
        self.prefix_lookup_tokens = 0  # prompt tokens of first admissions
        self.prefix_hit_tokens = 0  # ... of which the prefix cache held
        self._prefilling: dict[int, _Seat] = {}
        self._buckets: list[dict[int, _Seat]] = [{} for _ in range(self._block_size)]
        self._finish_heap: list[tuple[int, int, _Seat]] = []
        self._decode_index = 0
        self._num_decode = 0
        self._decode_kv_offset_sum = 0
        self._num_admitted = 0
        self._shapes: dict[int, DecodeStepShape] = {}
        self._prefill_s: dict[int, float] = {}
        self._in_flight: _InFlight | None = None
        self._grown_through = -1  # blocks are allocated for every decode step up to this index
        self._wakeup: simpy.Event | None = None
        self.process = env.process(self._run())

    # ------------------------------------------------------------------ views
    @property
    def num_outstanding(self) -> int:
        """Requests queued or holding a seat here."""
        return len(self.waiting) + len(self.deferred) + len(self.seats) + len(self.swapped)

    @property
    def kv_used_frac(self) -> float:
        """Fraction of this replica's KV blocks in use."""
        return self.pool.num_used_blocks / self.pool.num_total_blocks

    def _admission_free(self, hit_segments: list[Segment] | None = None) -> int:
        """Blocks a new request may take: the free ones above the watermark (contiguous: in one hole),
        plus cached prefix blocks nobody uses (evicted when needed), less those it would reuse itself."""
        free = self.pool.num_free_blocks - self.spec.watermark_blocks
        if self.prefix is not None:
            free += self.prefix.num_evictable_blocks - self.prefix.evictable_blocks_among(hit_segments or [])
        return min(free, self.space.largest_hole) if self.space is not None else free

    def _segments(self, request: Request) -> list[Segment]:
        """The prompt's cacheable segments, in order: its prefix hash ids, or its tenant's system prompt."""
        bs = self._block_size
        if request.prefix_hash_ids:
            seg_tokens = self.spec.prefix_block_tokens
            full = request.prompt_tokens // seg_tokens
            return [(("hash", h), seg_tokens // bs) for h in request.prefix_hash_ids[:full]]
        shared = min(self.spec.shared_prefix_tokens.get(request.tenant, 0), request.prompt_tokens) // bs
        return [(("system", request.tenant), shared)] if shared else []

    def _prefix_hit(self, request: Request) -> tuple[list[Segment], int]:
        """The cached leading segments a request would reuse and their tokens (one token is always left to prefill)."""
        if self.prefix is None:
            return [], 0
        segments = self._segments(request)
        hit = segments[: self.prefix.num_leading_hits(segments)]
        cached = sum(blocks for _, blocks in hit) * self._block_size
        while hit and cached > prefill_tokens_of(request) - 1:
            cached -= hit.pop()[1] * self._block_size
        return hit, cached

    # ------------------------------------------------------------------ arrivals
    def enqueue(self, request: Request) -> None:
        """Accept a routed request: queue it, or reject it now if it can never be served here."""
        request.replica = self.spec.index
        reason = rejection_reason(
            request,
            self._policy,
            self._limits,
            self.spec.num_kv_blocks,
            self.spec.max_model_len_tokens,
            self.spec.watermark_blocks,
        )
        if reason:
            self._reject(request, reason)
            return
        self.waiting.push(request)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()
        elif self._in_flight is not None and self._in_flight.cuttable and self.waiting.peek() is request:
            self._maybe_cut_run(request)

    def _reject(self, request: Request, reason: str) -> None:
        request.status = "rejected"
        request.reject_reason = reason
        self.on_final(request)

    def _maybe_cut_run(self, request: Request) -> None:
        """End the current decode run early if ``request`` (the new head of the queue) changes what it does.

        Within a run nothing frees seats, tokens or blocks, so a request that cannot be admitted at
        the next boundary cannot be admitted before the run ends either. Two things can still happen:
        it is admitted at the next boundary (cut there), or, with SLO-aware admission, it reaches its
        TTFT deadline and is shed or deferred, which changes the queue later arrivals find (cut at the
        first boundary past the deadline, where the scheduler looks again).
        """
        run = self._in_flight
        assert run is not None and run.shape is not None
        n = self._num_decode
        elapsed_s = self.env.now - run.started_at_s
        done = steps_done_by(run.shape, run.first_context, n, run.num_steps, elapsed_s)
        ends_now = done > 0 and run.duration_s(done, self.cost_model) == elapsed_s
        next_boundary = max(done if ends_now else done + 1, 1)
        if next_boundary >= run.num_steps:
            return
        if self._admitted_at(run, request, next_boundary):
            self._cut(run, next_boundary)
            run.cuttable = False  # it ends at the next boundary: nothing can come earlier
            return
        deadline_s = self._slo_deadline_s()
        if deadline_s is not None:
            past = steps_done_by(run.shape, run.first_context, n, run.num_steps, deadline_s - run.started_at_s) + 1
            if past < run.num_steps:
                self._cut(run, max(past, next_boundary))

    def _admitted_at(self, run: _InFlight, request: Request, num_steps: int) -> bool:
        """Whether ``request`` would be admitted at the boundary after ``num_steps`` steps of ``run``."""
        if self.swapped or self._policy == "static":  # static admits only into an idle replica
            return False
        tokens_left = token_budget(self._policy, self._limits, self._num_decode)
        hit, cached = self._prefix_hit(request)
        if not admits(request, self._policy, self._limits, len(self.seats), tokens_left, 1 << 62, True, cached):
            return False
        boundary_at_s = run.started_at_s + run.duration_s(num_steps, self.cost_model)
        # shed, or deferred behind other requests: the boundary admits nothing it would not have anyway;
        # deferred with nothing else waiting, it is the head there and may be admitted
        removed_at_boundary = self._sheds_or_defers(request, boundary_at_s)
        if removed_at_boundary and (self.spec.slo_admission == "shed" or len(self.waiting) > 1 or self.deferred):
            return False
        boundary = run.first_index + num_steps
        returned = self._growth(boundary, run.first_index + run.num_steps - 1) if self._growing else 0
        grows_at_boundary = self._growing and self._policy != "vllm"  # a vllm prefill step pauses the decodes
        free = self._admission_free(hit) + returned - (self._growth(boundary, boundary) if grows_at_boundary else 0)
        return blocks_to_admit(request, self._limits, cached) <= free

    def _cut(self, run: _InFlight, num_steps: int) -> None:
        """Shorten ``run`` to ``num_steps`` steps, giving back the blocks taken for the others."""
        boundary = run.first_index + num_steps
        unused_growth = self._growth(boundary, run.first_index + run.num_steps - 1)
        if self._growing:
            self.pool.free(unused_growth)
            self._grown_through = boundary - 1
        self._filled_blocks -= unused_growth
        run.num_steps = num_steps
        run.duration_total_s = run.duration_s(num_steps, self.cost_model)
        self.process.interrupt()

    # ------------------------------------------------------------------ the loop
    def _run(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while True:
            if env.peek() == env.now:
                yield env.timeout(0)  # let every event already due now (arrivals) run first
            if self.spec.batch_wait_s > 0 and not self.seats and self._wants_fuller_batch():
                yield env.any_of([self._arm_wakeup(), env.timeout(self._batch_deadline_s() - env.now)])
                self._wakeup = None
                continue
            self._apply_slo_admission()
            run = self._plan()
            if run is None:
                if len(self.waiting) or self.deferred or self.swapped:
                    raise ReplicaStalledError(
                        f"replica {self.spec.index} is idle with {self.num_outstanding} waiting requests "
                        "it cannot admit"
                    )
                yield self._arm_wakeup()
                self._wakeup = None
                continue
            run.duration_total_s = run.duration_s(run.num_steps, self.cost_model)
            self._in_flight = run
            delay_s = run.duration_total_s
            while True:
                try:
                    yield env.timeout(delay_s)
                    break
                except simpy.Interrupt:  # an arrival shortened the run (see _maybe_cut_run): wait for its new end
                    delay_s = run.started_at_s + run.duration_total_s - env.now
            self._in_flight = None
            self._end(run, run.num_steps, env.now)

    def _arm_wakeup(self) -> simpy.Event:
        self._wakeup = self.env.event()
        return self._wakeup

    # ------------------------------------------------------------------ static batching: wait for a fuller batch
    def _wants_fuller_batch(self) -> bool:
        return 0 < len(self.waiting) < self._limits.max_num_seqs and self.env.now < self._batch_deadline_s()

    def _batch_deadline_s(self) -> float:
        oldest_s: float = min(request.arrival_at_s for request in self.waiting)  # type: ignore[attr-defined]
        return oldest_s + self.spec.batch_wait_s

    # ------------------------------------------------------------------ SLO-aware admission
    def _prefill_estimate_s(self, request: Request) -> float:
        tokens = prefill_tokens_of(request)
        estimate = self._prefill_s.get(tokens)
        if estimate is None:
            batch = StepBatch(prefill_new_tokens=(tokens,), prefill_context_tokens=(0,))
            estimate = self._prefill_s[tokens] = self.cost_model.step_duration_s(batch)
        return estimate

    def _sheds_or_defers(self, request: Request, at_s: float) -> bool:
        if self.spec.slo_admission == "off" or request.num_emitted_tokens > 0:
            return False
        target = self.spec.ttft_targets_s.get(request.tenant)
        return target is not None and misses_ttft(request, at_s, self._prefill_estimate_s(request), target)

    def _apply_slo_admission(self) -> None:
        """Shed (or defer) waiting heads that would miss their TTFT target if admitted now."""
        now = self.env.now
        while len(self.waiting) and self._sheds_or_defers(self.waiting.peek(), now):
            request = self.waiting.pop()
            if self.spec.slo_admission == "shed":
                target = self.spec.ttft_targets_s[request.tenant]
                self._reject(request, f"shed: predicted TTFT above the {target:g} s target")
            else:
                self.deferred.append(request)

    def _slo_deadline_s(self) -> float | None:
        """When the waiting head would start missing its TTFT target (a run must stop there to re-check)."""
        if self.spec.slo_admission == "off" or not len(self.waiting):
            return None
        head = self.waiting.peek()
        target = self.spec.ttft_targets_s.get(head.tenant)
        if target is None or head.num_emitted_tokens > 0:
            return None
        return head.arrival_at_s + target - self._prefill_estimate_s(head)

    # ------------------------------------------------------------------ planning a step
    def _head(self) -> Request | None:
        if len(self.waiting):
            return self.waiting.peek()
        return self.deferred[0] if self.deferred else None

    def _pop_head(self) -> Request:
        return self.waiting.pop() if len(self.waiting) else self.deferred.popleft()

    def _admit(self, tokens_left: int, chunks: list[tuple[_Seat, int]]) -> int:
        """Admit heads while the policy lets them in; append their (first) chunks. Returns tokens left.

        Nothing new is admitted while swapped-out sequences wait to come back (vLLM's V0 policy).
        """
        if self.swapped:
            return tokens_left
        first = not chunks
        while (head := self._head()) is not None:
            hit, cached = self._prefix_hit(head)
            free = self._admission_free(hit)
            if not admits(head, self._policy, self._limits, len(self.seats), tokens_left, free, first, cached):
                break
            seat = self._seat(self._pop_head(), hit, cached)
            chunk = min(seat.prefill_tokens, tokens_left) if self._policy == "chunked_prefill" else seat.prefill_tokens
            chunks.append((seat, chunk))
            tokens_left -= chunk
            first = False
        return tokens_left

    def _plan(self) -> _InFlight | None:
        """Decide the next step (or run of decode steps); None when there is nothing to do."""
        d = self._decode_index
        n = self._num_decode
        chunks: list[tuple[_Seat, int]] = []
        num_preempted = 0
        decodes = n > 0
        if self._policy == "static":
            if not self.seats:
                self._admit(self._limits.max_num_batched_tokens, chunks)
            elif decodes:
                self._grow_blocks(d)  # counts the blocks the new tokens fill (reserved: nothing to allocate)
        elif self._policy == "vllm":
            self._admit(self._limits.max_num_batched_tokens, chunks)
            if not chunks:
                num_preempted = self._grow_blocks(d) if decodes else 0
                self._swap_in(d)
                decodes = self._num_decode > 0
            else:
                decodes = False
        else:
            num_preempted = self._grow_blocks(d)
            self._swap_in(d)
            n = self._num_decode
            decodes = n > 0
            tokens_left = self._limits.max_num_batched_tokens - n
            for seat in self._prefilling.values():  # chunked: continue started prompts first
                if tokens_left <= 0:
                    break
                chunk = min(seat.prefill_tokens - seat.done_tokens, tokens_left)
                chunks.append((seat, chunk))
                tokens_left -= chunk
            if tokens_left > 0:
                self._admit(tokens_left, chunks)
        n = self._num_decode if decodes else 0
        if not chunks and not n:
            return None
        batch = StepBatch(
            prefill_new_tokens=tuple(c for _, c in chunks),
            prefill_context_tokens=tuple(s.cached_tokens + s.done_tokens for s, _ in chunks),
            num_decode_seqs=n,
            decode_context_tokens=self._decode_kv_offset_sum + n * d if n else 0,
        )
        advances = decodes or self._policy != "vllm"
        swapped_blocks, self._swap_blocks_this_step = self._swap_blocks_this_step, 0
        if chunks:
            run = _InFlight(self.env.now, d, 1, batch, chunks, num_preempted, None, advances)
        else:
            run = self._plan_decode_run(d, batch, num_preempted, single=swapped_blocks > 0)
        if swapped_blocks:  # the copies over PCIe are part of this step
            block_bytes = self.spec.kv_bytes_per_token * self._block_size
            run.extra_s = swapped_blocks * block_bytes / self.spec.pcie_bandwidth_bytes_per_s
        return run

    def _plan_decode_run(self, d: int, batch: StepBatch, num_preempted: int, single: bool = False) -> _InFlight:
        n = batch.num_decode_seqs
        shape = self._shapes.get(n)
        if shape is None:
            shape = self._shapes[n] = self.cost_model.decode_step_shape(n)
        num_steps = 1
        if self.spec.fast_forward and not single:
            num_steps = self._finish_heap_min() - d + 1
            if self._growing:
                num_steps = 1 + self._affordable_steps(d + 1, num_steps - 1)
            deadline_s = self._slo_deadline_s()
            if deadline_s is not None and num_steps > 1:  # stop at the first boundary past the deadline
                elapsed_s = deadline_s - self.env.now
                until = (
                    steps_done_by(shape, batch.decode_context_tokens, n, num_steps, elapsed_s) + 1
                    if elapsed_s >= 0
                    else 1
                )
                num_steps = min(num_steps, until)
            growth = self._growth(d + 1, d + num_steps - 1)
            self._filled_blocks += growth
            if self._growing:
                self.pool.allocate(growth)
                self._grown_through = d + num_steps - 1
        run = _InFlight(self.env.now, d, num_steps, batch, [], num_preempted, shape, True)
        # an arrival may end a run early (static batching admits nothing mid-batch, but may shed or defer)
        run.cuttable = num_steps > 1
        return run

    def _finish_heap_min(self) -> int:
        heap = self._finish_heap
        while not heap[0][2].alive:
            heapq.heappop(heap)
        return heap[0][0]

    # ------------------------------------------------------------------ KV blocks
    def _growth(self, first_index: int, last_index: int) -> int:
        """Blocks the decoding sequences take over decode steps ``first..last`` (no one finishes between)."""
        num_steps = last_index - first_index + 1
        if num_steps <= 0:
            return 0
        bs = self._block_size
        full_cycles, rest = divmod(num_steps, bs)
        total = full_cycles * self._num_decode
        for s in range(first_index, first_index + rest):
            total += len(self._buckets[(1 - s) % bs])
        return total

    def _affordable_steps(self, first_index: int, max_steps: int) -> int:
        """How many decode steps from ``first_index`` (at most ``max_steps``) fit their growth in the free pool."""
        n = self._num_decode
        free = self.pool.num_free_blocks
        bs = self._block_size
        cycles = min(max_steps // bs, free // n) if n else max_steps // bs
        steps, free = cycles * bs, free - cycles * n
        while steps < max_steps:
            need = len(self._buckets[(1 - (first_index + steps)) % bs])
            if need > free:
                break
            free -= need
            steps += 1
        return steps

    def _grow_blocks(self, d: int) -> int:
        """Give a block to each decoding sequence crossing a block boundary at decode step ``d``; preempt if short."""
        self._grown_through = d
        bucket = self._buckets[(1 - d) % self._block_size]
        if not self._growing:  # the reserved regions already hold the new tokens
            self._filled_blocks += len(bucket)
            return 0
        if self.prefix is not None and len(bucket) > self.pool.num_free_blocks:
            self.pool.free(self.prefix.evict(len(bucket) - self.pool.num_free_blocks))
        if len(bucket) <= self.pool.num_free_blocks:
            self.pool.allocate(len(bucket))
            self._filled_blocks += len(bucket)
            return 0
        num_preempted = 0
        for seat in list(bucket.values()):  # admission order, as the step-by-step reference
            while seat.alive and self.pool.num_free_blocks == 0:
                self._preempt(next(reversed(self.seats.values())), d)
                num_preempted += 1
            if seat.alive:
                self.pool.allocate(1)
                self._filled_blocks += 1
        return num_preempted

    def _blocks_held(self, seat: _Seat, last_index: int) -> int:
        if not self._growing or not seat.decoding:
            return seat.reserved_blocks
        return blocks_for_tokens(seat.kv_offset + last_index, self._block_size) - seat.cached_tokens // self._block_size

    # ------------------------------------------------------------------ lifecycle
    def _seat(self, request: Request, hit: list[Segment] | None = None, cached: int = 0) -> _Seat:
        """Give an admitted request a seat and its KV blocks; its prompt is prefilled from the next step.

        With prefix caching it pins the ``hit`` segments (``cached`` tokens it will not recompute) and
        evicts unused cached segments if the free blocks alone do not cover its own.
        """
        num_blocks = blocks_to_admit(request, self._limits, cached)
        if self.prefix is not None:
            self.prefix.acquire(hit or [])
            if num_blocks > self.pool.num_free_blocks:
                self.pool.free(self.prefix.evict(num_blocks - self.pool.num_free_blocks))
            if request.num_emitted_tokens == 0 and request.first_scheduled_at_s != request.first_scheduled_at_s:
                self.prefix_lookup_tokens += request.prompt_tokens
                self.prefix_hit_tokens += cached
                request.num_cached_prompt_tokens = cached
        self.pool.allocate(num_blocks)
        region_start = -1
        if self.space is not None:
            placed = self.space.allocate(num_blocks)
            assert placed is not None, "admitted without a hole large enough"
            region_start = placed
        if request.first_scheduled_at_s != request.first_scheduled_at_s:  # NaN: first time
            request.first_scheduled_at_s = self.env.now
        seat = _Seat(request, self._num_admitted, prefill_tokens_of(request) - cached, num_blocks)
        seat.region_start = region_start
        seat.cached_tokens = cached
        if self.prefix is not None:
            seat.hit_segments = list(hit or [])
            seat.own_segments = self._segments(request)[len(seat.hit_segments) :]
        self._num_admitted += 1
        self.seats[request.request_id] = seat
        self._prefilling[request.request_id] = seat
        return seat

    def _start_decoding(self, seat: _Seat, d: int) -> None:
        """A seat whose prefill completed at decode index ``d`` (its first token) decodes from ``d + 1``."""
        request = seat.request
        emitted = request.num_emitted_tokens
        del self._prefilling[request.request_id]
        seat.decoding = True
        kv_tokens = seat.cached_tokens + seat.prefill_tokens
        seat.kv_offset = kv_tokens - d
        seat.emit_base = emitted + 1 - d
        seat.finish_index = d + request.output_tokens - emitted - 1
        heapq.heappush(self._finish_heap, (seat.finish_index, seat.order, seat))
        self._num_decode += 1
        self._decode_kv_offset_sum += seat.kv_offset
        self._prefill_done_sum -= seat.prefill_tokens
        self._decoder_cached_sum += seat.cached_tokens
        self._filled_blocks += blocks_for_tokens(kv_tokens, self._block_size) - seat.cached_tokens // self._block_size
        self._buckets[seat.kv_offset % self._block_size][request.request_id] = seat

    def _vacate(self, seat: _Seat, last_index: int) -> Request:
        """Free a seat and the blocks it held at decode index ``last_index``."""
        seat.alive = False
        request_id = seat.request.request_id
        del self.seats[request_id]
        held = self._blocks_held(seat, last_index)
        kept = 0
        if self.prefix is not None:  # its computed prompt segments stay cached; what it reused is unpinned
            computed = seat.cached_tokens + (seat.prefill_tokens if seat.decoding else seat.done_tokens)
            end = seat.cached_tokens
            for key, blocks in seat.own_segments:
                end += blocks * self._block_size
                if end > computed:
                    break
                if self.prefix.insert(key, blocks):
                    kept += blocks
            self.prefix.release(seat.hit_segments)
        self.pool.free(held - kept)
        if self.space is not None:
            self.space.free(seat.region_start, seat.reserved_blocks)
        if seat.decoding:
            self._num_decode -= 1
            self._decode_kv_offset_sum -= seat.kv_offset
            self._decoder_cached_sum -= seat.cached_tokens
            self._filled_blocks -= (
                blocks_for_tokens(seat.kv_offset + last_index, self._block_size)
                - seat.cached_tokens // self._block_size
            )
            del self._buckets[seat.kv_offset % self._block_size][request_id]
        else:
            self._prefill_done_sum -= seat.done_tokens
            del self._prefilling[request_id]
        return seat.request

    def _swap_in(self, d: int) -> None:
        """Bring swapped-out sequences back, oldest first, while seats and blocks allow; they decode at step ``d``."""
        while self.swapped and len(self.seats) < self._limits.max_num_seqs:
            request, kv_tokens, host_blocks = self.swapped[0]
            need = blocks_for_tokens(kv_tokens + 1, self._block_size)  # with room for this step's token
            free = self.pool.num_free_blocks - (self.spec.watermark_blocks if self.seats else 0)
            if need > free:
                break
            self.swapped.popleft()
            self._grown_through = d  # it comes back with its block for step d
            self._host_used_blocks -= host_blocks
            self._swap_blocks_this_step += host_blocks
            self.pool.allocate(need)
            emitted = request.num_emitted_tokens
            seat = _Seat(request, self._num_admitted, kv_tokens, need)
            self._num_admitted += 1
            self.seats[request.request_id] = seat
            seat.decoding = True
            seat.done_tokens = kv_tokens
            seat.kv_offset = kv_tokens + 1 - d
            seat.emit_base = emitted + 1 - d
            seat.finish_index = d + request.output_tokens - emitted - 1
            heapq.heappush(self._finish_heap, (seat.finish_index, seat.order, seat))
            self._num_decode += 1
            self._decode_kv_offset_sum += seat.kv_offset
            self._filled_blocks += need
            self._buckets[seat.kv_offset % self._block_size][request.request_id] = seat

    def _preempt(self, seat: _Seat, d: int) -> None:
        """Preempt before decode step ``d``: swap the sequence out if allowed and host memory has room,
        else recompute it (free the seat, requeue the request at the head)."""
        if self.spec.preemption == "swap" and seat.decoding and self.prefix is None:
            blocks = self._blocks_held(seat, d - 1)
            if self._host_used_blocks + blocks <= self.spec.host_swap_blocks:
                kv_tokens = seat.kv_offset + d - 1
                request = self._vacate(seat, d - 1)
                request.num_emitted_tokens = seat.emit_base + d - 1
                request.num_preemptions += 1
                self.num_preemptions += 1
                self.num_swaps += 1
                self._host_used_blocks += blocks
                self._swap_blocks_this_step += blocks
                self.swapped.append((request, kv_tokens, blocks))
                return
        request = self._vacate(seat, d - 1)
        if seat.decoding:
            request.num_emitted_tokens = seat.emit_base + d - 1
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.push_front(request)

    def _end(self, run: _InFlight, num_steps: int, now: float) -> None:
        """Account for ``num_steps`` steps of ``run`` completed at ``now``: emit tokens, log, retire the finished."""
        duration_s = now - run.started_at_s
        self.busy_s += duration_s
        # the decode index of the last step; a vllm prefill-only step sits just before the next decode step
        last_index = run.first_index + num_steps - 1 if run.advances else run.first_index - 1
        num_first_tokens = 0
        for seat, chunk in run.chunks:
            seat.done_tokens += chunk
            self._prefill_done_sum += chunk
            if seat.done_tokens == seat.prefill_tokens:
                num_first_tokens += 1
                if seat.request.num_emitted_tokens == 0:
                    seat.request.first_token_at_s = now
                self._start_decoding(seat, last_index)
        batch = run.batch
        self.log.steps.append(
            self.spec.index,
            run.started_at_s,
            duration_s,
            num_steps,
            batch.num_seqs,
            len(run.chunks),
            batch.num_prefill_tokens,
            batch.num_decode_seqs,
            batch.num_decode_seqs + num_first_tokens,
            self.pool.num_used_blocks,
            self.pool.num_total_blocks,
            run.num_preempted,
            len(self.waiting) + len(self.deferred),
        )
        self._record_memory(run.started_at_s, now, last_index)
        if run.advances:
            self._decode_index = run.first_index + num_steps
        heap = self._finish_heap
        while heap and heap[0][0] <= last_index:
            _, _, seat = heapq.heappop(heap)
            if seat.alive:
                self._finish(seat, last_index, now)

    def _record_memory(self, started_at_s: float, now: float, last_index: int) -> None:
        """One ledger row: where the KV capacity went during the step(s) just ended (before retiring).

        The categories add up to the capacity: tokens stored; internal fragmentation (unused slots of
        partly filled blocks); reserved but unused (blocks reserved beyond what is filled: contiguous
        or static reservations, and prompts still being prefilled); external fragmentation (free
        memory that cannot take the next waiting request because no hole is large enough); cached
        prefixes (none yet); free headroom.
        """
        bs = self._block_size
        stored = (
            self._decode_kv_offset_sum
            + self._num_decode * last_index
            - self._decoder_cached_sum
            + self._prefill_done_sum
        )
        filled = self._filled_blocks + sum(blocks_for_tokens(s.done_tokens, bs) for s in self._prefilling.values())
        cached = self.prefix.num_blocks if self.prefix is not None else 0
        total = self.pool.num_total_blocks
        used = self.pool.num_used_blocks - cached  # the sequences' own blocks
        free = (total - used - cached) * bs
        external = 0
        head = self._head()
        if self.space is not None and head is not None:
            need = blocks_to_admit(head, self._limits)
            if self.space.largest_hole < need <= self.space.num_free:
                external = free
        b = self.spec.kv_bytes_per_token
        self.log.memory.append(
            self.spec.index,
            started_at_s,
            now - started_at_s,
            total * bs * b,
            stored * b,
            (filled * bs - stored) * b,
            (used - filled) * bs * b,
            external * b,
            cached * bs * b,
            (free - external) * b,
        )

    def _finish(self, seat: _Seat, last_index: int, now: float) -> None:
        request = self._vacate(seat, last_index)
        request.num_emitted_tokens = request.output_tokens
        request.finished_at_s = now
        request.status = "completed"
        self.on_final(request)

    # ------------------------------------------------------------------ end of run
    def stop(self) -> list[Request]:
        """Close the books when the clock stops: log the completed part of any run, return what is unfinished.

        Steps of a run that ended strictly before the clock stopped are logged; the blocks taken for
        the steps that did not happen are returned to the pool.
        """
        run = self._in_flight
        self._in_flight = None
        if run is not None:
            done = 0
            if run.shape is not None:
                elapsed_s = self.env.now - run.started_at_s
                done = steps_done_by(run.shape, run.first_context, run.batch.num_decode_seqs, run.num_steps, elapsed_s)
                if done and run.duration_s(done, self.cost_model) >= elapsed_s:
                    done -= 1
            if run.shape is not None:  # growth for the run's first step came before it
                last_grown = run.first_index + max(done, 1) - 1
                unused = self._growth(last_grown + 1, run.first_index + run.num_steps - 1)
                self._filled_blocks -= unused
                if self._growing:
                    self.pool.free(unused)
                    self._grown_through = last_grown
            if done:
                self._end(run, done, run.started_at_s + run.duration_s(done, self.cost_model))
        done_index = self._decode_index - 1
        for seat in self.seats.values():
            if seat.decoding:
                seat.request.num_emitted_tokens = seat.emit_base + done_index
        swapped = [request for request, _, _ in self.swapped]
        return [*(s.request for s in self.seats.values()), *swapped, *self.waiting, *self.deferred]  # type: ignore[misc]

    def kv_blocks_of_running(self) -> int:
        """Blocks the seated sequences hold now (for the end-of-run conservation check)."""
        cached = self.prefix.num_blocks if self.prefix is not None else 0
        return cached + sum(self._blocks_held(seat, self._grown_through) for seat in self.seats.values())
