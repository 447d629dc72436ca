"""Closed-form decode runs equal the step-by-step sum."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.cost.base import DecodeStepShape
from clustersim.cost.runs import RunClock, floor_steps, run_duration_s, run_integrals, steps_done_by


def stepwise(shape: DecodeStepShape, first: float, growth: float, num_steps: int) -> float:
    return sum(shape.duration_s(first + j * growth) for j in range(num_steps))


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (DecodeStepShape(1.0), 5.0),  # unit cost: 5 steps
        (DecodeStepShape(0.0, ((0.0, 1.0, 0.0, 0.0),)), 10 + 12 + 14 + 16 + 18),  # C = 10, 12, ...
        (DecodeStepShape(0.5, ((15.0, 0.0, 0.0, 1.0),)), 2.5 + 15 + 15 + 15 + 16 + 18),  # max(15, C)
        # a host-time floor of 13: C = 10, 12 lie below it, then C = 14, 16, 18
        (DecodeStepShape(0.0, ((0.0, 1.0, 0.0, 0.0),), 13.0), 13 + 13 + 14 + 16 + 18),
        (DecodeStepShape(0.0, ((0.0, 1.0, 0.0, 0.0),), 99.0), 5 * 99),  # every step on the floor
    ],
)
def test_hand_computed_runs(shape, expected):
    assert run_duration_s(shape, 10.0, 2.0, 5) == pytest.approx(expected)


pieces = st.tuples(st.floats(0, 1e-2), st.floats(0, 1e-6), st.floats(0, 1e-2), st.floats(0, 1e-6))


floors = st.one_of(st.just(0.0), st.floats(0, 5e-2))


@settings(max_examples=400, deadline=None)
@given(
    fixed=st.floats(0, 1e-2),
    parts=st.lists(pieces, max_size=3),
    first=st.integers(0, 10**6),
    growth=st.integers(1, 512),
    num_steps=st.integers(0, 300),
    floor=floors,
)
def test_closed_form_equals_stepwise(fixed, parts, first, growth, num_steps, floor):
    shape = DecodeStepShape(fixed, tuple(parts), floor)
    expected = stepwise(shape, first, growth, num_steps)
    assert run_duration_s(shape, first, growth, num_steps) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(pieces, min_size=1, max_size=2), num_steps=st.integers(1, 200), frac=st.floats(0, 1.2), floor=floors
)
def test_steps_done_by_inverts_the_run(parts, num_steps, frac, floor):
    shape = DecodeStepShape(1e-3, tuple(parts), floor)
    total = run_duration_s(shape, 1000, 8, num_steps)
    elapsed = frac * total
    done = steps_done_by(shape, 1000, 8, num_steps, elapsed)
    assert 0 <= done <= num_steps
    assert run_duration_s(shape, 1000, 8, done) <= elapsed
    if done < num_steps:
        assert run_duration_s(shape, 1000, 8, done + 1) > elapsed


# ----------------------------------------------------------------------------- ledger integrals of a run
@settings(max_examples=300, deadline=None)
@given(
    fixed_s=st.floats(1e-4, 1e-2),
    pieces=st.lists(
        st.tuples(st.floats(0, 1e-3), st.floats(0, 1e-7), st.floats(0, 1e-3), st.floats(0, 1e-7)), max_size=3
    ),
    first_context=st.integers(0, 100_000),
    growth=st.integers(0, 300),
    num_steps=st.integers(1, 120),
    pattern=st.lists(st.integers(0, 6), min_size=1, max_size=16),
    floor=floors,
)
def test_run_integrals_equal_the_sums_over_the_steps(fixed_s, pieces, first_context, growth, num_steps, pattern, floor):
    """T, sum dur_j * j and sum dur_j * G_j in closed form = the same sums taken step by step."""
    shape = DecodeStepShape(fixed_s, tuple(pieces), floor)
    period = len(pattern)
    blocks = pattern[: min(num_steps - 1, period)] if num_steps > 1 else []
    total_s, index_sum, growth_sum = run_integrals(shape, first_context, growth, num_steps, blocks)
    durations = [shape.duration_s(first_context + growth * j) for j in range(num_steps)]
    grown = [sum(pattern[(s - 1) % period] for s in range(1, j + 1)) for j in range(num_steps)]
    assert total_s == pytest.approx(sum(durations), rel=1e-9)
    assert index_sum == pytest.approx(sum(j * d for j, d in enumerate(durations)), rel=1e-9, abs=1e-12)
    assert growth_sum == pytest.approx(sum(g * d for g, d in zip(grown, durations, strict=True)), rel=1e-9, abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(
    fixed=st.floats(0, 1e-2),
    parts=st.lists(pieces, max_size=3),
    first=st.integers(0, 10**6),
    growth=st.integers(1, 512),
    num_steps=st.integers(1, 300),
    floor=st.floats(1e-4, 5e-2),
)
def test_floor_steps_are_the_leading_steps_below_the_floor(fixed, parts, first, growth, num_steps, floor):
    shape = DecodeStepShape(fixed, tuple(parts), floor)
    below = [shape.kernels_s(first + growth * j) < floor for j in range(num_steps)]
    assert floor_steps(shape, first, growth, num_steps) == (below.index(False) if False in below else num_steps)


@settings(max_examples=400, deadline=None)
@given(
    fixed=st.floats(0, 1e-2),
    parts=st.lists(pieces, max_size=3),
    first=st.integers(0, 10**6),
    growth=st.integers(0, 512),
    lengths=st.lists(st.integers(0, 3000), min_size=1, max_size=8),
    floor=floors,
)
def test_run_clock_is_run_duration_bit_for_bit(fixed, parts, first, growth, lengths, floor):
    """An anchor's clock gives every length exactly what run_duration_s gives (the fast path's boundaries)."""
    shape = DecodeStepShape(fixed, tuple(parts), floor)
    clock = RunClock(shape, first, growth)
    for num_steps in lengths:
        assert clock.duration_s(num_steps).hex() == run_duration_s(shape, first, growth, num_steps).hex(), num_steps


def test_run_clock_on_the_floor_then_off_it():
    # kernel time C - 9 against a floor of 4: C = 10, 12 are floored (1, 3 < 4), C = 14, 16 are not
    clock = RunClock(DecodeStepShape(0.0, ((-9.0, 1.0, 0.0, 0.0),), 4.0), 10, 2)
    assert [clock.duration_s(k) for k in range(5)] == [0.0, 4.0, 8.0, 13.0, 20.0]
