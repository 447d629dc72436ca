"""A contiguous KV space: each sequence reserves one region of a linear address space (pure).

This is how request-level servers (FasterTransformer, Orca) lay out their KV cache: a request
reserves room for its prompt plus its maximum output (or the model's maximum length) at once,
placed first-fit; freeing a region in the middle leaves a hole, and free memory split into holes
too small for the next request is external fragmentation. Units are KV blocks.
"""

from __future__ import annotations

import bisect

from clustersim.kvcache.manager import KVManager, KVSpec
from clustersim.kvcache.paged import KVAccountingError
from clustersim.kvcache.prefix import Segment
from clustersim.kvcache.sequence import KVSequence, Lengths


class ContiguousSpace:
    """Regions of ``[0, capacity)``, allocated first-fit; holes coalesce when neighbours are freed.

    Invariant: holes are disjoint, sorted, non-adjacent, and ``sum(holes) + used == capacity``.
    """

    __slots__ = ("_hole_sizes", "_hole_starts", "capacity", "num_used")

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"a contiguous space needs some capacity, got {capacity}")
        self.capacity = capacity
        self.num_used = 0
        self._hole_starts: list[int] = [0]
        self._hole_sizes: list[int] = [capacity]

    @property
    def num_free(self) -> int:
        return self.capacity - self.num_used

    @property
    def largest_hole(self) -> int:
        return max(self._hole_sizes, default=0)

    @property
    def num_holes(self) -> int:
        return len(self._hole_sizes)

    def allocate(self, size: int) -> int | None:
        """Place a region of ``size`` in the first hole that fits; its start, or None if none fits."""
        if size <= 0:
            raise KVAccountingError(f"allocate a region of {size}")
        for index, hole in enumerate(self._hole_sizes):
            if hole >= size:
                start = self._hole_starts[index]
                if hole == size:
                    del self._hole_starts[index]
                    del self._hole_sizes[index]
                else:
                    self._hole_starts[index] = start + size
                    self._hole_sizes[index] = hole - size
                self.num_used += size
                return start
        return None

    def free(self, start: int, size: int) -> None:
        """Return the region ``[start, start + size)``; raises if any of it is already free."""
        if size <= 0 or start < 0 or start + size > self.capacity:
            raise KVAccountingError(f"free region [{start}, {start + size}) of a space of {self.capacity}")
        index = bisect.bisect_left(self._hole_starts, start)
        before = index - 1
        if before >= 0 and self._hole_starts[before] + self._hole_sizes[before] > start:
            raise KVAccountingError(f"region [{start}, {start + size}) overlaps a free hole")
        if index < len(self._hole_starts) and self._hole_starts[index] < start + size:
            raise KVAccountingError(f"region [{start}, {start + size}) overlaps a free hole")
        self.num_used -= size
        merges_before = before >= 0 and self._hole_starts[before] + self._hole_sizes[before] == start
        merges_after = index < len(self._hole_starts) and self._hole_starts[index] == start + size
        if merges_before and merges_after:
            self._hole_sizes[before] += size + self._hole_sizes[index]
            del self._hole_starts[index]
            del self._hole_sizes[index]
        elif merges_before:
            self._hole_sizes[before] += size
        elif merges_after:
            self._hole_starts[index] = start
            self._hole_sizes[index] += size
        else:
            self._hole_starts.insert(index, start)
            self._hole_sizes.insert(index, size)

    def holes(self) -> list[tuple[int, int]]:
        """The free holes as (start, size), in address order."""
        return list(zip(self._hole_starts, self._hole_sizes, strict=True))


class ContiguousKV(KVManager):
    """Each sequence's reservation is one region of a contiguous space, placed first-fit.

    A request is admitted only into a hole large enough; free memory split into holes too small
    for the waiting head is external fragmentation.
    """

    has_external_fragmentation = True

    def __init__(self, spec: KVSpec) -> None:
        super().__init__(spec)
        self.space = ContiguousSpace(spec.num_blocks)

    def admission_free(self, hit: list[Segment] | None = None) -> int:
        return min(super().admission_free(hit), self.space.largest_hole)

    def _place(self, seq: KVSequence, num_blocks: int) -> None:
        placed = self.space.allocate(num_blocks)
        if placed is None:
            raise KVAccountingError(f"admitted a region of {num_blocks} blocks without a hole large enough")
        seq.region_start = placed

    def _unplace(self, seq: KVSequence) -> None:
        self.space.free(seq.region_start, seq.reserved_blocks)

    def external_frag_tokens(self, head: Lengths | None) -> int:
        if head is None:
            return 0
        need = self.blocks_to_admit(head)
        if self.space.largest_hole < need <= self.space.num_free:
            return self.pool.num_free_blocks * self.block_size_tokens
        return 0
