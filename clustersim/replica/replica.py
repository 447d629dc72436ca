"""One GPU replica's iteration-level scheduler, as a SimPy process.

Each iteration: grow running sequences that cross a KV block boundary (preempting the most
recently admitted when no block is free), admit waiting requests (the policy decides),
price the step, ``yield`` its duration, then emit tokens and retire finished requests.

Work is per event, never per token per sequence: a running sequence's token count and
context length are affine in the replica's step index, so the loop keeps only aggregates
(number of decoding sequences, sum of their context offsets) and two heaps keyed by step
index: when each sequence finishes, and when it next needs a KV block.

Same-instant ordering (documented contract): when a step ends at time t, tokens are emitted
and finished requests retire at t first; then every other event already due at t (arrivals)
runs; then the next iteration admits. So a request arriving exactly at a step boundary is
admitted at that boundary.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import simpy

from clustersim.cost.base import CostModel, StepBatch
from clustersim.eventlog import RunLog
from clustersim.kvcache.paged import BlockPool
from clustersim.replica.policies import (
    Admission,
    BatchingPolicy,
    BatchLimits,
    rejection_reason,
    select_admissions,
)
from clustersim.workload.request import Request


class ReplicaStalledError(RuntimeError):
    """The replica has waiting requests but can admit none while idle: a bug, reported loudly."""


class _Running:
    """A sequence in the running batch; its counters are affine in the replica step index ``k``.

    KV tokens needed at step k: ``kv_offset + k``; tokens emitted after step k: ``emit_base + k``.
    """

    __slots__ = ("alive", "emit_base", "finish_step", "kv_offset", "num_blocks", "order", "request")

    def __init__(self, request: Request, order: int, kv_offset: int, emit_base: int, finish_step: int, num_blocks: int):
        self.request = request
        self.order = order
        self.kv_offset = kv_offset
        self.emit_base = emit_base
        self.finish_step = finish_step
        self.num_blocks = num_blocks
        self.alive = True


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """Everything fixed about one replica."""

    index: int
    policy: BatchingPolicy
    limits: BatchLimits
    num_kv_blocks: int
    max_model_len_tokens: int


class Replica:
    """A model instance that batches requests iteration by iteration."""

    def __init__(
        self,
        env: simpy.Environment,
        spec: ReplicaSpec,
        cost_model: CostModel,
        log: RunLog,
        on_final: Callable[[Request], None],
    ) -> None:
        self.env = env
        self.spec = spec
        self.cost_model = cost_model
        self.log = log
        self.on_final = on_final
        self.pool = BlockPool(spec.num_kv_blocks)
        self.waiting: deque[Request] = deque()
        self.running: dict[int, _Running] = {}  # insertion order = admission order
        self.step_index = 0
        self.busy_s = 0.0
        self.num_preemptions = 0
        self._finish_heap: list[tuple[int, int, _Running]] = []
        self._block_heap: list[tuple[int, int, _Running]] = []
        self._num_decode = 0
        self._decode_kv_offset_sum = 0
        self._num_admitted = 0
        self._wakeup: simpy.Event | None = None
        self.process = env.process(self._run())

    # ------------------------------------------------------------------ arrivals
    def enqueue(self, request: Request) -> None:
        """Accept a routed request: queue it, or reject it now if it can never be served here."""
        request.replica = self.spec.index
        reason = rejection_reason(
            request, self.spec.policy, self.spec.limits, self.spec.num_kv_blocks, self.spec.max_model_len_tokens
        )
        if reason:
            request.status = "rejected"
            request.reject_reason = reason
            self.on_final(request)
            return
        self.waiting.append(request)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    @property
    def num_outstanding(self) -> int:
        """Requests queued or running here."""
        return len(self.waiting) + len(self.running)

    # ------------------------------------------------------------------ the loop
    def _run(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        block_size = self.spec.limits.block_size_tokens
        while True:
            if env.peek() == env.now:
                yield env.timeout(0)  # let every event already due now (arrivals) run first
            k = self.step_index
            num_preempted = self._grow_blocks(k, block_size)
            admissions = select_admissions(
                self.waiting,
                self.spec.policy,
                self.spec.limits,
                len(self.running),
                self._num_decode,
                self.pool.num_free_blocks,
            )
            if not admissions and not self.running:
                if self.waiting:
                    raise ReplicaStalledError(
                        f"replica {self.spec.index} is idle with {len(self.waiting)} waiting requests it cannot admit"
                    )
                self._wakeup = env.event()
                yield self._wakeup
                self._wakeup = None
                continue
            prefills = [self._start(admission, k, block_size) for admission in admissions]
            num_decode = self._num_decode
            batch = StepBatch(
                prefill_new_tokens=tuple(a.prefill_tokens for a in admissions),
                prefill_context_tokens=(0,) * len(admissions),
                num_decode_seqs=num_decode,
                decode_context_tokens=self._decode_kv_offset_sum + num_decode * k,
            )
            started_at_s = env.now
            duration_s = self.cost_model.step_duration_s(batch)
            yield env.timeout(duration_s)
            self.busy_s += duration_s
            self._end_step(k, started_at_s, duration_s, batch, prefills, num_preempted)

    def _start(self, admission: Admission, k: int, block_size: int) -> _Running:
        """Move an admitted request from waiting to running; it prefills in step ``k``."""
        request = self.waiting.popleft()
        assert request is admission.request
        self.pool.allocate(admission.num_blocks)
        if request.first_scheduled_at_s != request.first_scheduled_at_s:  # NaN: first time
            request.first_scheduled_at_s = self.env.now
        emitted = request.num_emitted_tokens
        entry = _Running(
            request,
            order=self._num_admitted,
            kv_offset=admission.prefill_tokens - k,
            emit_base=emitted + 1 - k,
            finish_step=k + request.output_tokens - emitted - 1,
            num_blocks=admission.num_blocks,
        )
        self._num_admitted += 1
        self.running[request.request_id] = entry
        heapq.heappush(self._finish_heap, (entry.finish_step, entry.order, entry))
        if self.spec.policy == "continuous":
            self._push_block_boundary(entry, block_size)
        return entry

    def _push_block_boundary(self, entry: _Running, block_size: int) -> None:
        """Schedule the step at which ``entry`` outgrows its blocks, if it runs that long."""
        boundary = entry.num_blocks * block_size - entry.kv_offset + 1
        if boundary <= entry.finish_step:
            heapq.heappush(self._block_heap, (boundary, entry.order, entry))

    def _grow_blocks(self, k: int, block_size: int) -> int:
        """Give a block to every sequence crossing a block boundary at step ``k``; preempt if none is free."""
        num_preempted = 0
        heap = self._block_heap
        while heap and heap[0][0] <= k:
            _, _, entry = heapq.heappop(heap)
            while entry.alive and self.pool.num_free_blocks == 0:
                self._preempt(next(reversed(self.running.values())), k)
                num_preempted += 1
            if not entry.alive:
                continue
            self.pool.allocate(1)
            entry.num_blocks += 1
            self._push_block_boundary(entry, block_size)
        return num_preempted

    def _preempt(self, entry: _Running, k: int) -> None:
        """Recompute preemption: free the sequence's blocks and put it back at the head of the queue."""
        request = self._remove(entry)
        request.num_emitted_tokens = entry.emit_base + k - 1
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def _end_step(
        self,
        k: int,
        started_at_s: float,
        duration_s: float,
        batch: StepBatch,
        prefills: list[_Running],
        num_preempted: int,
    ) -> None:
        now = self.env.now
        for entry in prefills:  # they decode from step k + 1 on
            self._num_decode += 1
            self._decode_kv_offset_sum += entry.kv_offset
            if entry.request.num_emitted_tokens == 0:
                entry.request.first_token_at_s = now
        self.log.steps.append(
            self.spec.index,
            started_at_s,
            duration_s,
            1,
            batch.num_seqs,
            len(prefills),
            batch.num_prefill_tokens,
            batch.num_decode_seqs,
            self.pool.num_used_blocks,
            self.pool.num_total_blocks,
            num_preempted,
            len(self.waiting),
        )
        self.step_index = k + 1
        heap = self._finish_heap
        while heap and heap[0][0] <= k:
            _, _, entry = heapq.heappop(heap)
            if entry.alive:
                self._finish(entry, now)

    def _remove(self, entry: _Running) -> Request:
        """Take a decoding sequence out of the batch and free its blocks (its heap entries go stale)."""
        entry.alive = False
        del self.running[entry.request.request_id]
        self.pool.free(entry.num_blocks)
        self._num_decode -= 1
        self._decode_kv_offset_sum -= entry.kv_offset
        return entry.request

    def _finish(self, entry: _Running, now: float) -> None:
        request = self._remove(entry)
        request.num_emitted_tokens = request.output_tokens
        request.finished_at_s = now
        request.status = "completed"
        self.on_final(request)

    # ------------------------------------------------------------------ end of run
    def unfinished(self) -> list[Request]:
        """Requests still here when the run stops, with the tokens they had emitted by then."""
        done_steps = self.step_index - 1
        for entry in self.running.values():
            entry.request.num_emitted_tokens = entry.emit_base + done_steps
        return [*(e.request for e in self.running.values()), *self.waiting]
