"""The KV memory ledger: an exact hand-computed trace, and paged vs contiguous on chat traffic."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import explicit_scenario

KV_BYTES_PER_TOKEN = 131_072  # Llama-3.1-8B: 2 x 32 layers x 8 KV heads x 128 x 2 bytes

COLUMNS = ("stored", "internal_frag", "reserved_unused", "external_frag", "free")


def ledger_in_tokens(result) -> list[tuple[float, ...]]:
    rows = pq.read_table(result.out_dir / "memory.parquet").to_pylist()
    return [(r["started_at_s"], *(r[f"{c}_bytes"] / KV_BYTES_PER_TOKEN for c in COLUMNS)) for r in rows]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_contiguous_holes_show_as_external_fragmentation(run_mapping, fast_forward):
    # 10 one-token blocks; each request reserves its prompt + 2 tokens, first fit:
    # R0 [0,3), R1 [3,6), R2 [6,9); R3 (prompt 2: needs 4) waits. R1 finishes at t=1 and leaves
    # a hole of 3 next to the hole of 1 at the end: 4 free, but not in one piece.
    raw = explicit_scenario(
        [(0.0, 1, 2), (0.0, 1, 1), (0.0, 1, 2), (0.0, 2, 2)],
        kv={"block_size_tokens": 1, "num_blocks": 10, "allocator": "contiguous", "max_output_tokens": 2},
        simulation={"fast_forward": fast_forward},
    )
    result = run_mapping(raw)
    # (start, stored, internal, reserved-unused, external, free headroom) in tokens
    assert ledger_in_tokens(result) == [
        (0.0, 3, 0, 6, 0, 1),
        (1.0, 4, 0, 2, 4, 0),
        (2.0, 2, 0, 2, 0, 6),
        (3.0, 3, 0, 1, 0, 6),
    ]
    kv = result.summary["kv"]
    assert kv["external_frag_frac"] == pytest.approx(0.4 / 4)  # 4 of 10 tokens for 1 of 4 seconds
    assert kv["waste_frac"] == pytest.approx((0.6 + 0.2 + 0.2 + 0.1 + 0.4) / 4)


def test_paged_internal_fragmentation_is_the_partly_filled_blocks(run_mapping):
    raw = explicit_scenario([(0.0, 5, 4)], kv={"block_size_tokens": 4, "num_blocks": 10})
    # 5 prompt tokens fill 2 blocks (3 slots unused); each decode adds a token: 6, 7, 8 tokens in
    # 2 blocks (2, 1, 0 slots unused). The run of three decode steps is one row: their mean.
    assert ledger_in_tokens(run_mapping(raw)) == [(0.0, 5, 3, 0, 0, 32), (1.0, 7, 1, 0, 0, 32)]
    step_by_step = explicit_scenario(
        [(0.0, 5, 4)], kv={"block_size_tokens": 4, "num_blocks": 10}, simulation={"fast_forward": False}
    )
    assert ledger_in_tokens(run_mapping(step_by_step)) == [
        (0.0, 5, 3, 0, 0, 32),
        (1.0, 6, 2, 0, 0, 32),
        (2.0, 7, 1, 0, 0, 32),
        (3.0, 8, 0, 0, 0, 32),
    ]
