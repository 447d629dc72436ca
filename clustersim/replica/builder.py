"""The primitives a batching policy composes into one step, each applying its decisions at once (pure).

A :class:`Builder` lives for one plan. It reads and changes the replica's :class:`Core` (seats, KV
manager, queues) and collects what the step runs: prompt chunks, whether the running decodes take
part, how many sequences were preempted and how many KV blocks crossed PCIe.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from clustersim.cost.base import StepBatch
from clustersim.kvcache.prefix import Segment
from clustersim.kvcache.sequence import prefill_tokens_of
from clustersim.replica.seats import Seat
from clustersim.workload.request import AWAITING_PULL, LANDED, NO_REMOTE_KV, Request

if TYPE_CHECKING:  # the core builds builders; a builder only holds a reference to it
    from clustersim.replica.core import Core


def admits(
    request: Request,
    num_seats_free: int,
    tokens_left: int,
    blocks_needed: int,
    blocks_free: int,
    first_in_step: bool,
    chunked: bool,
    cached_tokens: int = 0,
) -> bool:
    """Whether ``request`` fits the next step: a seat, its KV blocks, and its prompt within the token budget.

    Chunked policies need only some budget left (the prompt is split). A request preempted earlier
    whose recompute alone exceeds the budget is admitted as the step's first prefill, so it can
    never be stuck.
    """
    if num_seats_free <= 0 or blocks_needed > blocks_free:
        return False
    if chunked:
        return tokens_left > 0
    if prefill_tokens_of(request) - cached_tokens <= tokens_left:
        return True
    return first_in_step and request.num_emitted_tokens > 0


class Builder:
    """One step under construction (implements :class:`clustersim.replica.batching.StepBuilder`)."""

    __slots__ = (
        "_core",
        "chunk_tokens",
        "chunks",
        "decode_index",
        "includes_decodes",
        "now_s",
        "num_preempted",
        "num_swapped_out",
        "per_chunk",
        "swap_blocks",
    )

    def __init__(self, core: Core) -> None:
        self._core = core
        self.per_chunk = core.policy.kv_per_chunk  # prompts take KV blocks chunk by chunk (vLLM V1)
        self.reset(0.0)

    def reset(self, now_s: float) -> None:
        """Start composing the step that begins at ``now_s``."""
        core = self._core
        self.now_s = now_s
        self.decode_index = core.seats.decode_index
        self.chunks: list[tuple[Seat, int]] = []
        self.chunk_tokens = 0
        self.includes_decodes = False
        self.num_preempted = 0
        self.num_swapped_out = 0
        self.swap_blocks = 0  # blocks copied over PCIe (out or in) by this step

    # ------------------------------------------------------------------ views
    @property
    def num_seats(self) -> int:
        return len(self._core.seats.seats)

    @property
    def num_prefills(self) -> int:
        return len(self.chunks)

    @property
    def num_waiting(self) -> int:
        return len(self._core.waiting)

    def _tokens_left(self) -> int:
        core = self._core
        used = self.chunk_tokens + core.seats.num_decode if self.includes_decodes else self.chunk_tokens
        return core.limits.step_tokens - used

    # ------------------------------------------------------------------ primitives
    def decode(self) -> None:
        """Include the running decodes; grow their KV blocks for this step, preempting the newest if short."""
        core, d = self._core, self.decode_index
        self.includes_decodes = True
        if core.reservation is not None and core.kv.growing:
            self._retract(d)
        short = core.kv.grow(d)
        if len(short) > 1:  # admission order, as each would take its block in turn: a preempted
            short.sort(key=attrgetter("order"))  # sequence (the newest) never took its block yet
        for seq in short:
            # a preempted sequence's computed blocks may go to the prefix cache, not the free pool:
            # they count, as unused cached blocks do (evicted when the block is taken)
            while seq.alive and core.kv.growth_free() == 0:
                self._preempt_newest(d)
            if seq.alive:
                core.kv.grow_one()

    def _retract(self, d: int) -> None:
        """SGLang, before a decode step its pool cannot hold: retract the newest requests until each
        remaining one has room for ``retract_steps`` more tokens, then raise the reserve
        (``Scheduler.update_running_batch``: ``check_decode_mem``, ``ScheduleBatch.retract_decode``)."""
        core = self._core
        kv, seats, reservation = core.kv, core.seats, core.reservation
        assert reservation is not None
        if kv.growth(d, d) <= kv.growth_free():
            return
        room, bs = reservation.rule.retract_steps, kv.block_size_tokens
        while seats.num_decode > 1 and (
            kv.growth_free() * bs < room * seats.num_decode or kv.growth(d, d) > kv.growth_free()
        ):
            self._preempt_newest(d)
        reservation.retracted(seats, d)

    def _preempt_newest(self, d: int) -> None:
        copied = self._core.preempt(self._core.seats.newest(), d)
        self.swap_blocks += copied
        self.num_swapped_out += copied > 0
        self.num_preempted += 1

    def swap_in(self) -> None:
        """Bring swapped-out sequences back, oldest first, while seats and blocks allow."""
        core = self._core
        if core.mid_multi_step(self.decode_index):  # only when the scheduler runs
            return
        while core.swapped and len(core.seats.seats) < core.limits.max_num_seqs:
            request, kv_tokens, host_blocks = core.swapped[0]
            need = core.kv.swap_in_blocks(kv_tokens, request.decode_share, self.decode_index)
            free = core.kv.pool.num_free_blocks - (core.kv.spec.watermark_blocks if core.seats.seats else 0)
            if need > free:
                break
            core.swapped.popleft()
            self.swap_blocks += host_blocks
            seat = core.seats.add_decoding(request, kv_tokens, self.decode_index)
            core.gaps.joined(seat, request.last_token_at_s, self.decode_index)
            core.kv.swap_in(seat, need, host_blocks, self.decode_index)

    def continue_prefills(self) -> None:
        """Give started prompts their next chunks, in admission order, within the token budget.

        With per-chunk KV allocation each chunk first takes its blocks; when they run short the
        newest prefilling sequence is preempted (recomputed later), and if that is the sequence
        itself no later chunk is scheduled (vLLM V1 ``Scheduler.schedule``: ``running.pop()``, then
        ``break``). Decoding sequences are never preempted here: their tokens of this step are
        already placed.
        """
        prefilling = self._core.seats.prefilling
        if not prefilling:
            return
        tokens_left = self._tokens_left()
        cap = self._chunk_cap()
        for seat in list(prefilling.values()) if self.per_chunk else prefilling.values():
            if tokens_left <= 0:
                break
            if not seat.alive:
                continue
            chunk = min(seat.prefill_tokens - seat.done_tokens, tokens_left, cap)
            if self.per_chunk and not self._blocks_for_chunk(seat, chunk):
                break
            self.chunks.append((seat, chunk))
            self.chunk_tokens += chunk
            tokens_left -= chunk

    def _chunk_cap(self) -> int:
        """The most tokens one prompt gets in this step: ``long_prefill_token_threshold`` if set (vLLM
        ``Scheduler.schedule``: ``num_new_tokens = threshold`` when a request has more left)."""
        limits = self._core.limits
        return limits.long_prefill_token_threshold or limits.max_num_batched_tokens

    def _blocks_for_chunk(self, seat: Seat, chunk: int) -> bool:
        """Take the blocks ``seat``'s next chunk needs, preempting newer prefilling sequences while
        they are short; False if ``seat`` itself had to go."""
        core = self._core
        kv = core.kv
        need = kv.prefill_blocks(seat.cached_tokens, seat.done_tokens + chunk) - seat.reserved_blocks
        while need > kv.growth_free():
            victim = core.seats.newest()
            if victim.decoding:  # nothing newer is prefilling: wait for blocks to free up
                return False
            core.preempt(victim, self.decode_index)
            self.num_preempted += 1
            if victim is seat:
                return False
        if need > 0:
            kv.extend_prefill(seat, need)
        return True

    def admission_closed(self) -> bool:
        """No waiting head can be admitted: every seat is taken, or swapped sequences wait and the head
        is not a request whose KV cache has landed here. Neither changes during a run of decode steps
        but the head, which ends the run when it changes (:meth:`Core._head_changed` asks again)."""
        core = self._core
        if len(core.seats.seats) >= core.limits.max_num_seqs:
            return True
        return bool(core.swapped) and not _landed(core.head())

    def admit(self, chunked: bool, max_admitted: int | None = None) -> int:
        """Admit waiting heads in order while they fit (at most ``max_admitted``). While swapped sequences
        wait only requests whose KV cache has landed here are seated: they hold their blocks already, so
        seating them takes none from the swapped ones, and the swapped ones may need exactly those blocks
        (a decode replica that waited for them would wait for ever)."""
        core = self._core
        if self.admission_closed() or (head := core.head()) is None or core.mid_multi_step(self.decode_index):
            return 0
        tokens_left = self._tokens_left()
        if tokens_left <= 0:
            return 0
        num_admitted = 0
        max_seqs, kv, seats = core.limits.max_num_seqs, core.kv, core.seats.seats
        caching = kv.prefix is not None
        hit: list[Segment] = []
        cached = 0
        per_chunk = self.per_chunk
        cap = self._chunk_cap()  # at least the budget left unless a chunking policy sets the threshold
        reservation, d = core.reservation, self.decode_index
        running = reservation.running_tokens(core.seats, d) if reservation is not None else 0
        charged = 0  # what the requests admitted in this step may make (their prompts hold blocks already)
        while head is not None and num_admitted != max_admitted:
            if core.swapped and not _landed(head):
                break
            if head.remote_kv != NO_REMOTE_KV:  # disaggregation: its prompt was computed on a prefill replica
                chunk = self._admit_remote(head, len(seats) < max_seqs, tokens_left)
                if chunk < 0:
                    break
                tokens_left -= chunk
                num_admitted += chunk  # a pull takes no seat and computes nothing this step
                head = core.head()
                continue
            if caching:
                hit, cached = kv.prefix_hit(head)
            if per_chunk:  # blocks for the first chunk only
                chunk = min(prefill_tokens_of(head) - cached, tokens_left, cap)
                needed = kv.prefill_blocks(cached, chunk)
            else:
                needed = kv.blocks_to_admit(head, cached)
            first = not self.chunks
            free = kv.admission_free(hit)
            if not admits(head, max_seqs - len(seats), tokens_left, needed, free, first, chunked, cached):
                break
            if reservation is not None and seats:  # an idle replica admits what its pool holds (SGLang clamps
                # max_new_tokens to the pool, so a request alone always fits)
                need = reservation.need(prefill_tokens_of(head) - cached, head.output_tokens)
                if not reservation.fits(need, free * kv.block_size_tokens, running, d, charged):
                    break
            seat = core.seat(core.pop_head(), hit, cached, self.now_s, needed if per_chunk else -1)
            chunk = min(seat.prefill_tokens, tokens_left, cap) if chunked else seat.prefill_tokens
            if reservation is not None and chunk == seat.prefill_tokens:  # a cut prompt is charged its chunk only
                charged += min(head.output_tokens, reservation.clip)
            self.chunks.append((seat, chunk))
            self.chunk_tokens += chunk
            tokens_left -= chunk
            num_admitted += 1
            head = core.head()
        return num_admitted

    def _admit_remote(self, head: Request, seat_free: bool, tokens_left: int) -> int:
        """Admit a waiting head whose prompt a prefill replica computed: pull its KV cache once the
        blocks for it are free (vLLM V1 ``WAITING_FOR_REMOTE_KVS``; DistServe's decode instances
        fetch when they have memory), or seat it once the KV cache has landed, its last prompt token
        computed this step. Returns the tokens it computes this step, or -1 if it does not fit."""
        core = self._core
        kv = core.kv
        if not seat_free:
            return -1
        if head.remote_kv == AWAITING_PULL:
            tokens = prefill_tokens_of(head)
            needed = kv.prefill_blocks(0, tokens) if self.per_chunk else kv.blocks_to_admit(head)
            if needed > kv.admission_free():
                return -1
            core.remote.take_for_pull(core.pop_head(), needed, self.now_s)
            return 0
        if tokens_left <= 0:
            return -1
        seat = core.remote.seat_landed(core.pop_head(), self.now_s)
        self.chunks.append((seat, 1))
        self.chunk_tokens += 1
        return 1

    # ------------------------------------------------------------------ the result
    def batch(self) -> StepBatch | None:
        """The step's shape for the cost model, or None if it runs nothing."""
        seats = self._core.seats
        n = seats.num_decode if self.includes_decodes else 0
        chunks = self.chunks
        if not n:
            context = 0
        elif seats.lanes:
            context = seats.decode_context_tokens(self.decode_index)
        else:
            context = seats.kv_offset_sum + n * self.decode_index
        if not chunks:
            return StepBatch((), (), n, context) if n else None
        return StepBatch(
            tuple([c for _, c in chunks]), tuple([s.cached_tokens + s.done_tokens for s, _ in chunks]), n, context
        )


def _landed(request: Request | None) -> bool:
    """Whether ``request`` waits with its KV cache landed here (disaggregation), its blocks held."""
    return request is not None and request.remote_kv == LANDED
