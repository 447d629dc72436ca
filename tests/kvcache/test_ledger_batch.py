"""The batched ledger (NumPy, a batch of rows at a time) gives bit for bit the scalar ledger's rows."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.cost.base import DecodeStepShape
from clustersim.cost.runs import run_integrals
from clustersim.kvcache.ledger import RunSpan, ledger_row
from clustersim.kvcache.ledger_batch import (
    MAX_BATCHED_STEPS,
    batches_short_run,
    ledger_columns,
    pending_row,
    short_run_row,
)
from clustersim.records import MemoryRecord


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


heads = st.tuples(
    st.integers(0, 63),  # replica
    st.floats(0, 1e5),  # started_at_s
    st.floats(0, 10),  # duration_s
    st.integers(1, 200_000),  # total blocks
    st.integers(0, 3_000_000),  # stored tokens
    st.integers(0, 200_000),  # filled blocks
    st.integers(0, 200_000),  # used blocks
    st.integers(0, 50_000),  # cached blocks
    st.integers(0, 100_000),  # external tokens
    st.sampled_from([1, 8, 16, 32]),  # block size
    st.sampled_from([131072.0, 524288.0, 2.5]),  # bytes per token
)
shapes = st.builds(
    DecodeStepShape,
    st.floats(1e-4, 1e-2),
    st.tuples(st.tuples(st.floats(0, 1e-3), st.floats(0, 1e-7), st.floats(0, 1e-3), st.floats(0, 1e-7))),
    st.one_of(st.just(0.0), st.floats(0, 5e-2)),
)


@st.composite
def rows(draw: st.DrawFn) -> tuple[tuple, tuple]:
    """(pending row, the MemoryRecord ledger_row gives for it)."""
    head = draw(heads)
    kind = draw(st.sampled_from(["step", "span", "short"]))
    in_flight = draw(st.integers(0, max(head[6], 0)))  # blocks held for transfers, among the used ones
    if kind == "step":
        return (*pending_row(head), in_flight, 0.0, 0.0), ledger_row(*head, None, in_flight)
    # blocks of pulls cancelled during the run: held by its earlier steps (mean), the most at one step's end
    released = draw(st.one_of(st.just((0.0, 0.0)), st.tuples(st.floats(0, 64), st.integers(0, 64).map(float))))
    num_steps = draw(st.integers(2, MAX_BATCHED_STEPS if kind == "short" else 60))
    n, grown = draw(st.integers(1, 256)), draw(st.integers(0, 500))
    growing, before = draw(st.booleans()), draw(st.integers(0, 100_000))
    changed_after_s = draw(st.one_of(st.just(0.0), st.floats(1e-6, 1.0)))
    shape, context = draw(shapes), draw(st.integers(0, 2_000_000))
    if kind == "short" and not batches_short_run(shape, num_steps, head[9]):
        kind = "span"
    blocks = draw(st.lists(st.integers(0, 256), min_size=num_steps - 1, max_size=num_steps - 1))
    blocks = blocks[: min(num_steps - 1, head[9])]
    span = RunSpan(num_steps, n, grown, growing, *run_integrals(shape, context, n, num_steps, blocks), before,
                   changed_after_s)  # fmt: skip
    expected = ledger_row(*head, span, in_flight, *released)
    if kind == "span":
        return (*pending_row(head, span), in_flight, *released), expected
    pending = short_run_row(head, num_steps, n, grown, growing, before, changed_after_s, shape, context, blocks)
    return (*pending, in_flight, *released), expected


@settings(max_examples=300, deadline=None)
@given(st.lists(rows(), min_size=1, max_size=40))
def test_batched_rows_are_the_scalar_rows_bit_for_bit(batch: list[tuple[tuple, tuple]]) -> None:
    columns = ledger_columns([pending for pending, _ in batch])
    for index, (_, expected) in enumerate(batch):
        got = [column[index].item() for column in columns]
        assert got[0] == expected[0]
        assert [bits(v) for v in got[1:]] == [bits(float(v)) for v in expected[1:]], index


def test_a_short_run_of_two_steps_by_hand() -> None:
    # one piece max(C - 9, 0): steps at C = 10 and 12 last 1 s and 3 s; a block is taken at step 1
    shape = DecodeStepShape(0.0, ((-9.0, 1.0, 0.0, 0.0),))
    head = (0, 0.0, 4.0, 20, 14, 5, 6, 0, 0, 4, 1.0)
    pending = (*short_run_row(head, 2, 2, 1, True, 0, 0.0, shape, 10, [1]), 0, 0.0, 0.0)
    expected = ledger_row(*head, RunSpan(2, 2, 1, True, 4.0, 1 * 3.0, 1 * 3.0))
    got = [column[0].item() for column in ledger_columns([pending])]
    assert got[1:] == list(expected[1:])
    assert got[4] == (14 - 2 + 2 * 3.0 / 4.0) * 1.0  # stored: the time-weighted mean of 12 and 14 tokens


def test_a_pull_cancelled_during_a_run_by_hand() -> None:
    # the run above; 3 blocks held for a pull were given back after its first step (1 s of its 4 s):
    # that step held them in flight (and in use), the second did not; its block taken at step 1 makes
    # the first step's use 3 - 1 = 2 blocks above the last's
    shape = DecodeStepShape(0.0, ((-9.0, 1.0, 0.0, 0.0),))
    head = (0, 0.0, 4.0, 20, 14, 5, 6, 0, 0, 4, 1.0)
    run = short_run_row(head, 2, 2, 1, True, 0, 0.0, shape, 10, [1])
    plain = [column[0].item() for column in ledger_columns([(*run, 0, 0.0, 0.0)])]
    got = [column[0].item() for column in ledger_columns([(*run, 0, 0.75, 2.0)])]
    names = list(MemoryRecord._fields)
    assert got[names.index("in_flight_bytes")] == 0.75 * 4  # 3 blocks for 1 s of 4, 4 tokens a block
    assert got[names.index("reserved_unused_bytes")] == plain[names.index("reserved_unused_bytes")]
    assert got[names.index("free_bytes")] == plain[names.index("free_bytes")] - 0.75 * 4
    assert got[names.index("min_free_bytes")] == plain[names.index("min_free_bytes")] - 2 * 4
    expected = ledger_row(*head, RunSpan(2, 2, 1, True, 4.0, 1 * 3.0, 1 * 3.0), 0, 0.75, 2.0)
    assert got[1:] == list(expected[1:])
