"""A paged KV cache: fixed-size blocks that any sequence can use (vLLM's PagedAttention).

Paged blocks are interchangeable, so the pool only counts them; which physical block a
sequence holds never matters to timing, and there is no external fragmentation.
"""

from __future__ import annotations


class KVAccountingError(AssertionError):
    """Blocks were freed twice or allocated beyond capacity: a bug in clustersim, never bad input."""


class BlockPool:
    """The KV blocks of one replica.

    Invariant: ``0 <= num_used_blocks <= num_total_blocks`` at all times.
    """

    __slots__ = ("num_free_blocks", "num_total_blocks", "peak_used_blocks")

    def __init__(self, num_total_blocks: int) -> None:
        if num_total_blocks <= 0:
            raise ValueError(f"a block pool needs at least one block, got {num_total_blocks}")
        self.num_total_blocks = num_total_blocks
        self.num_free_blocks = num_total_blocks
        self.peak_used_blocks = 0

    @property
    def num_used_blocks(self) -> int:
        return self.num_total_blocks - self.num_free_blocks

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.num_free_blocks

    def allocate(self, num_blocks: int) -> None:
        """Take ``num_blocks`` free blocks; raises if there are not that many."""
        if num_blocks < 0 or num_blocks > self.num_free_blocks:
            raise KVAccountingError(f"allocate {num_blocks} blocks with {self.num_free_blocks} free")
        self.num_free_blocks -= num_blocks
        used = self.num_total_blocks - self.num_free_blocks
        if used > self.peak_used_blocks:
            self.peak_used_blocks = used

    def free(self, num_blocks: int) -> None:
        """Return ``num_blocks`` blocks; raises if that would free more than are in use."""
        if num_blocks < 0 or self.num_free_blocks + num_blocks > self.num_total_blocks:
            raise KVAccountingError(
                f"free {num_blocks} blocks with {self.num_used_blocks} of {self.num_total_blocks} in use"
            )
        self.num_free_blocks += num_blocks
