"""A prefix cache of KV blocks (pure): prompt segments shared between requests, evicted LRU.

A segment is a run of whole KV blocks identified by a key (a Mooncake ``hash_id``, a tenant's
shared system prompt, or a preempted request's own computed blocks: :func:`resume_key`). A request
whose leading segments are cached reuses their blocks and skips their prefill. A segment is cached
as soon as the sequence computing it has computed it (vLLM caches a block once it is full), so
requests admitted while that sequence still runs reuse it. Segments in use are pinned (reference
counted); unused ones stay cached, holding their blocks, until memory is needed, and then go least
recently used first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

from clustersim.kvcache.paged import KVAccountingError

Segment = tuple[Hashable, int]  # (key, number of blocks)
RESUME = "resume"


def resume_key(request_id: int) -> tuple[str, int]:
    """The key of the blocks a preempted request computed beyond its prompt's cacheable segments.

    vLLM hashes every full block (``vllm/v1/core/kv_cache_utils.py`` ``hash_block_tokens``) and
    frees a preempted request's blocks into the free queue still cached
    (``KVCacheManager.free``; ``BlockPool.free_blocks`` appends them in reverse, so its last blocks
    are reused first); when it is scheduled again ``get_computed_blocks`` finds those that were not
    reused meanwhile and only the rest is recomputed. Such a segment is therefore trimmed from its
    end when memory is needed, not dropped whole (:meth:`PrefixCache.evict`).
    """
    return (RESUME, request_id)


def _trimmable(key: Hashable) -> bool:
    return isinstance(key, tuple) and len(key) == 2 and key[0] == RESUME


class PrefixCache:
    """Cached segments with reference counts; the unreferenced ones form an LRU queue.

    Invariant: ``num_blocks`` is the blocks of every cached segment and ``num_evictable_blocks`` of
    those nobody references.
    """

    __slots__ = ("_blocks", "_lru", "_refs", "num_blocks", "num_evictable_blocks", "num_evicted_segments")

    def __init__(self) -> None:
        self._blocks: dict[Hashable, int] = {}
        self._refs: dict[Hashable, int] = {}
        self._lru: OrderedDict[Hashable, None] = OrderedDict()
        self.num_blocks = 0
        self.num_evictable_blocks = 0
        self.num_evicted_segments = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._blocks

    def size(self, key: Hashable) -> int:
        """Blocks the segment ``key`` holds now (0: not cached)."""
        return self._blocks.get(key, 0)

    def num_leading_hits(self, segments: Sequence[Segment]) -> int:
        """How many of ``segments``, from the first, are cached."""
        hits = 0
        for key, _ in segments:
            if key not in self._blocks:
                break
            hits += 1
        return hits

    def evictable_blocks_among(self, segments: Sequence[Segment]) -> int:
        """Blocks of those ``segments`` that are cached and unreferenced (so also counted as evictable)."""
        return sum(self._blocks[key] for key, _ in segments if key in self._lru)

    def touch(self, key: Hashable) -> None:
        """Make an unreferenced cached segment the most recently used one."""
        if key in self._lru:
            self._lru.move_to_end(key)

    def acquire(self, segments: Sequence[Segment]) -> None:
        """Pin cached segments for a sequence that reuses them."""
        for key, _ in segments:
            refs = self._refs[key]
            if refs == 0:
                del self._lru[key]
                self.num_evictable_blocks -= self._blocks[key]
            self._refs[key] = refs + 1

    def release(self, segments: Sequence[Segment]) -> None:
        """Unpin segments; one nobody uses any more becomes the most recently used evictable one."""
        for key, _ in segments:
            refs = self._refs[key] - 1
            if refs < 0:
                raise KVAccountingError(f"prefix segment {key!r} released more often than acquired")
            self._refs[key] = refs
            if refs == 0:
                self._lru[key] = None
                self.num_evictable_blocks += self._blocks[key]

    def insert(self, key: Hashable, num_blocks: int) -> bool:
        """Keep a finished sequence's computed segment (its blocks move to the cache); False if already cached."""
        if key in self._blocks:
            return False
        self._blocks[key] = num_blocks
        self._refs[key] = 0
        self._lru[key] = None
        self.num_blocks += num_blocks
        self.num_evictable_blocks += num_blocks
        return True

    def insert_pinned(self, key: Hashable, num_blocks: int) -> None:
        """Cache a segment a running sequence has just computed; it stays pinned by that sequence."""
        if key in self._blocks:
            raise KVAccountingError(f"prefix segment {key!r} cached twice")
        self._blocks[key] = num_blocks
        self._refs[key] = 1
        self.num_blocks += num_blocks

    def take(self, key: Hashable) -> int:
        """Remove a segment pinned only by the sequence that calls this; returns its blocks, which
        stay allocated (the caller accounts for them)."""
        if self._refs.get(key) != 1:
            raise KVAccountingError(f"prefix segment {key!r} taken while not pinned exactly once")
        size = self._blocks.pop(key)
        del self._refs[key]
        self.num_blocks -= size
        return size

    def evict(self, num_blocks: int) -> int:
        """Evict least recently used unpinned segments until ``num_blocks`` are freed (or none are left).

        Returns the blocks freed (whole segments, so it may exceed ``num_blocks``, except a preempted
        request's own segment, which loses only the blocks still needed, from its end).
        """
        freed = 0
        while freed < num_blocks and self._lru:
            key = next(iter(self._lru))
            short = num_blocks - freed
            if _trimmable(key) and self._blocks[key] > short:
                self._blocks[key] -= short
                self.num_blocks -= short
                self.num_evictable_blocks -= short
                return num_blocks
            del self._lru[key]
            size = self._blocks.pop(key)
            del self._refs[key]
            self.num_blocks -= size
            self.num_evictable_blocks -= size
            self.num_evicted_segments += 1
            freed += size
        return freed
