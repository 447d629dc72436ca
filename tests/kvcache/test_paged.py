"""The paged block pool: conservation and refusal to over-allocate or double-free."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clustersim.kvcache import BlockPool, KVAccountingError


def test_allocate_and_free():
    pool = BlockPool(10)
    pool.allocate(4)
    pool.allocate(6)
    assert pool.num_free_blocks == 0 and pool.num_used_blocks == 10
    assert not pool.can_allocate(1)
    pool.free(3)
    assert pool.num_free_blocks == 3 and pool.peak_used_blocks == 10


def test_over_allocation_and_double_free_raise():
    pool = BlockPool(4)
    with pytest.raises(KVAccountingError):
        pool.allocate(5)
    pool.allocate(2)
    pool.free(2)
    with pytest.raises(KVAccountingError):
        pool.free(1)


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 20)), max_size=200))
def test_blocks_are_conserved(ops):
    pool = BlockPool(50)
    held = 0
    for allocate, n in ops:
        if allocate and pool.can_allocate(n):
            pool.allocate(n)
            held += n
        elif not allocate and n <= held:
            pool.free(n)
            held -= n
        assert 0 <= pool.num_used_blocks == held <= pool.num_total_blocks
        assert pool.num_used_blocks + pool.num_free_blocks == pool.num_total_blocks
