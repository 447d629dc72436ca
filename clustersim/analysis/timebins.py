"""Pure numpy helpers turning step intervals into time series: exact binning and step paths.

A step row covers the interval ``[started_at_s, started_at_s + duration_s)``. Binning spreads a
row's amount uniformly over its interval, so a row that spans several bins (a long prefill, or
a run of ``num_steps`` identical iterations) is split between them in proportion to the overlap.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def bin_edges(end_s: float, num_bins: int) -> FloatArray:
    """``num_bins + 1`` equally spaced edges from 0 to ``end_s`` (s); one bin of 1 s when ``end_s <= 0``."""
    if end_s <= 0:
        return np.array([0.0, 1.0])
    return np.linspace(0.0, end_s, max(num_bins, 1) + 1)


def _cumulative(started_at_s: FloatArray, duration_s: FloatArray, amount: FloatArray, at_s: FloatArray) -> FloatArray:
    """Total amount delivered before each time in ``at_s``, each row delivering at a constant rate."""
    total = np.zeros(at_s.shape, dtype=np.float64)
    points = duration_s <= 0
    if points.any():  # zero-length rows deliver everything at their start
        order = np.argsort(started_at_s[points], kind="stable")
        cum = np.concatenate([[0.0], np.cumsum(amount[points][order])])
        total += cum[np.searchsorted(started_at_s[points][order], at_s, side="left")]
    spans = ~points
    if spans.any():
        start = started_at_s[spans]
        end = start + duration_s[spans]
        rate = amount[spans] / duration_s[spans]
        # sum over rows with start < t of rate * (t - start), minus the same over rows with end < t
        for edge, sign in ((start, 1.0), (end, -1.0)):
            order = np.argsort(edge, kind="stable")
            cum_rate = np.concatenate([[0.0], np.cumsum(rate[order])])
            cum_rate_edge = np.concatenate([[0.0], np.cumsum(rate[order] * edge[order])])
            idx = np.searchsorted(edge[order], at_s, side="left")
            total += sign * (at_s * cum_rate[idx] - cum_rate_edge[idx])
    return total


def binned_amount(started_at_s: ArrayLike, duration_s: ArrayLike, amount: ArrayLike, edges_s: ArrayLike) -> FloatArray:
    """How much of each row's ``amount`` falls in each bin, spreading it evenly over the row's interval.

    Args:
        started_at_s: Row start times (s).
        duration_s: Row lengths (s); a row of length 0 puts all its amount at its start.
        amount: What each row delivers (e.g. tokens, or value x duration for a time integral).
        edges_s: Increasing bin edges (s).

    Returns:
        Amount per bin (``len(edges_s) - 1`` values); amounts outside the edges are dropped.
    """
    start = np.asarray(started_at_s, dtype=np.float64)
    duration = np.asarray(duration_s, dtype=np.float64)
    values = np.asarray(amount, dtype=np.float64)
    edges = np.asarray(edges_s, dtype=np.float64).copy()
    if edges.size < 2:
        raise ValueError("need at least two bin edges")
    edges[-1] = np.nextafter(edges[-1], np.inf)  # the last bin is closed on the right
    return np.diff(_cumulative(start, duration, values, edges))


def time_weighted_mean(
    started_at_s: ArrayLike, duration_s: ArrayLike, values: ArrayLike, edges_s: ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Time-weighted mean of a piecewise-constant signal in each bin, over the time rows cover.

    Args:
        started_at_s: Row start times (s).
        duration_s: Row lengths (s); the signal equals the row's value over its interval.
        values: The signal's value on each row.
        edges_s: Increasing bin edges (s).

    Returns:
        ``(mean, covered_s)``: the mean over the covered part of each bin (NaN where no row covers
        it) and the covered time per bin (s).
    """
    duration = np.asarray(duration_s, dtype=np.float64)
    integral = binned_amount(started_at_s, duration, np.asarray(values, dtype=np.float64) * duration, edges_s)
    covered_s = binned_amount(started_at_s, duration, duration, edges_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(covered_s > 0, integral / covered_s, np.nan)
    return mean, covered_s


def step_path(
    started_at_s: ArrayLike, ended_at_s: ArrayLike, values: ArrayLike, gap_value: float
) -> tuple[FloatArray, FloatArray]:
    """``(x, y)`` points drawing a piecewise-constant signal as a staircase line.

    Args:
        started_at_s: Row start times (s), sorted, rows not overlapping.
        ended_at_s: Row end times (s).
        values: The signal on each row.
        gap_value: Drawn between rows that do not touch (NaN leaves a break in the line).

    Returns:
        Time points (s) and values, two per row plus two per gap.
    """
    start = np.asarray(started_at_s, dtype=np.float64)
    end = np.asarray(ended_at_s, dtype=np.float64)
    value = np.asarray(values, dtype=np.float64)
    x = np.column_stack([start, end]).ravel()
    y = np.column_stack([value, value]).ravel()
    if start.size < 2:
        return x, y
    tolerance_s = 1e-9 * max(1.0, float(np.abs(end).max()))
    gaps = np.flatnonzero(start[1:] > end[:-1] + tolerance_s)
    positions = np.repeat(2 * gaps + 2, 2)
    gap_x = np.column_stack([end[gaps], start[gaps + 1]]).ravel()
    return np.insert(x, positions, gap_x), np.insert(y, positions, np.full(gap_x.size, gap_value))
