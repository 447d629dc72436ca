"""Inter-token gap binning: bins are exact and monotone, a run's gaps binned in closed form equal the
gaps binned one by one, percentiles from bins match NumPy's, and the suffix maximum is a maximum."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from clustersim.cost.base import DecodeStepShape
from clustersim.itl import BINS_PER_OCTAVE, GapBins, GapHistogram, SuffixMax, anchored_ranges, bin_edges_s, bin_of

positive = st.floats(min_value=1e-9, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(positive, positive)
def test_bins_are_monotone_and_hold_their_values(a: float, b: float) -> None:
    low, high = min(a, b), max(a, b)
    assert bin_of(low) <= bin_of(high)
    lower_s, upper_s = bin_edges_s(bin_of(a))
    assert lower_s <= a < upper_s
    assert upper_s / lower_s <= 1 + 1 / BINS_PER_OCTAVE + 1e-12  # each bin under 0.8% wide


def test_bin_edges_are_exact_powers_of_two_multiples() -> None:
    for value in (1.0, 0.5, 2.0**-20, 0.01, 0.0123, 3e-7):
        lower_s, upper_s = bin_edges_s(bin_of(value))
        assert bin_of(lower_s) == bin_of(value) and bin_of(upper_s) == bin_of(value) + 1
        assert bin_of(math.nextafter(lower_s, 0.0)) == bin_of(value) - 1


pieces = st.tuples(
    st.floats(0, 1e-2), st.floats(0, 1e-7), st.floats(0, 1e-2), st.floats(0, 1e-7)
)  # intercepts and non-negative slopes per context token, as the cost models give


@settings(max_examples=300, deadline=None)
@given(
    fixed=st.floats(0, 1e-2),
    parts=st.lists(pieces, max_size=4),
    context=st.integers(0, 10**6),
    num_seqs=st.integers(1, 256),
    j_first=st.integers(0, 50),
    length=st.integers(1, 400),
)
def test_run_ranges_equal_step_by_step_bins(fixed, parts, context, num_seqs, j_first, length) -> None:
    shape = DecodeStepShape(fixed, tuple(parts))
    j_last = j_first + length - 1
    ranges = anchored_ranges(shape, context, num_seqs, j_first, j_last)
    values = [shape.duration_s(context + num_seqs * j) for j in range(j_first, j_last + 1)]
    expected: dict[int, list[float]] = {}
    for value in values:
        entry = expected.setdefault(bin_of(value), [0, 0.0, value, value])
        entry[0] += 1
        entry[1] += value
        entry[2], entry[3] = min(entry[2], value), max(entry[3], value)
    got = {index: [count, sum_s, low_s, high_s] for index, count, sum_s, low_s, high_s in ranges}
    assert sorted(got) == sorted(expected) and len(ranges) == len(got)  # one range a bin
    for index, (count, total_s, low_s, high_s) in expected.items():
        assert got[index][0] == count and got[index][2] == low_s and got[index][3] == high_s
        assert math.isclose(got[index][1], total_s, rel_tol=1e-9, abs_tol=1e-15)


def _bins(values: list[float]) -> GapBins:
    histogram = GapHistogram()
    for value in values:
        histogram.add(("t", True), [(bin_of(value), 1, value, value, value)])
    return GapBins(histogram.keys["t", True])


@given(st.lists(st.sampled_from([0.01, 0.02, 0.0213, 0.5, 1.0, 7.25]), min_size=1, max_size=200))
def test_percentiles_are_exact_where_each_bin_holds_one_value(values: list[float]) -> None:
    bins = _bins(values)
    for p in (0, 1, 50, 90, 99, 100):
        assert math.isclose(bins.percentile(p), float(np.percentile(values, p)), rel_tol=1e-12)
    summary = bins.summary((50, 99))
    assert summary["max"] == max(values) and summary["num_gaps"] == len(values)
    assert math.isclose(summary["mean"], float(np.mean(values)), rel_tol=1e-12)


@given(st.lists(positive, min_size=1, max_size=300))
def test_percentiles_within_a_bin_width(values: list[float]) -> None:
    bins = _bins(values)
    for p in (50, 90, 99):
        exact = float(np.percentile(values, p))
        assert abs(bins.percentile(p) - exact) <= exact * 2 / BINS_PER_OCTAVE + 1e-300


def test_weights_count_each_sequence() -> None:
    histogram = GapHistogram()
    histogram.add(("a", True), [(bin_of(0.02), 3, 0.06, 0.02, 0.02)], weight=4)
    bins = GapBins.merged(histogram.keys.values())
    assert bins.num_gaps == 12 and math.isclose(bins.summary((50,))["mean"], 0.02)


@given(st.lists(st.one_of(st.tuples(st.just("push"), positive), st.tuples(st.just("ask"), st.integers(0, 60)))))
def test_suffix_max_is_the_greatest_value_from_an_index_on(operations) -> None:
    suffix, pushed = SuffixMax(), []
    for kind, value in operations:
        if kind == "push":
            pushed.append(value)
            suffix.push(len(pushed) - 1, value)
        else:
            tail = pushed[value:]
            assert suffix.since(value) == (max(tail) if tail else -math.inf)
    if len(pushed) > 4:
        suffix.drop_before(3)
        assert suffix.since(3) == max(pushed[3:])
