"""The sequences holding a seat on a replica, kept as aggregates (pure, no simpy).

Decoding sequences advance together, one token per *decode step*; the replica counts decode steps
with its decode index ``D`` (a ``vllm`` prefill-only step pauses the decodes and does not advance
it). A decoding sequence's KV tokens and emitted tokens are affine in ``D``, so the set keeps only
sums: the number of decoding sequences and the sum of their context offsets, which give the
step's total decode context in O(1). Finishes come from a heap keyed by decode index.

A sequence with less than the full share of the decode steps (speculative decoding with requests of
different acceptance rates: :mod:`clustersim.acceptance`) gains a token only at the steps where
``share_tokens(D, share)`` grows; its counters are affine in that count instead, and the sums and
finish heap of each such share are kept apart in a :class:`ShareLane`.
"""

from __future__ import annotations

import heapq

from clustersim.kvcache.sequence import KVSequence
from clustersim.shares import FULL_SHARE, share_tokens
from clustersim.workload.request import GapKey, Request


class Seat(KVSequence):
    """A sequence holding a seat: prefilling (``done_tokens < prefill_tokens``) or decoding.

    Decoding counters are affine in the decode index D: KV tokens after decode step D are
    ``kv_offset + D``; tokens emitted after decode step D are ``emit_base + D``; it finishes at
    decode step ``finish_index``. Below the full share, D is replaced by the share's token count
    ``share_tokens(D, share)`` in all three. The KV fields (:class:`KVSequence`) are the KV manager's.
    """

    __slots__ = (
        "done_tokens",
        "emit_base",
        "finish_index",
        "join_gap_s",
        "join_index",
        "joined_at_s",
        "order",
        "prefill_tokens",
    )

    request: Request

    def __init__(self, request: Request, order: int, prefill_tokens: int, cached_tokens: int = 0) -> None:
        super().__init__(request, cached_tokens)
        self.share = request.decode_share
        self.order = order
        self.prefill_tokens = prefill_tokens  # tokens it computes before its next token (cached ones excluded)
        self.done_tokens = 0
        self.emit_base = 0
        self.finish_index = 0
        # inter-token gaps (replica/gaps.py): its first decode step, when its previous token came, that first gap
        self.join_index = 0
        self.joined_at_s = 0.0
        self.join_gap_s = float("-inf")


class ShareLane:
    """The decoding seats of one share below the full one: their count, offsets and finishes
    (``finish_index`` counted in the share's tokens), and how many per gap key."""

    __slots__ = ("by_key", "finish_heap", "finish_index_sum", "kv_offset_sum", "num_decode", "share")

    def __init__(self, share: int) -> None:
        self.share = share
        self.num_decode = 0
        self.kv_offset_sum = 0
        self.finish_index_sum = 0
        self.finish_heap: list[tuple[int, int, Seat]] = []
        self.by_key: dict[GapKey, int] = {}


class SeatSet:
    """Seats in admission order, with the decode aggregates the step and the fast path need.

    Invariants: ``num_decode`` counts the decoding seats; ``kv_offset_sum``, the finish heap and
    ``decode_by_key`` are over those of the full share, ``lanes`` hold the others (one lane per share
    that has any); ``prefill_done_sum`` is the computed prompt tokens of the prefilling ones;
    ``decode_index`` is the index of the next decode step. ``finish_index_sum`` (and each lane's) sums
    the decoding seats' finish indices, so the tokens they have left to make at a step are one
    subtraction away; ``long_seats`` holds the decoding seats whose output exceeds ``long_output_tokens``
    (set by a replica that clips what it reserves for one request: :mod:`clustersim.replica.reservation`).
    """

    def __init__(self) -> None:
        self.seats: dict[int, Seat] = {}  # admission order: the last is the preemption victim
        self.prefilling: dict[int, Seat] = {}
        self._finish_heap: list[tuple[int, int, Seat]] = []
        self.decode_index = 0
        self.num_decode = 0
        self.kv_offset_sum = 0
        self.finish_index_sum = 0
        self.long_output_tokens: int | None = None
        self.long_seats: dict[int, Seat] = {}
        self.prefill_done_sum = 0
        self.decoder_cached_sum = 0  # cached prefix tokens of the decoding seats
        # decoding seats per (tenant, measured): inter-token gaps are counted per tenant, measured ones apart
        self.decode_by_key: dict[GapKey, int] = {}
        self.lanes: dict[int, ShareLane] = {}  # decoding seats of the shares below full
        self.num_in_lanes = 0
        self._num_admitted = 0

    def __len__(self) -> int:
        return len(self.seats)

    def add(self, request: Request, prefill_tokens: int, cached_tokens: int = 0) -> Seat:
        """A new seat, prefilling from the next step."""
        seat = Seat(request, self._num_admitted, prefill_tokens, cached_tokens)
        self._num_admitted += 1
        self.seats[request.request_id] = seat
        self.prefilling[request.request_id] = seat
        return seat

    def add_decoding(self, request: Request, kv_tokens: int, d: int) -> Seat:
        """A sequence that comes back (swapped in) holding ``kv_tokens``; it decodes at step ``d``."""
        seat = Seat(request, self._num_admitted, kv_tokens)
        self._num_admitted += 1
        self.seats[request.request_id] = seat
        seat.done_tokens = kv_tokens
        self._decode(seat, kv_tokens, seat.request.num_emitted_tokens, d - 1)
        return seat

    def start_decoding(self, seat: Seat, d: int) -> None:
        """A seat whose prefill completed at decode index ``d`` (its next token) decodes from ``d + 1``."""
        del self.prefilling[seat.request.request_id]
        self.prefill_done_sum -= seat.prefill_tokens
        self.decoder_cached_sum += seat.cached_tokens
        self._decode(seat, seat.cached_tokens + seat.prefill_tokens, seat.request.num_emitted_tokens + 1, d)

    def _decode(self, seat: Seat, kv_tokens: int, emitted: int, index: int) -> None:
        """``seat`` decodes after decode step ``index``, when it holds ``kv_tokens`` and has made ``emitted``."""
        request = seat.request
        gained = index if seat.share == FULL_SHARE else share_tokens(index, seat.share)
        seat.decoding = True
        seat.kv_offset = kv_offset = kv_tokens - gained
        seat.emit_base = emitted - gained
        seat.finish_index = request.output_tokens - seat.emit_base
        self.num_decode += 1
        long = self.long_output_tokens
        if long is not None and request.output_tokens > long:
            self.long_seats[request.request_id] = seat
        if seat.share == FULL_SHARE:
            heapq.heappush(self._finish_heap, (seat.finish_index, seat.order, seat))
            self.kv_offset_sum += kv_offset
            self.finish_index_sum += seat.finish_index
            by_key = self.decode_by_key
        else:
            lane = self.lanes.get(seat.share)
            if lane is None:
                lane = self.lanes[seat.share] = ShareLane(seat.share)
            heapq.heappush(lane.finish_heap, (seat.finish_index, seat.order, seat))
            lane.num_decode += 1
            self.num_in_lanes += 1
            lane.kv_offset_sum += kv_offset
            lane.finish_index_sum += seat.finish_index
            by_key = lane.by_key
        by_key[request.gap_key] = by_key.get(request.gap_key, 0) + 1

    def advance_prefill(self, seat: Seat, tokens: int) -> bool:
        """Record ``tokens`` more prompt tokens computed; True when the prompt is done."""
        seat.done_tokens += tokens
        self.prefill_done_sum += tokens
        return seat.done_tokens == seat.prefill_tokens

    def cached_more(self, seat: Seat, tokens: int) -> None:
        """``tokens`` of a prefilling seat's computed prompt now count as cached (its segments were
        published to the prefix cache): they leave its own prefill, done and to do."""
        seat.prefill_tokens -= tokens
        seat.done_tokens -= tokens
        self.prefill_done_sum -= tokens

    def remove(self, seat: Seat) -> None:
        """Take a seat away (finished, preempted or swapped out)."""
        seat.alive = False
        request_id = seat.request.request_id
        del self.seats[request_id]
        if seat.decoding:
            self.num_decode -= 1
            self.decoder_cached_sum -= seat.cached_tokens
            self.long_seats.pop(request_id, None)
            if seat.share == FULL_SHARE:
                self.kv_offset_sum -= seat.kv_offset
                self.finish_index_sum -= seat.finish_index
                self.decode_by_key[seat.request.gap_key] -= 1
            else:
                lane = self.lanes[seat.share]
                lane.kv_offset_sum -= seat.kv_offset
                lane.finish_index_sum -= seat.finish_index
                lane.by_key[seat.request.gap_key] -= 1
                lane.num_decode -= 1
                self.num_in_lanes -= 1
                if not lane.num_decode:
                    del self.lanes[seat.share]
        else:
            self.prefill_done_sum -= seat.done_tokens
            del self.prefilling[request_id]

    def newest(self) -> Seat:
        """The most recently admitted seat (the preemption victim)."""
        return next(reversed(self.seats.values()))

    def tokens_left(self, d: int) -> int:
        """Sum over decoding seats of the tokens each has yet to make at decode step ``d`` (its last
        made after step ``d - 1``)."""
        left = self.finish_index_sum - (self.num_decode - self.num_in_lanes) * (d - 1)
        for lane in self.lanes.values():
            left += lane.finish_index_sum - lane.num_decode * share_tokens(d - 1, lane.share)
        return left

    def decode_context_tokens(self, d: int) -> int:
        """Sum over decoding seats of the tokens each attends to at decode step ``d`` (its KV tokens after it)."""
        if not self.lanes:
            return self.kv_offset_sum + self.num_decode * d
        tokens = self.kv_offset_sum + (self.num_decode - self.num_in_lanes) * d
        for lane in self.lanes.values():
            tokens += lane.kv_offset_sum + lane.num_decode * share_tokens(d, lane.share)
        return tokens

    def stored_tokens(self, last_index: int) -> int:
        """Tokens in the KV cache after decode step ``last_index`` that the seats computed (cached ones excluded)."""
        if self.lanes:
            context = self.decode_context_tokens(last_index)
        else:
            context = self.kv_offset_sum + self.num_decode * last_index
        return context - self.decoder_cached_sum + self.prefill_done_sum

    def num_silent(self, d: int) -> int:
        """Decoding seats that gain no token at decode step ``d`` (their share skips it)."""
        silent = 0
        for share, lane in self.lanes.items():
            if d * share % FULL_SHARE >= share:  # not shares.gains_at(d, share)
                silent += lane.num_decode
        return silent

    def next_finish_index(self) -> int:
        """The decode index at which the next decoding seat finishes (all decode at the full share; there is one)."""
        heap = self._finish_heap
        while not heap[0][2].alive:
            heapq.heappop(heap)
        return heap[0][0]

    def pop_finished(self, last_index: int) -> list[Seat]:
        """Live seats whose last token was made at or before decode step ``last_index``, in finish order
        (by admission among those of one step)."""
        heap = self._finish_heap
        if not self.lanes:
            if not heap or heap[0][0] > last_index:
                return []
            return _pop_through(heap, last_index)
        done = _pop_through(heap, last_index)
        for lane in list(self.lanes.values()):
            done += _pop_through(lane.finish_heap, share_tokens(last_index, lane.share))
        done.sort(key=lambda seat: seat.order)  # several heaps: put one step's finishes in seat order
        return done

    def emitted_at(self, seat: Seat, last_index: int) -> int:
        """Output tokens a decoding seat has made after decode step ``last_index``."""
        return seat.emit_base + share_tokens(last_index, seat.share)

    def kv_tokens_at(self, seat: Seat, last_index: int) -> int:
        """KV tokens a decoding seat holds after decode step ``last_index``."""
        return seat.kv_offset + share_tokens(last_index, seat.share)


def _pop_through(heap: list[tuple[int, int, Seat]], last: int) -> list[Seat]:
    """Pop the heap's entries keyed ``last`` or less; the live seats among them, in key order."""
    done: list[Seat] = []
    if not heap or heap[0][0] > last:
        return done
    while heap and heap[0][0] <= last:
        seat = heapq.heappop(heap)[2]
        if seat.alive:
            done.append(seat)
    return done
