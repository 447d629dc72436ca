"""A replica's KV manager: admit, grow, vacate, swap and the ledger numbers (pure, no simpy).

The manager owns the block pool, the prefix cache and the host memory swapped sequences use. It
knows each decoding sequence's blocks by residue: a sequence whose KV tokens after decode step D
are ``kv_offset + D`` needs a new block at the steps D with ``(kv_offset + D) mod block_size == 1``,
so bucket ``(1 - D) mod block_size`` is exactly the set that grows at decode step D. Growth over a
run of steps, and how many steps the free blocks pay for, are then sums over buckets, never loops
over sequences. Sequences with less than the full share of the decode steps (``share_tokens``) are
bucketed the same way by their own token count, one set of buckets per share; the replica never
runs several steps as one while any decodes, so the run sums count full-share sequences only.

:class:`KVManager` is the paged allocator (vLLM's PagedAttention: interchangeable blocks, no
external fragmentation); :class:`clustersim.kvcache.contiguous.ContiguousKV` places each
sequence's reservation in one region of a linear space. Which one a run uses is its allocator
``kind`` (:data:`ALLOCATORS`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from clustersim.architecture import blocks_for_tokens
from clustersim.kvcache.paged import BlockPool
from clustersim.kvcache.prefix import PrefixCache, Segment, resume_key
from clustersim.kvcache.sequence import (
    KVSequence,
    Lengths,
    Reserve,
    blocks_to_admit,
    capacity_reason,
    prefill_tokens_of,
)
from clustersim.shares import FULL_SHARE, gains_at, share_tokens

Buckets = list[dict[int, KVSequence]]


@dataclass(frozen=True, slots=True)
class KVSpec:
    """Everything fixed about one replica's KV cache.

    ``host_swap_blocks`` > 0 lets preempted sequences be swapped out to host memory (that many
    blocks at most); ``shared_prefix_tokens``: tenant -> its system prompt's tokens (prefix caching).
    """

    num_blocks: int
    reserve: Reserve
    watermark_blocks: int = 0
    bytes_per_token: float = 0.0  # over the replica's GPUs, for the memory ledger
    prefix_caching: bool = False
    prefix_block_tokens: int = 512  # tokens one prefix hash id stands for (Mooncake traces: 512)
    shared_prefix_tokens: Mapping[str, int] = field(default_factory=dict)
    host_swap_blocks: int = 0
    warm_segments: tuple[Segment, ...] = ()  # cached at the start, oldest first (earlier benchmark runs)


class KVManager:
    """Paged KV blocks of one replica.

    Invariants: the pool's used blocks are the live sequences' held blocks plus the cached
    prefix blocks; ``filled_blocks`` is the blocks the decoding sequences' tokens fill;
    ``grown_through`` is the last decode step whose growth is allocated.
    """

    def __init__(self, spec: KVSpec) -> None:
        self.spec = spec
        self.reserve = spec.reserve
        self.block_size_tokens = spec.reserve.block_size_tokens
        self.growing = spec.reserve.reservation == "grow"  # otherwise whole reservations are taken up front
        self.pool = BlockPool(spec.num_blocks)
        self.prefix = PrefixCache() if spec.prefix_caching else None
        self.filled_blocks = 0
        self.grown_through = -1
        self.host_used_blocks = 0
        self.prefix_lookup_tokens = 0  # prompt tokens of first admissions
        self.prefix_hit_tokens = 0  # ... of which the prefix cache held
        self._num_decoding = 0  # of the full share
        self._buckets: Buckets = [{} for _ in range(self.block_size_tokens)]
        self._share_buckets: dict[int, Buckets] = {}  # the other shares' decoding sequences, by share
        if self.prefix is not None:
            for key, num_blocks in spec.warm_segments:
                self._warm(key, num_blocks)

    def _warm(self, key: Hashable, num_blocks: int) -> None:
        """Cache a segment an earlier run left (most recently used), evicting the least recently used
        ones when the pool is full; one bigger than the whole pool is not cached."""
        assert self.prefix is not None
        if key in self.prefix:
            self.prefix.touch(key)
        elif num_blocks <= self.pool.num_free_blocks + self.prefix.num_evictable_blocks:
            self._take(num_blocks)
            self.prefix.insert(key, num_blocks)

    # ------------------------------------------------------------------ admission
    def rejection_reason(self, request: Lengths) -> str:
        """Why ``request`` can never fit this cache, or an empty string."""
        return capacity_reason(request, self.reserve, self.spec.num_blocks, self.spec.watermark_blocks)

    def readmission_reason(self, request: Lengths) -> str:
        """Why a preempted ``request`` (to be recomputed: prompt + tokens emitted so far) can never be
        admitted again, above the watermark, or an empty string."""
        needed = self.blocks_to_admit(request)
        admissible = self.spec.num_blocks - self.spec.watermark_blocks
        if needed <= admissible:
            return ""
        return (
            f"preempted; recomputing it needs {needed} KV blocks, more than the {admissible} the replica admits "
            f"above its {self.spec.watermark_blocks}-block watermark (vLLM ignores such a request too)"
        )

    def blocks_to_admit(self, request: Lengths, cached_tokens: int = 0) -> int:
        return blocks_to_admit(request, self.reserve, cached_tokens)

    def segments(self, request: Lengths) -> list[Segment]:
        """The prompt's cacheable segments, in order: its prefix hash ids, or its tenant's system prompt."""
        bs = self.block_size_tokens
        if request.prefix_hash_ids:
            seg_tokens = self.spec.prefix_block_tokens
            tokens = request.prompt_tokens + (request.output_tokens - 1 if request.ids_cover_output else 0)
            full = tokens // seg_tokens
            return [(("hash", h), seg_tokens // bs) for h in request.prefix_hash_ids[:full]]
        shared = min(self.spec.shared_prefix_tokens.get(request.tenant, 0), request.prompt_tokens) // bs
        # keyed by its length too: a prompt shorter than the system prompt holds only its leading part
        return [(("system", request.tenant, shared), shared)] if shared else []

    def prefix_hit(self, request: Lengths) -> tuple[list[Segment], int]:
        """The cached leading segments a request would reuse, and their tokens (one token is always prefilled)."""
        if self.prefix is None:
            return [], 0
        segments = self.segments(request)
        hit = segments[: self.prefix.num_leading_hits(segments)]
        if len(hit) == len(segments) and request.num_preemptions:
            key = resume_key(request.request_id)  # what it computed before a preemption, still cached
            if blocks := self.prefix.size(key):
                hit.append((key, blocks))
        cached = sum(blocks for _, blocks in hit) * self.block_size_tokens
        while hit and cached > prefill_tokens_of(request) - 1:
            cached -= hit.pop()[1] * self.block_size_tokens
        return hit, cached

    def admission_free(self, hit: list[Segment] | None = None) -> int:
        """Blocks a new request may take: the free ones above the watermark, plus cached prefix blocks
        nobody uses (evicted when needed), less those it would reuse itself."""
        free = self.pool.num_free_blocks - self.spec.watermark_blocks
        if self.prefix is not None:
            free += self.prefix.num_evictable_blocks - self.prefix.evictable_blocks_among(hit or [])
        return free

    def prefill_blocks(self, cached_tokens: int, computed_tokens: int) -> int:
        """Blocks a prefilling sequence holds once ``computed_tokens`` of its prompt (after its
        ``cached_tokens``) are computed: per-chunk allocation (vLLM V1 ``allocate_slots``)."""
        bs = self.block_size_tokens
        return blocks_for_tokens(cached_tokens + computed_tokens, bs) - cached_tokens // bs

    def growth_free(self) -> int:
        """Blocks a running sequence may grow into: the free ones plus unused cached prefix blocks
        (no watermark: it only holds back admissions)."""
        free = self.pool.num_free_blocks
        return free + self.prefix.num_evictable_blocks if self.prefix is not None else free

    def extend_prefill(self, seq: KVSequence, num_blocks: int) -> None:
        """A prefilling sequence takes ``num_blocks`` more for its next chunk (at most :meth:`growth_free`)."""
        self._take(num_blocks)
        seq.reserved_blocks += num_blocks

    def _make_room(self, num_blocks: int) -> None:
        """Evict unused cached prefix segments until ``num_blocks`` are free (or none are left to evict)."""
        if self.prefix is not None and num_blocks > self.pool.num_free_blocks:
            self.pool.free(self.prefix.evict(num_blocks - self.pool.num_free_blocks))

    def _take(self, num_blocks: int) -> None:
        self._make_room(num_blocks)
        self.pool.allocate(num_blocks)

    def hold(self, num_blocks: int) -> None:
        """Take ``num_blocks`` no sequence holds yet (a KV cache on its way here), evicting unused cached
        prefix segments if the free blocks alone do not cover them."""
        self._take(num_blocks)

    def unhold(self, num_blocks: int) -> None:
        """Give back blocks :meth:`hold` took."""
        self.pool.free(num_blocks)

    def admit(self, seq: KVSequence, hit: list[Segment], first_admission: bool, num_blocks: int = -1) -> None:
        """Give an admitted sequence its blocks (``num_blocks``, or by the reservation rule when
        negative); with prefix caching it pins ``hit`` and evicts unused cached segments if the free
        blocks alone do not cover its own."""
        request = seq.request
        if num_blocks < 0:
            num_blocks = blocks_to_admit(request, self.reserve, seq.cached_tokens)
        if self.prefix is not None:
            self.prefix.acquire(hit)
            if first_admission:
                self.prefix_lookup_tokens += request.prompt_tokens
                self.prefix_hit_tokens += seq.cached_tokens
            seq.hit_segments = list(hit)
            seq.own_segments = self.segments(request)[len(hit) :]
        self._take(num_blocks)
        seq.reserved_blocks = num_blocks
        self._place(seq, num_blocks)

    def publish(self, seq: KVSequence, computed_tokens: int) -> int:
        """Cache the leading segments of ``seq``'s own prompt that its ``computed_tokens`` (cached ones
        included) now cover, so later admissions reuse them while it runs; returns their tokens.

        Each becomes one ``seq`` reuses: a new segment moves its blocks to the cache, pinned by
        ``seq``; one another sequence cached meanwhile is pinned instead and ``seq``'s own copy freed.
        """
        prefix = self.prefix
        if prefix is None or not seq.own_segments:
            return 0
        bs = self.block_size_tokens
        end = seq.cached_tokens
        count = 0
        for key, blocks in seq.own_segments:
            end += blocks * bs
            if end > computed_tokens:
                break
            if key in prefix:
                prefix.acquire([(key, blocks)])
                self.pool.free(blocks)
            else:
                prefix.insert_pinned(key, blocks)
            seq.reserved_blocks -= blocks
            count += 1
        if not count:
            return 0
        published = seq.own_segments[:count]
        seq.hit_segments.extend(published)
        del seq.own_segments[:count]
        tokens = sum(blocks for _, blocks in published) * bs
        seq.cached_tokens += tokens
        return tokens

    def _place(self, seq: KVSequence, num_blocks: int) -> None:
        """Where the reservation goes (paged: anywhere)."""

    # ------------------------------------------------------------------ decoding and growth
    def start_decoding(self, seq: KVSequence, kv_tokens: int) -> None:
        """A sequence (with ``kv_offset`` set) starts decoding holding ``kv_tokens`` tokens."""
        bs = self.block_size_tokens
        self.filled_blocks += blocks_for_tokens(kv_tokens, bs) - seq.cached_tokens // bs
        self._bucket_in(seq)

    def _bucket_in(self, seq: KVSequence) -> None:
        bs = self.block_size_tokens
        if seq.share == FULL_SHARE:
            self._buckets[seq.kv_offset % bs][id(seq)] = seq
            self._num_decoding += 1
            return
        buckets = self._share_buckets.get(seq.share)
        if buckets is None:
            buckets = self._share_buckets[seq.share] = [{} for _ in range(bs)]
        buckets[seq.kv_offset % bs][id(seq)] = seq

    def _bucket_out(self, seq: KVSequence) -> None:
        bs = self.block_size_tokens
        if seq.share == FULL_SHARE:
            del self._buckets[seq.kv_offset % bs][id(seq)]
            self._num_decoding -= 1
            return
        buckets = self._share_buckets[seq.share]
        del buckets[seq.kv_offset % bs][id(seq)]
        if not any(buckets):
            del self._share_buckets[seq.share]

    def _crossing_shares(self, d: int) -> list[dict[int, KVSequence]]:
        """The sequences of the shares below full that cross a block boundary at decode step ``d``."""
        bs = self.block_size_tokens
        crossing = []
        for share, buckets in self._share_buckets.items():
            if d * share % FULL_SHARE < share:  # the share gains a token at step d (shares.gains_at)
                bucket = buckets[(1 - share_tokens(d, share)) % bs]
                if bucket:
                    crossing.append(bucket)
        return crossing

    def growth(self, first_index: int, last_index: int) -> int:
        """Blocks the decoding sequences take over decode steps ``first..last`` (no one finishes between)."""
        num_steps = last_index - first_index + 1
        if num_steps <= 0:
            return 0
        bs = self.block_size_tokens
        full_cycles, rest = divmod(num_steps, bs)
        total = full_cycles * self._num_decoding
        buckets = self._buckets
        for s in range(first_index, first_index + rest):
            total += len(buckets[(1 - s) % bs])
        return total

    def growth_counts(self, first_index: int, count: int) -> list[int]:
        """Blocks the decoding sequences take at each of decode steps ``first_index .. first_index + count - 1``
        (periodic in the block size)."""
        bs, buckets = self.block_size_tokens, self._buckets
        return [len(buckets[(1 - index) % bs]) for index in range(first_index, first_index + count)]

    def affordable_steps(self, first_index: int, max_steps: int) -> int:
        """How many decode steps from ``first_index`` (at most ``max_steps``) fit their growth in the free pool."""
        n = self._num_decoding
        free = self.pool.num_free_blocks
        bs = self.block_size_tokens
        cycles = min(max_steps // bs, free // n) if n else max_steps // bs
        steps, free = cycles * bs, free - cycles * n
        while steps < max_steps:
            need = len(self._buckets[(1 - (first_index + steps)) % bs])
            if need > free:
                break
            free -= need
            steps += 1
        return steps

    def grow(self, d: int) -> list[KVSequence]:
        """Give the sequences crossing a block boundary at decode step ``d`` their block.

        Returns the sequences still without one, in order, when the free blocks (after evicting
        unused cached prefixes) do not cover them all; the caller preempts and calls :meth:`grow_one`.
        """
        self.grown_through = d
        bucket = self._buckets[(1 - d) % self.block_size_tokens]
        need = len(bucket)
        others = self._crossing_shares(d) if self._share_buckets else None
        if others:
            need += sum(len(b) for b in others)
        if not self.growing:  # the reservations already hold the new tokens
            self.filled_blocks += need
            return []
        self._make_room(need)
        if need <= self.pool.num_free_blocks:
            self.pool.allocate(need)
            self.filled_blocks += need
            return []
        if others:
            return [*bucket.values(), *(seq for b in others for seq in b.values())]
        return list(bucket.values())

    def grow_one(self) -> None:
        """One crossing sequence takes a block (evicting an unused cached prefix if none is free)."""
        self._take(1)
        self.filled_blocks += 1

    def grow_through(self, first_index: int, last_index: int) -> int:
        """Allocate the growth of decode steps ``first..last`` (already known to be affordable); returns it."""
        growth = self.growth(first_index, last_index)
        self.filled_blocks += growth
        if self.growing:
            self.pool.allocate(growth)
        if last_index >= first_index:
            self.grown_through = last_index
        return growth

    def held_blocks(self, seq: KVSequence, last_index: int) -> int:
        """Blocks ``seq`` holds once decode step ``last_index`` is grown (cached prefix blocks excluded)."""
        if not self.growing or not seq.decoding:
            return seq.reserved_blocks
        bs = self.block_size_tokens
        gained = last_index if seq.share == FULL_SHARE else share_tokens(last_index, seq.share)
        return blocks_for_tokens(seq.kv_offset + gained, bs) - seq.cached_tokens // bs

    # ------------------------------------------------------------------ leaving
    def vacate(self, seq: KVSequence, last_index: int, computed_tokens: int, preempted: bool = False) -> None:
        """Free what ``seq`` held after decode step ``last_index``; with prefix caching its prompt
        segments among its ``computed_tokens`` stay cached and what it reused is unpinned, and a
        ``preempted`` sequence's other computed full blocks stay cached too (:func:`resume_key`)."""
        held = self.held_blocks(seq, last_index)
        kept = 0
        if self.prefix is not None:
            bs = self.block_size_tokens
            end = seq.cached_tokens
            computed: list[Segment] = []
            for key, blocks in seq.own_segments:
                end += blocks * bs
                if end > computed_tokens:
                    preempted = False  # blocks past a segment it had not finished are not a prefix of it
                    break
                computed.append((key, blocks))
            # unused from its last block to its first, so a full cache evicts a prompt from its end
            # (vLLM's BlockPool.free_blocks frees a request's blocks in reverse; SGLang evicts leaves)
            if preempted:
                kept += self._keep_computed(seq, end, computed_tokens)
            for key, blocks in reversed(computed):
                if self.prefix.insert(key, blocks):
                    kept += blocks
            self.prefix.release(seq.hit_segments[::-1])
        self.pool.free(held - kept)
        self._unplace(seq)
        if seq.decoding:
            bs = self.block_size_tokens
            kv_tokens = seq.kv_offset + share_tokens(last_index, seq.share)
            self.filled_blocks -= blocks_for_tokens(kv_tokens, bs) - seq.cached_tokens // bs
            self._bucket_out(seq)

    def _keep_computed(self, seq: KVSequence, end_tokens: int, computed_tokens: int) -> int:
        """Cache a preempted ``seq``'s computed full blocks past its prompt segments (which end at
        ``end_tokens``) as its resume segment, merged with the one it was resumed from; returns the
        blocks that move from ``seq`` to the cache."""
        assert self.prefix is not None
        key = resume_key(seq.request.request_id)
        before = 0
        for i, (hit_key, _) in enumerate(seq.hit_segments):
            if hit_key == key:
                del seq.hit_segments[i]
                before = self.prefix.take(key)
                break
        fresh = max(computed_tokens // self.block_size_tokens - end_tokens // self.block_size_tokens, 0)
        if before + fresh:
            self.prefix.insert(key, before + fresh)
        return fresh

    def _unplace(self, seq: KVSequence) -> None:
        """Return the reservation's place (paged: nothing to do)."""

    # ------------------------------------------------------------------ swap
    def swap_out_blocks(self, seq: KVSequence, last_index: int) -> int:
        """The blocks ``seq`` would copy to host memory if swapped out now; 0 if it cannot be (swap off,
        prefix caching on, not decoding, or no room left in host memory)."""
        if self.spec.host_swap_blocks <= 0 or self.prefix is not None or not seq.decoding:
            return 0
        blocks = self.held_blocks(seq, last_index)
        return blocks if self.host_used_blocks + blocks <= self.spec.host_swap_blocks else 0

    def swap_out(self, num_blocks: int) -> None:
        """Host memory takes ``num_blocks`` of a sequence being swapped out (its GPU blocks are vacated)."""
        self.host_used_blocks += num_blocks

    def swap_in_blocks(self, kv_tokens: int, share: int = FULL_SHARE, d: int = 0) -> int:
        """Blocks a swapped-out sequence with ``kv_tokens`` takes to come back at decode step ``d``,
        with room for the token it gains there (if its ``share`` gains one at ``d``)."""
        return blocks_for_tokens(kv_tokens + gains_at(d, share), self.block_size_tokens)

    def swap_in(self, seq: KVSequence, num_blocks: int, host_blocks: int, d: int) -> None:
        """A swapped-out sequence (``kv_offset`` set) comes back with ``num_blocks`` for decode step ``d``."""
        self.grown_through = d
        self.host_used_blocks -= host_blocks
        self.pool.allocate(num_blocks)
        seq.reserved_blocks = num_blocks
        self.filled_blocks += num_blocks
        self._bucket_in(seq)

    # ------------------------------------------------------------------ views
    @property
    def num_cached_blocks(self) -> int:
        return self.prefix.num_blocks if self.prefix is not None else 0

    has_external_fragmentation = False  # paged blocks are interchangeable

    def external_frag_tokens(self, head: Lengths | None) -> int:
        """Free tokens the waiting head cannot use because no hole is large enough (paged: none)."""
        return 0
