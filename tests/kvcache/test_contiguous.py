"""The contiguous space: first-fit placement, holes, coalescing, and conservation under random use."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.kvcache import KVAccountingError
from clustersim.kvcache.contiguous import ContiguousSpace


def test_first_fit_leaves_holes_that_coalesce():
    space = ContiguousSpace(10)
    a, b, c = space.allocate(3), space.allocate(3), space.allocate(3)
    assert (a, b, c) == (0, 3, 6)
    space.free(3, 3)  # a hole in the middle
    assert space.holes() == [(3, 3), (9, 1)] and space.largest_hole == 3
    assert space.allocate(4) is None  # 4 blocks are free, but not in one piece: external fragmentation
    assert space.allocate(2) == 3  # first fit
    space.free(0, 3)
    assert space.holes() == [(0, 3), (5, 1), (9, 1)]
    space.free(3, 2)
    space.free(6, 3)
    assert space.holes() == [(0, 10)] and space.num_used == 0


def test_double_free_raises():
    space = ContiguousSpace(8)
    space.allocate(4)
    space.free(0, 4)
    with pytest.raises(KVAccountingError):
        space.free(0, 4)
    with pytest.raises(KVAccountingError):
        space.free(6, 4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 12), st.integers(0, 50)), max_size=120))
def test_random_use_conserves_space(ops):
    space = ContiguousSpace(64)
    held: list[tuple[int, int]] = []
    for allocate, size, pick in ops:
        if allocate:
            start = space.allocate(size)
            if start is None:
                assert space.largest_hole < size
            else:
                held.append((start, size))
        elif held:
            start, size = held.pop(pick % len(held))
            space.free(start, size)
        holes = space.holes()
        assert sum(s for _, s in holes) + sum(s for _, s in held) == 64 == space.num_free + space.num_used
        regions = sorted(holes + held)
        assert all(a[0] + a[1] <= b[0] for a, b in itertools.pairwise(regions))  # nothing overlaps
        assert all(a[0] + a[1] < b[0] for a, b in itertools.pairwise(holes))  # holes never touch
