"""One GPU replica's iteration-level scheduler, as a SimPy process.

Each iteration: grow running sequences that cross a KV block boundary (preempting the most
recently admitted when no block is free), admit waiting requests (the policy decides), price
the step, ``yield`` its duration, then emit tokens and retire finished requests.

Work is per event, never per token per sequence. A running sequence's token count and context
length are affine in the replica's step index ``k``, so the loop keeps only aggregates: the
number of decoding sequences, the sum of their context offsets, and the sequences bucketed by
context offset modulo the block size (the bucket ``(1 - k) mod block_size`` is exactly the set
that needs a new block at step ``k``). Finishes come from a heap keyed by step index.

Fast forward: a pure-decode iteration is followed by identical ones until the next finish, the
step where the KV pool would run out, or an arrival that could be admitted; such a run is one
event whose duration is the closed-form sum of its steps (:mod:`clustersim.cost.runs`), and one
``steps.parquet`` row with ``num_steps`` > 1. Token times equal the step-by-step mode's.

Same-instant ordering (documented contract): when a step ends at time t, tokens are emitted and
finished requests retire at t first; then every other event already due at t (arrivals) runs;
then the next iteration admits. So a request arriving exactly at a step boundary is admitted at
that boundary.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import simpy

from clustersim.architecture import blocks_for_tokens
from clustersim.cost.base import CostModel, DecodeStepShape, StepBatch
from clustersim.cost.runs import run_duration_s, steps_done_by
from clustersim.eventlog import RunLog
from clustersim.kvcache.paged import BlockPool
from clustersim.replica.policies import Admission, BatchingPolicy, BatchLimits, rejection_reason, select_admissions
from clustersim.workload.request import Request


class ReplicaStalledError(RuntimeError):
    """The replica has waiting requests but can admit none while idle: a bug, reported loudly."""


class _Running:
    """A sequence in the running batch; its counters are affine in the replica step index ``k``.

    KV tokens needed at step k: ``kv_offset + k``; tokens emitted after step k: ``emit_base + k``.
    """

    __slots__ = ("alive", "emit_base", "finish_step", "kv_offset", "order", "request", "reserved_blocks")

    def __init__(
        self, request: Request, order: int, kv_offset: int, emit_base: int, finish_step: int, reserved_blocks: int
    ) -> None:
        self.request = request
        self.order = order
        self.kv_offset = kv_offset
        self.emit_base = emit_base
        self.finish_step = finish_step
        self.reserved_blocks = reserved_blocks
        self.alive = True


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """Everything fixed about one replica."""

    index: int
    policy: BatchingPolicy
    limits: BatchLimits
    num_kv_blocks: int
    max_model_len_tokens: int
    fast_forward: bool = True


class _InFlight:
    """The step, or run of identical decode steps, the replica is executing."""

    __slots__ = (
        "batch",
        "cuttable",
        "duration_total_s",
        "first_context",
        "first_step",
        "num_preempted",
        "num_steps",
        "prefills",
        "shape",
        "started_at_s",
    )

    def __init__(
        self,
        started_at_s: float,
        first_step: int,
        num_steps: int,
        batch: StepBatch,
        prefills: list[_Running],
        num_preempted: int,
        shape: DecodeStepShape | None,
        cuttable: bool,
    ) -> None:
        self.started_at_s = started_at_s
        self.first_step = first_step
        self.num_steps = num_steps
        self.batch = batch
        self.prefills = prefills
        self.num_preempted = num_preempted
        self.shape = shape  # set for runs of several decode steps (closed-form duration)
        self.cuttable = cuttable  # an admissible arrival may end the run early (continuous batching)
        self.first_context = batch.decode_context_tokens
        self.duration_total_s = 0.0

    def duration_s(self, num_steps: int, cost_model: CostModel) -> float:
        """Duration of the first ``num_steps`` steps: closed form for decode runs, else the cost model."""
        if self.shape is not None:
            return run_duration_s(self.shape, self.first_context, self.batch.num_decode_seqs, num_steps)
        return cost_model.step_duration_s(self.batch) if num_steps == 1 else 0.0


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
        self._block_size = spec.limits.block_size_tokens
        self._growing = spec.policy == "continuous"  # static reserves whole sequences up front
        self._buckets: list[dict[int, _Running]] = [{} for _ in range(self._block_size)]
        self._finish_heap: list[tuple[int, int, _Running]] = []
        self._num_decode = 0
        self._decode_kv_offset_sum = 0
        self._num_admitted = 0
        self._shapes: dict[int, DecodeStepShape] = {}
        self._in_flight: _InFlight | None = None
        self._grown_through = -1  # blocks are allocated for every step up to this one
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
        was_empty = not self.waiting
        self.waiting.append(request)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()
        elif was_empty and self._in_flight is not None and self._in_flight.cuttable:
            self._maybe_cut_run(request)

    def _maybe_cut_run(self, request: Request) -> None:
        """End the current decode run at the next step boundary if ``request`` could be admitted there.

        Within a run nothing frees seats, tokens or blocks, so if the request cannot be admitted at
        the next boundary it cannot be admitted before the run ends either: no cut is needed.
        """
        run = self._in_flight
        assert run is not None and run.shape is not None
        limits = self.spec.limits
        n = self._num_decode
        if len(self.running) >= limits.max_num_seqs or n + request.prompt_tokens > limits.max_num_batched_tokens:
            return
        elapsed_s = self.env.now - run.started_at_s
        done = steps_done_by(run.shape, run.first_context, n, run.num_steps, elapsed_s)
        ends_now = done > 0 and run.duration_s(done, self.cost_model) == elapsed_s
        new_num_steps = max(done if ends_now else done + 1, 1)
        if new_num_steps >= run.num_steps:
            return
        boundary = run.first_step + new_num_steps
        unused_growth = self._growth(boundary, run.first_step + run.num_steps - 1)
        free_at_boundary = self.pool.num_free_blocks + unused_growth - self._growth(boundary, boundary)
        if blocks_for_tokens(request.prompt_tokens, self._block_size) > free_at_boundary:
            return
        self.pool.free(unused_growth)
        self._grown_through = boundary - 1
        run.num_steps = new_num_steps
        run.duration_total_s = run.duration_s(new_num_steps, self.cost_model)
        run.cuttable = False  # it now ends at the next boundary anyway
        self.process.interrupt()

    @property
    def num_outstanding(self) -> int:
        """Requests queued or running here."""
        return len(self.waiting) + len(self.running)

    # ------------------------------------------------------------------ the loop
    def _run(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        while True:
            if env.peek() == env.now:
                yield env.timeout(0)  # let every event already due now (arrivals) run first
            k = self.step_index
            num_preempted = self._grow_blocks(k)
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
            run = self._plan(k, admissions, num_preempted)
            run.duration_total_s = run.duration_s(run.num_steps, self.cost_model)
            self._in_flight = run
            try:
                yield env.timeout(run.duration_total_s)
            except simpy.Interrupt:  # an arrival shortened the run (see _maybe_cut_run)
                yield env.timeout(run.started_at_s + run.duration_total_s - env.now)
            self._in_flight = None
            self._end(run, run.num_steps, env.now)

    def _plan(self, k: int, admissions: list[Admission], num_preempted: int) -> _InFlight:
        """Start the admitted prefills and decide how many identical steps to run from step ``k``."""
        prefills = [self._start(admission, k) for admission in admissions]
        n = self._num_decode
        batch = StepBatch(
            prefill_new_tokens=tuple(a.prefill_tokens for a in admissions),
            prefill_context_tokens=(0,) * len(admissions),
            num_decode_seqs=n,
            decode_context_tokens=self._decode_kv_offset_sum + n * k,
        )
        num_steps, shape = 1, None
        if not prefills and self.spec.fast_forward:
            num_steps = self._finish_heap_min() - k + 1
            if self._growing:
                num_steps = 1 + self._affordable_steps(k + 1, num_steps - 1)
                self.pool.allocate(self._growth(k + 1, k + num_steps - 1))
                self._grown_through = k + num_steps - 1
            shape = self._shapes.get(n)
            if shape is None:
                shape = self._shapes[n] = self.cost_model.decode_step_shape(n)
        # static batching admits nothing mid-batch, so only continuous runs can be cut short
        cuttable = num_steps > 1 and self._growing
        return _InFlight(self.env.now, k, num_steps, batch, prefills, num_preempted, shape, cuttable)

    def _finish_heap_min(self) -> int:
        heap = self._finish_heap
        while not heap[0][2].alive:
            heapq.heappop(heap)
        return heap[0][0]

    # ------------------------------------------------------------------ KV blocks
    def _growth(self, first_step: int, last_step: int) -> int:
        """Blocks the decoding sequences take over steps ``first_step..last_step`` (no one finishes between)."""
        num_steps = last_step - first_step + 1
        if num_steps <= 0 or not self._growing:
            return 0
        bs = self._block_size
        full_cycles, rest = divmod(num_steps, bs)
        total = full_cycles * self._num_decode
        for s in range(first_step, first_step + rest):
            total += len(self._buckets[(1 - s) % bs])
        return total

    def _affordable_steps(self, first_step: int, max_steps: int) -> int:
        """How many steps from ``first_step`` (at most ``max_steps``) fit their block growth in the free pool."""
        n = self._num_decode
        free = self.pool.num_free_blocks
        bs = self._block_size
        cycles = min(max_steps // bs, free // n) if n else max_steps // bs
        steps, free = cycles * bs, free - cycles * n
        while steps < max_steps:
            need = len(self._buckets[(1 - (first_step + steps)) % bs])
            if need > free:
                break
            free -= need
            steps += 1
        return steps

    def _grow_blocks(self, k: int) -> int:
        """Give a block to every sequence crossing a block boundary at step ``k``; preempt if none is free."""
        if not self._growing:
            return 0
        self._grown_through = k
        bucket = self._buckets[(1 - k) % self._block_size]
        if len(bucket) <= self.pool.num_free_blocks:
            self.pool.allocate(len(bucket))
            return 0
        num_preempted = 0
        for entry in list(bucket.values()):  # admission order, as the step-by-step reference
            while entry.alive and self.pool.num_free_blocks == 0:
                self._preempt(next(reversed(self.running.values())), k)
                num_preempted += 1
            if entry.alive:
                self.pool.allocate(1)
        return num_preempted

    def _blocks_held(self, entry: _Running, last_step: int) -> int:
        if not self._growing:
            return entry.reserved_blocks
        return blocks_for_tokens(entry.kv_offset + last_step, self._block_size)

    # ------------------------------------------------------------------ lifecycle
    def _start(self, admission: Admission, k: int) -> _Running:
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
            reserved_blocks=admission.num_blocks,
        )
        self._num_admitted += 1
        self.running[request.request_id] = entry
        heapq.heappush(self._finish_heap, (entry.finish_step, entry.order, entry))
        return entry

    def _join_decode(self, entry: _Running) -> None:
        self._num_decode += 1
        self._decode_kv_offset_sum += entry.kv_offset
        if self._growing:
            self._buckets[entry.kv_offset % self._block_size][entry.request.request_id] = entry

    def _remove(self, entry: _Running, last_step: int) -> Request:
        """Take a decoding sequence out of the batch and free the blocks it held at ``last_step``."""
        entry.alive = False
        request_id = entry.request.request_id
        del self.running[request_id]
        self.pool.free(self._blocks_held(entry, last_step))
        self._num_decode -= 1
        self._decode_kv_offset_sum -= entry.kv_offset
        if self._growing:
            del self._buckets[entry.kv_offset % self._block_size][request_id]
        return entry.request

    def _preempt(self, entry: _Running, k: int) -> None:
        """Recompute preemption at step ``k``: free the sequence's blocks and requeue it at the head."""
        request = self._remove(entry, k - 1)
        request.num_emitted_tokens = entry.emit_base + k - 1
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def _end(self, run: _InFlight, num_steps: int, now: float) -> None:
        """Account for ``num_steps`` steps of ``run`` completed at ``now``: emit tokens, log, retire the finished."""
        duration_s = now - run.started_at_s
        self.busy_s += duration_s
        for entry in run.prefills:  # they decode from the next step on
            self._join_decode(entry)
            if entry.request.num_emitted_tokens == 0:
                entry.request.first_token_at_s = now
        batch = run.batch
        self.log.steps.append(
            self.spec.index,
            run.started_at_s,
            duration_s,
            num_steps,
            batch.num_seqs,
            len(run.prefills),
            batch.num_prefill_tokens,
            batch.num_decode_seqs,
            self.pool.num_used_blocks,
            self.pool.num_total_blocks,
            run.num_preempted,
            len(self.waiting),
        )
        last_step = run.first_step + num_steps - 1
        self.step_index = last_step + 1
        heap = self._finish_heap
        while heap and heap[0][0] <= last_step:
            _, _, entry = heapq.heappop(heap)
            if entry.alive:
                self._finish(entry, last_step, now)

    def _finish(self, entry: _Running, last_step: int, now: float) -> None:
        request = self._remove(entry, last_step)
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
            last_grown = run.first_step + max(done, 1) - 1  # growth for the run's first step came before it
            if self._growing:
                self.pool.free(self._growth(last_grown + 1, run.first_step + run.num_steps - 1))
                self._grown_through = last_grown
            if done:
                self._end(run, done, run.started_at_s + run.duration_s(done, self.cost_model))
        done_steps = self.step_index - 1
        for entry in self.running.values():
            entry.request.num_emitted_tokens = entry.emit_base + done_steps
        return [*(e.request for e in self.running.values()), *self.waiting]

    def kv_blocks_of_running(self) -> int:
        """Blocks the running sequences hold now (for the end-of-run conservation check)."""
        return sum(self._blocks_held(entry, self._grown_through) for entry in self.running.values())
