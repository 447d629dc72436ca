"""The ledger row of one step, and of a run of steps as the time-weighted mean of its steps' rows."""

from __future__ import annotations

import pytest

from clustersim.kvcache.ledger import RunSpan, ledger_row


def test_one_step_by_hand() -> None:
    # 10 blocks of 4 tokens; 9 tokens stored in 3 filled blocks; 4 blocks held (one reserved unused);
    # 1 cached block; 2 free tokens unusable by the waiting head
    row = ledger_row(0, 1.0, 0.5, 10, 9, 3, 4, 1, 2, 4, 2.0)
    assert (row.capacity_bytes, row.stored_bytes, row.internal_frag_bytes) == (80.0, 18.0, 6.0)
    assert (row.reserved_unused_bytes, row.external_frag_bytes, row.cached_prefix_bytes) == (8.0, 4.0, 8.0)
    assert row.free_bytes == (10 - 4 - 1) * 4 * 2.0 - 4.0
    assert row.min_free_bytes == row.free_bytes
    total = row.stored_bytes + row.internal_frag_bytes + row.reserved_unused_bytes
    assert total + row.external_frag_bytes + row.cached_prefix_bytes + row.free_bytes == row.capacity_bytes


def test_a_run_is_the_time_weighted_mean_of_its_steps() -> None:
    # 3 steps of 1, 2 and 3 s; 2 sequences decoding (2 tokens per step); a block taken at step 2
    # step rows:   stored 10, 12, 14; filled 4, 4, 5; used 5, 5, 6 blocks (growing)
    durations, stored, filled, used = [1.0, 2.0, 3.0], [10, 12, 14], [4, 4, 5], [5, 5, 6]
    steps = [
        ledger_row(0, 0.0, d, 20, s, f, u, 0, 0, 4, 1.0)
        for d, s, f, u in zip(durations, stored, filled, used, strict=True)
    ]
    span = RunSpan(3, 2, 1, True, 6.0, 1 * 2.0 + 2 * 3.0, 1 * 3.0)  # sum d_j j = 8; sum d_j G_j = 3
    run = ledger_row(0, 0.0, 6.0, 20, 14, 5, 6, 0, 0, 4, 1.0, span)
    for field in ("stored_bytes", "internal_frag_bytes", "reserved_unused_bytes", "free_bytes"):
        mean = sum(getattr(step, field) * d for step, d in zip(steps, durations, strict=True)) / 6.0
        assert getattr(run, field) == pytest.approx(mean), field
    assert run.min_free_bytes == min(step.free_bytes for step in steps)
