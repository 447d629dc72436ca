"""The prefix cache: hits on leading segments, pinning, LRU eviction, conservation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.kvcache import KVAccountingError
from clustersim.kvcache.prefix import PrefixCache, resume_key


def test_hits_pinning_and_lru_eviction():
    cache = PrefixCache()
    assert cache.insert("a", 2) and cache.insert("b", 3) and not cache.insert("a", 2)
    assert cache.num_leading_hits([("a", 2), ("b", 3), ("c", 1)]) == 2
    assert cache.num_leading_hits([("x", 1), ("a", 2)]) == 0  # only a leading run counts
    cache.acquire([("a", 2)])
    assert (cache.num_blocks, cache.num_evictable_blocks) == (5, 3)
    assert cache.evict(1) == 3  # "a" is pinned: "b" goes, whole
    assert "b" not in cache and "a" in cache
    cache.release([("a", 2)])
    cache.insert("c", 1)
    assert cache.evict(2) == 2 and "a" not in cache and "c" in cache  # least recently used first
    with pytest.raises(KVAccountingError):
        cache.release([("c", 1)])


def test_a_preempted_requests_blocks_are_trimmed_from_the_end_not_dropped():
    cache = PrefixCache()
    cache.insert("old", 3)
    cache.insert(resume_key(7), 5)  # most recently freed
    assert cache.evict(4) == 4  # "old" whole (3), then one block off the resume segment's end
    assert "old" not in cache and cache.size(resume_key(7)) == 4
    assert (cache.num_blocks, cache.num_evictable_blocks) == (4, 4)
    assert cache.evict(4) == 4 and resume_key(7) not in cache  # all of it: gone
    cache.insert(resume_key(8), 2)
    cache.acquire([(resume_key(8), 2)])
    assert cache.take(resume_key(8)) == 2 and cache.num_blocks == 0  # its blocks go back to the sequence
    with pytest.raises(KVAccountingError):
        cache.take(resume_key(8))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["insert", "acquire", "release", "evict"]), st.integers(0, 5), st.integers(1, 4))
    )
)
def test_block_counts_stay_consistent(ops):
    cache = PrefixCache()
    pinned: list[str] = []
    for op, k, n in ops:
        key = f"s{k}"
        if op == "insert":
            cache.insert(key, n)
        elif op == "acquire" and key in cache:
            cache.acquire([(key, n)])
            pinned.append(key)
        elif op == "release" and key in pinned:
            pinned.remove(key)
            cache.release([(key, n)])
        elif op == "evict":
            cache.evict(n)
        assert 0 <= cache.num_evictable_blocks <= cache.num_blocks
        assert all(p in cache for p in pinned)  # pinned segments are never evicted
