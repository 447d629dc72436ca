"""One replica's iteration-level scheduler state and decisions (pure: the SimPy shell calls it).

Each plan: SLO admission sheds or defers waiting heads that can no longer meet their target, the
batching policy composes the step from the :class:`~clustersim.replica.builder.Builder`'s
primitives, and the step is priced. Each end: prompt chunks advance, tokens are emitted, the step
and its KV ledger row are logged, and finished sequences retire.

Fast forward: a plan that only grew the running decodes repeats unchanged at later boundaries (see
:mod:`clustersim.replica.batching.base`), so such a step is extended into a run of identical decode
steps, up to the next finish, the step where the KV pool would run short, or the first boundary
where SLO admission acts on the waiting head. A request that becomes the waiting head during a run
ends it at the next boundary, where the plan looks again, unless admission is closed (every seat
taken, or swapped sequences waiting) and no SLO rule is set; nothing else ends it. The run's blocks
are taken lazily (what a router sees is what the step-by-step mode would hold at that instant) and
its ledger row integrates its steps exactly. Every time is computed from the decode anchor in both
modes, so ``simulation.fast_forward`` never changes a result.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from clustersim.cost.base import CostModel, DecodeStepShape, StepBatch
from clustersim.cost.runs import run_duration_s
from clustersim.eventlog import RunLog
from clustersim.kvcache.manager import KVManager
from clustersim.kvcache.prefix import Segment
from clustersim.kvcache.sequence import prefill_tokens_of
from clustersim.replica.accounting import NOT_RELEASED, memory_record, released_blocks
from clustersim.replica.admission import SloAdmission
from clustersim.replica.batching import BatchingPolicy, StepLimits
from clustersim.replica.builder import Builder
from clustersim.replica.gaps import GapTracker
from clustersim.replica.queues import WaitingQueue
from clustersim.replica.remote import RemoteKV
from clustersim.replica.reservation import Reservation
from clustersim.replica.seats import Seat, SeatSet
from clustersim.replica.step import DecodeAnchor, Step
from clustersim.workload.request import NO_REMOTE_KV, Request

Passed = Callable[[float], bool]  # whether an event at this time (and a given priority) has been processed


class ReplicaStalledError(RuntimeError):
    """The replica has waiting requests but can admit none while idle: a bug, reported loudly."""


@dataclass(frozen=True)
class ReplicaSpec:
    """Everything fixed about one replica besides its KV cache."""

    index: int
    limits: StepLimits
    max_model_len_tokens: int
    fast_forward: bool = True
    pcie_bandwidth_bytes_per_s: float = 0.0  # prices swap traffic
    role: str = "both"  # both | prefill | decode (disaggregation: config.disagg)


class Core:
    """The replica's state and the rules that change it, one step at a time."""

    def __init__(
        self,
        spec: ReplicaSpec,
        policy: BatchingPolicy,
        kv: KVManager,
        slo: SloAdmission,
        cost_model: CostModel,
        log: RunLog,
        on_final: Callable[[Request], None],
        waiting: WaitingQueue,
        on_first_token: Callable[[Request], None] | None = None,
    ) -> None:
        self.spec = spec
        self.limits = spec.limits
        self.policy = policy
        self.kv = kv
        self.slo = slo
        self.cost_model = cost_model
        self.log = log
        self.on_final = on_final
        self.on_first_token = on_first_token  # hears of each request's first token (its API server)
        self.waiting = waiting
        self.deferred: deque[Request] = deque()  # predicted to miss their TTFT: served when nothing else waits
        self.swapped: deque[tuple[Request, int, int]] = deque()  # (request, KV tokens, host blocks), oldest first
        self.seats = SeatSet()
        rule = spec.limits.decode_reserve
        self.reservation = Reservation(rule) if rule is not None else None
        if rule is not None:
            self.seats.long_output_tokens = rule.clip_tokens
        self.in_flight: Step | None = None
        self.anchor: DecodeAnchor | None = None
        self.multi_step_start: int | None = None  # decode index where the multi-step run in progress began
        self.num_preemptions = 0
        self.num_swaps = 0
        self._shapes: dict[int, DecodeStepShape] = {}
        self._may_hold = policy.holds
        self._builder = Builder(self)
        self.gaps = GapTracker(log.gaps, self.seats)
        # disaggregation (clustersim.disagg): a prefill replica hands each finished prompt on and keeps
        # its blocks until the decode replica has them; a decode replica pulls a prompt's KV cache
        self.prefill_only = spec.role == "prefill"
        self.remote = RemoteKV(self)

    # ------------------------------------------------------------------ queues
    @property
    def num_waiting(self) -> int:
        """Requests queued here, not holding a seat (waiting, deferred, swapped out, pulling their KV)."""
        return len(self.waiting) + len(self.deferred) + len(self.swapped) + self.remote.num_pulling

    @property
    def num_outstanding(self) -> int:
        """Requests queued or holding a seat here."""
        return self.num_waiting + len(self.seats.seats)

    def head(self) -> Request | None:
        """The request admission considers next."""
        if len(self.waiting):
            return self.waiting.peek()
        return self.deferred[0] if self.deferred else None

    def pop_head(self) -> Request:
        return self.waiting.pop() if len(self.waiting) else self.deferred.popleft()

    def rejection_reason(self, request: Request) -> str:
        """Why ``request`` can never be served by this replica, or an empty string if it can."""
        total_tokens = request.prompt_tokens + request.output_tokens
        max_len = self.spec.max_model_len_tokens
        if total_tokens > max_len:
            return f"prompt + output = {total_tokens} tokens exceeds the model's max length {max_len}"
        budget = self.limits.max_num_batched_tokens
        remote = request.remote_kv != NO_REMOTE_KV  # its prompt was computed elsewhere: one token here
        if not self.policy.chunks_prompts and request.prompt_tokens > budget and not remote:
            return (
                f"prompt of {request.prompt_tokens} tokens exceeds max_num_batched_tokens {budget} "
                "(chunked_prefill would split it)"
            )
        return self.kv.rejection_reason(request)

    def enqueue(
        self, request: Request, now_s: float, ended: Passed, planned: Passed, front: bool = False
    ) -> Literal["rejected", "queued", "cut"]:
        """Accept a routed request (at the head of the queue if ``front``), or reject it now; ``cut``:
        it is queued and the run in flight must end at an earlier boundary."""
        request.replica = self.spec.index
        reason = self.rejection_reason(request)
        if reason:
            self.reject(request, reason)
            return "rejected"
        push = self.waiting.push_front if front else self.waiting.push
        step = self.in_flight
        if step is None or step.num_steps == 1:
            push(request)
            return "queued"
        old_head = self.head()
        push(request)
        if self.head() is not old_head and self._head_changed(step, old_head, now_s, ended, planned):
            return "cut"
        return "queued"

    def withdraw(self, request: Request, now_s: float, ended: Passed, planned: Passed) -> bool:
        """Take a waiting ``request`` out of the queue; True: the run in flight must end at an earlier
        boundary (the waiting head changed)."""
        old_head = self.head()
        self.waiting.remove(request)
        step = self.in_flight
        if step is None or step.num_steps == 1 or self.head() is old_head:
            return False
        return self._head_changed(step, old_head, now_s, ended, planned)

    def _head_changed(self, step: Step, old_head: Request | None, now_s: float, ended: Passed, planned: Passed) -> bool:
        """A new waiting head during a run: the next plan that has not happened yet must see it."""
        num_ended = step.count_ended(now_s, ended)
        if step.external_changed_at_step < 0:  # the steps ended so far saw the old head
            step.external_changed_at_step = num_ended
            step.external_before_tokens = self.kv.external_frag_tokens(old_head)
        if self._builder.admission_closed() and not self.slo.active:
            return False  # the plans at the run's boundaries admit no head, whichever it is
        boundary = num_ended + 1
        if num_ended and step.end_of(num_ended) == now_s and not planned(now_s):
            boundary = num_ended  # the plan at this very boundary is still to come
        boundary += self._to_multi_step_boundary(step.first_index + boundary)  # the scheduler's next call
        if boundary >= step.num_steps:
            return False
        step.set_length(boundary)
        return True

    def cancel_pull(self, request: Request, now_s: float, ended: Passed) -> None:
        """A pull under way will not land: its blocks come free now; the steps of the run in flight that
        ended before held them (their ledger rows, :func:`~clustersim.replica.accounting.released_blocks`)."""
        blocks = request.remote_kv_blocks
        self.remote.cancel_pull(request)
        step = self.in_flight
        if step is None or step.num_steps == 1 or not blocks:
            return
        num_ended = step.count_ended(now_s, ended)
        if num_ended:
            step.released_in_flight = [*(step.released_in_flight or ()), (num_ended, blocks)]

    def reject(self, request: Request, reason: str) -> None:
        request.status = "rejected"
        request.reject_reason = reason
        self.on_final(request)

    # ------------------------------------------------------------------ planning
    def hold_until_s(self, now_s: float) -> float | None:
        """Until when an idle replica holds off planning (static batch wait); None: plan now."""
        if self.seats.seats or not self._may_hold:
            return None
        return self.policy.hold_until_s(now_s, 0, self.waiting)

    def _plan_again(self, now_s: float) -> StepBatch | None:
        """The scheduler's next call at the same instant, after a call that only preempted (vLLM V1 admits
        nothing in a step that preempted; its engine loop schedules again at once, where an idle replica
        here would wait for an event that may never come). The preemptions count in the step it plans."""
        builder = self._builder
        preempted, swapped_out, swap_blocks = builder.num_preempted, builder.num_swapped_out, builder.swap_blocks
        builder.reset(now_s)
        self.policy.plan(builder)
        builder.num_preempted += preempted
        builder.num_swapped_out += swapped_out
        builder.swap_blocks += swap_blocks
        return builder.batch()

    def plan(self, now_s: float) -> Step | None:
        """Decide the next step (or run of decode steps); None when there is nothing to do."""
        at_boundary = not self.mid_multi_step(self.seats.decode_index)  # else the scheduler does not run
        if self.slo.active and at_boundary:
            waiting_head = self._waiting_head
            for request in self.slo.apply(waiting_head, self.waiting.pop, now_s):
                if self.slo.mode == "shed":
                    self.reject(request, self.slo.shed_reason(request))
                else:
                    self.deferred.append(request)
        builder = self._builder
        builder.reset(now_s)
        if self.reservation is not None and not self.seats.seats:
            self.reservation.idle(self.seats.decode_index)
        self.policy.plan(builder)
        batch = builder.batch()
        if batch is None and builder.num_preempted:
            batch = self._plan_again(now_s)
        if batch is None:
            if (len(self.waiting) or self.deferred or self.swapped) and not self.remote.waited_on:
                raise ReplicaStalledError(
                    f"replica {self.spec.index} is idle with {self.num_outstanding} waiting requests it cannot admit"
                )
            return None
        d = builder.decode_index
        if self.limits.num_scheduler_steps > 1:
            # a prompt step ends a multi-step run; a decode plan at a boundary starts one
            if builder.chunks:
                self.multi_step_start = None
            elif at_boundary:
                self.multi_step_start = d
        advances = builder.includes_decodes or self.seats.num_decode == 0
        step = Step(now_s, d, batch, builder.chunks, builder.num_preempted, advances)  # takes the chunk list
        step.num_swapped_out = builder.num_swapped_out
        n = batch.num_decode_seqs
        if builder.chunks or builder.swap_blocks:  # priced as one iteration, PCIe copies included
            self.anchor = None
            if builder.chunks:
                duration_s = self.cost_model.step_duration_s(batch)
            else:
                duration_s = run_duration_s(self._shape(n), batch.decode_context_tokens, n, 1)
            extra_s = 0.0
            if builder.swap_blocks:
                block_bytes = self.kv.spec.bytes_per_token * self.kv.block_size_tokens
                extra_s = builder.swap_blocks * block_bytes / self.spec.pcie_bandwidth_bytes_per_s
            step.ends_at_s = now_s + (duration_s + extra_s)
            return step
        shape = self._shape(n)
        anchor = self.anchor
        if anchor is None or not anchor.continues(d, n, batch.decode_context_tokens, shape):
            anchor = self.anchor = DecodeAnchor(now_s, d, batch.decode_context_tokens, n, shape)
        step.anchor = anchor
        step.set_length(1 if builder.num_preempted else self._run_length(step))
        return step

    def decode_tokens_per_s(self, num_seqs: int, context_tokens: float) -> float:
        """The tokens a second that ``num_seqs`` sequences attending to ``context_tokens`` in all
        would decode here, at most ``max_num_seqs`` of them at once (the rest waiting): a modelled rate
        for whoever must guess one before any request has completed (the API server's streaming)."""
        running = min(num_seqs, self.limits.max_num_seqs)
        if running <= 0:
            return 0.0
        return running / self._shape(running).duration_s(context_tokens * running / num_seqs)

    def mid_multi_step(self, decode_index: int) -> bool:
        """Whether decode step ``decode_index`` falls inside a multi-step run begun before it, not at one
        of its boundaries (``num_scheduler_steps`` apart): there the scheduler does not run, and the step
        only decodes what runs (:mod:`clustersim.replica.batching.vllm_v0`)."""
        start, n = self.multi_step_start, self.limits.num_scheduler_steps
        return start is not None and n > 1 and self.seats.num_decode > 0 and (decode_index - start) % n != 0

    def _to_multi_step_boundary(self, decode_index: int) -> int:
        """Steps from ``decode_index`` to the next boundary of the multi-step run in progress (0: at one)."""
        start, n = self.multi_step_start, self.limits.num_scheduler_steps
        if start is None or n <= 1:
            return 0
        return -(decode_index - start) % n

    def _waiting_head(self) -> Request | None:
        return self.waiting.peek() if len(self.waiting) else None

    def _shape(self, num_seqs: int) -> DecodeStepShape:
        shape = self._shapes.get(num_seqs)
        if shape is None:
            shape = self._shapes[num_seqs] = self.cost_model.decode_step_shape(num_seqs)
        return shape

    def _run_length(self, step: Step) -> int:
        """How many identical decode steps follow from ``step``'s plan with nothing else happening."""
        if not self.spec.fast_forward or self.seats.lanes:  # shares below full: context grows unevenly
            return 1
        d = step.first_index
        num_steps = self.seats.next_finish_index() - d + 1
        multi = self.limits.num_scheduler_steps
        if multi > 1 and (len(self.waiting) or self.deferred or self.swapped):
            # the next plan that may admit or swap in is at the multi-step run's next boundary
            num_steps = min(num_steps, self._to_multi_step_boundary(d) or multi)
        if self.kv.growing:
            num_steps = 1 + self.kv.affordable_steps(d + 1, num_steps - 1)
        head = self._waiting_head()
        if num_steps > 1 and head is not None and self.reservation is not None:
            num_steps = self._reserve_cut(d, num_steps, head)
        if num_steps > 1 and head is not None and self.slo.active and self.slo.acts_on(head, step.end_of(num_steps)):
            low, high = 1, num_steps  # the first boundary at which the plan would act on the head
            while low < high:
                mid = (low + high) // 2
                if self.slo.acts_on(head, step.end_of(mid)):
                    high = mid
                else:
                    low = mid + 1
            num_steps = low
        return num_steps

    def _reserve_cut(self, d: int, num_steps: int, head: Request) -> int:
        """The run from decode step ``d`` ends before the first of its later plans whose reserve would
        admit the waiting ``head`` (the ratio decays and the running requests' tokens left shrink
        while the free blocks only fall): cutting at a plan that then admits nothing is harmless."""
        reservation, kv, seats = self.reservation, self.kv, self.seats
        assert reservation is not None
        if self._builder.admission_closed():
            return num_steps
        hit, cached = kv.prefix_hit(head) if kv.prefix is not None else ([], 0)
        need = reservation.need(prefill_tokens_of(head) - cached, head.output_tokens)
        bs = kv.block_size_tokens
        free_now = kv.admission_free(hit)
        if need >= free_now * bs:  # never: the free blocks only fall during the run
            return num_steps
        later = num_steps - 1  # the plans of steps d + 1 .. d + num_steps - 1
        growth = kv.growth_counts(d + 1, later - 1) if kv.growing and later > 1 else []
        taken = np.zeros(later, dtype=np.int64)
        if growth:
            taken[1:] = np.cumsum(growth)
        free_tokens = (free_now - taken) * bs
        steps = np.arange(1, later + 1)
        running = reservation.running_tokens(seats, d) - seats.num_decode * steps
        for seat in seats.long_seats.values():  # their clip at step d (tokens left: emitted after d - 1)
            left = seat.request.output_tokens - seats.emitted_at(seat, d - 1)
            running += max(0, left - reservation.clip) - np.maximum(0, left - steps - reservation.clip)
        first = reservation.first_fit(need, free_tokens, running, d + 1)
        return num_steps if first < 0 else first + 1

    # ------------------------------------------------------------------ ending steps
    def end(self, step: Step, num_steps: int, now_s: float) -> None:
        """Account for the first ``num_steps`` steps of ``step``, which ended at ``now_s``."""
        first = step.first_index
        num_decode_tokens = step.batch.num_decode_seqs  # each gains a token (unless its share skips the step)
        if num_decode_tokens and self.seats.lanes:
            num_decode_tokens -= self.seats.num_silent(first)
        grown = self.kv.grow_through(first + 1, first + num_steps - 1) if num_steps > 1 else 0
        # the decode index of the last step; a step that pauses the decodes sits just before the next one
        last_index = first + num_steps - 1 if step.advances else first - 1
        if step.advances:
            self.gaps.advanced(step, num_steps, now_s)
        num_first_tokens = 0
        publishing = self.kv.prefix is not None
        for seat, chunk in step.chunks:
            done = self.seats.advance_prefill(seat, chunk)
            if publishing and (tokens := self.kv.publish(seat, seat.cached_tokens + seat.done_tokens)):
                self.seats.cached_more(seat, tokens)
            if done:
                if self.prefill_only:
                    self.remote.hand_off(seat, now_s)
                    continue
                num_first_tokens += 1
                request = seat.request
                if request.num_emitted_tokens == 0:
                    request.first_token_at_s = now_s
                    if self.on_first_token is not None:
                        self.on_first_token(request)
                else:  # recomputed after a preemption: the gap since its last token ends here
                    self.gaps.resumed(request, now_s)
                self.start_decoding(seat, last_index)
                self.gaps.joined(seat, now_s, last_index + 1)
        if num_first_tokens and self.kv.grown_through < last_index:  # their blocks cover step last_index
            self.kv.grown_through = last_index
        batch, pool = step.batch, self.kv.pool
        # pulls cancelled during a run held blocks at its earlier steps' ends that its last no longer holds
        released = released_blocks(self, step, num_steps, now_s) if step.released_in_flight else NOT_RELEASED
        self.log.steps.append(
            (  # a StepRecord's fields, as a plain tuple (its constructor costs more than the row)
                self.spec.index,  # replica
                step.started_at_s,
                now_s - step.started_at_s,  # duration_s
                num_steps,
                batch.num_seqs,
                len(step.chunks),  # num_prefill_seqs
                batch.num_prefill_tokens,
                num_decode_tokens,
                num_decode_tokens + num_first_tokens,  # num_emitted_tokens
                pool.num_used_blocks,  # kv_used_blocks
                pool.num_used_blocks + round(released[1]),  # kv_peak_used_blocks
                pool.num_total_blocks,  # kv_total_blocks
                step.num_preempted,  # num_preemptions
                len(self.waiting) + len(self.deferred),  # num_waiting
                step.num_swapped_out,  # num_swaps
            )
        )
        self.log.memory.append(memory_record(self, step, num_steps, now_s, last_index, grown, released))
        if step.advances:
            self.seats.decode_index = first + num_steps
        if step.anchor is not None:
            step.anchor.last_index = first + num_steps - 1
        for seat in self.seats.pop_finished(last_index):
            self.finish(seat, last_index, now_s)

    # ------------------------------------------------------------------ sequence lifecycle
    def seat(self, request: Request, hit: list[Segment], cached: int, now_s: float, num_blocks: int = -1) -> Seat:
        """Give an admitted request a seat and its KV blocks (``num_blocks``, or its whole reservation
        when negative); its prompt is prefilled from this step."""
        first = request.first_scheduled_at_s != request.first_scheduled_at_s  # NaN: never scheduled
        seat = self.seats.add(request, prefill_tokens_of(request) - cached, cached)
        first_admission = first and request.num_emitted_tokens == 0
        self.kv.admit(seat, hit, first_admission, num_blocks)
        if first_admission and self.kv.prefix is not None:
            request.num_cached_prompt_tokens = cached
        if first:
            request.first_scheduled_at_s = now_s
        return seat

    def start_decoding(self, seat: Seat, d: int) -> None:
        self.seats.start_decoding(seat, d)
        self.kv.start_decoding(seat, seat.cached_tokens + seat.prefill_tokens)

    def vacate(self, seat: Seat, last_index: int, preempted: bool = False) -> Request:
        """Free a seat and the blocks it held after decode step ``last_index`` (a ``preempted`` one's
        computed blocks stay in the prefix cache, if there is one)."""
        # a decoding seat has computed its KV tokens (prompt and output so far); a prefilling one its chunks
        computed = self.seats.kv_tokens_at(seat, last_index) if seat.decoding else seat.cached_tokens + seat.done_tokens
        self.kv.vacate(seat, last_index, computed, preempted)
        self.seats.remove(seat)
        return seat.request

    def preempt(self, seat: Seat, d: int) -> int:
        """Preempt before decode step ``d``: swap the sequence out if host memory has room (returns the
        blocks copied), else recompute it later (free the seat, requeue the request at the head)."""
        blocks = self.kv.swap_out_blocks(seat, d - 1)
        kv_tokens = self.seats.kv_tokens_at(seat, d - 1)
        decoding = seat.decoding
        if decoding:
            self.gaps.left(seat, d)
        request = self.vacate(seat, d - 1, preempted=not blocks)
        if decoding:
            request.num_emitted_tokens = self.seats.emitted_at(seat, d - 1)
        request.num_preemptions += 1
        self.num_preemptions += 1
        if blocks:
            self.num_swaps += 1
            self.kv.swap_out(blocks)
            self.swapped.append((request, kv_tokens, blocks))
            return blocks
        reason = self.kv.readmission_reason(request)
        if reason:
            self.reject(request, reason)
        else:
            self.waiting.push_front(request)
        return 0

    def finish(self, seat: Seat, last_index: int, now_s: float) -> None:
        self.gaps.left(seat, last_index + 1)
        request = self.vacate(seat, last_index)
        request.num_emitted_tokens = request.output_tokens
        request.finished_at_s = now_s
        request.status = "completed"
        self.on_final(request)

    # ------------------------------------------------------------------ views and the end of the run
    def kv_used_blocks(self, now_s: float, planned: Passed) -> int:
        """Blocks in use now, as the step-by-step mode would hold them (a run's growth is taken lazily)."""
        used = self.kv.pool.num_used_blocks
        step = self.in_flight
        if step is not None and step.num_steps > 1 and self.kv.growing:
            started = min(step.count_ended(now_s, planned), step.num_steps - 1) + 1
            used += self.kv.growth(step.first_index + 1, step.first_index + started - 1)
        return used

    def stop(self, now_s: float, ended: Passed, planned: Passed) -> list[Request]:
        """Close the books when the clock stops: log the steps of the run in flight that ended before
        it, keep the blocks of the step in progress, and return every unfinished request."""
        step = self.in_flight
        if step is not None:
            started = min(step.count_ended(now_s, planned), step.num_steps - 1) + 1
            done = self._end_ended(now_s, ended)
            first = step.first_index
            self.kv.grow_through(first + max(done, 1), first + started - 1)
        return self._held()

    def fail(self, now_s: float, ended: Passed) -> list[Request]:
        """The replica fails at ``now_s``: log the steps of the run in flight that ended before, lose
        the one in progress, and return every request held (the core is not used again)."""
        self._end_ended(now_s, ended)
        return self._held()

    def _end_ended(self, now_s: float, ended: Passed) -> int:
        """End the run in flight: account for its steps that ended by ``now_s``; returns how many."""
        step, self.in_flight = self.in_flight, None
        if step is None:
            return 0
        done = step.count_ended(now_s, ended)
        if done:
            self.end(step, done, step.end_of(done))
        return done

    def _held(self) -> list[Request]:
        """Every unfinished request, seated (their tokens so far counted) first, then swapped, waiting, deferred."""
        done_index = self.seats.decode_index - 1
        for seat in self.seats.seats.values():
            if seat.decoding:
                seat.request.num_emitted_tokens = self.seats.emitted_at(seat, done_index)
                self.gaps.left(seat, done_index + 1)
        swapped = [request for request, _, _ in self.swapped]
        return [*(s.request for s in self.seats.seats.values()), *swapped, *self.waiting, *self.deferred]

    def kv_blocks_of_running(self) -> int:
        """Blocks the seated sequences and the prefix cache hold (for the end-of-run conservation check)."""
        kv = self.kv
        held = sum(kv.held_blocks(seat, kv.grown_through) for seat in self.seats.seats.values())
        return kv.num_cached_blocks + held + self.remote.in_flight_blocks
