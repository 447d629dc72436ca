"""Inter-token latency: every gap between two consecutive tokens of a request, binned exactly (pure).

A decoding sequence's tokens come at the ends of the replica's decode steps, so after its first
decode step its gaps are the replica's *decode gaps* ``G[D] = end(D) - end(D - 1)`` (a paused
decode, such as a vLLM V0 prefill-only step, lies inside one). Its first gap after a first token,
a recompute or a swap-in (a *joining* gap) is its own. Inside a run of decode steps timed by one
anchor, step ``j`` of the anchor lasts ``shape.duration_s(C0 + n * j)``; an anchored step is taken
to end at its start plus that formula (not at the anchor's closed-form sum, which differs only by
rounding), in both modes, so a step right after another has exactly the formula as its gap and the
fast path can count a whole run's gaps without visiting them one by one: the formula is
non-decreasing in ``j`` (every slope is a cost per context token), so each bin's steps form one
range, found from a guess on the chord and a bisection.

Bins are ``BINS_PER_OCTAVE`` per power of two (each under 0.8% wide), found from the float's
exponent and mantissa exactly; each bin keeps its count, sum, least and greatest gap, so a bin that
holds a single value (e.g. constant step times) gives it exactly, and percentiles interpolate
within a bin between its least and greatest gap.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Iterator

from clustersim.cost.base import DecodeStepShape
from clustersim.cost.runs import run_duration_s
from clustersim.workload.request import GapKey

BINS_PER_OCTAVE = 128
ZERO_BIN = -(2**31)  # gaps of 0 s (never seen in practice) and below


def bin_of(gap_s: float) -> int:
    """The bin of a gap: monotone in the gap, exact (no logarithm)."""
    if gap_s <= 0.0:
        return ZERO_BIN
    mantissa, exponent = math.frexp(gap_s)  # gap = mantissa * 2**exponent, mantissa in [0.5, 1)
    return exponent * BINS_PER_OCTAVE + int((mantissa - 0.5) * (2 * BINS_PER_OCTAVE))


def bin_edges_s(index: int) -> tuple[float, float]:
    """The gaps ``[lower, upper)`` that fall in bin ``index``."""
    if index == ZERO_BIN:
        return 0.0, 0.0
    exponent, step = divmod(index, BINS_PER_OCTAVE)
    lower = math.ldexp(0.5 + step / (2 * BINS_PER_OCTAVE), exponent)
    upper = math.ldexp(0.5 + (step + 1) / (2 * BINS_PER_OCTAVE), exponent)
    return lower, upper


# ``(bin, num_gaps, sum_s, min_s, max_s)``: consecutive gaps that share a bin (a plain tuple: built
# on the hot path, where a NamedTuple's constructor would cost more than the rest)
BinRange = tuple[int, int, float, float, float]


def anchored_ranges(
    shape: DecodeStepShape,
    first_context_tokens: int,
    num_seqs: int,
    j_first: int,
    j_last: int,
    total_s: float | None = None,
) -> list[BinRange]:
    """The gaps of anchor steps ``j_first..j_last`` (step ``j`` lasts ``shape.duration_s(C0 + n*j)``),
    grouped by bin: a few evaluations per bin touched, not one per step. ``total_s``: their sum,
    if known (else each bin's is summed in closed form)."""

    duration_s = shape.duration_s
    first_value = duration_s(first_context_tokens + num_seqs * j_first)
    first_bin = bin_of(first_value)
    if j_last == j_first:
        return [(first_bin, 1, first_value, first_value, first_value)]
    last_value = duration_s(first_context_tokens + num_seqs * j_last)
    last_bin = bin_of(last_value)
    if last_bin == first_bin:  # the usual case: the whole range in one bin
        count = j_last - j_first + 1
        if total_s is None:
            total_s = run_duration_s(shape, first_context_tokens + num_seqs * j_first, num_seqs, count)
        return [(first_bin, count, total_s, first_value, last_value)]

    def duration(j: int) -> float:
        return duration_s(first_context_tokens + num_seqs * j)

    ranges: list[BinRange] = []
    j, value, index = j_first, first_value, first_bin
    summed_s = 0.0
    while index != last_bin:
        upper_s = bin_edges_s(index)[1]  # in this bin exactly while below its upper edge
        end = _last_below(duration, upper_s, j, j_last, value, last_value)
        count = end - j + 1
        sum_s = value if count == 1 else run_duration_s(shape, first_context_tokens + num_seqs * j, num_seqs, count)
        ranges.append((index, count, sum_s, value, duration(end) if count > 1 else value))
        summed_s += sum_s
        j = end + 1
        value = duration(j)
        index = bin_of(value)
    count = j_last - j + 1
    if total_s is not None:
        sum_s = total_s - summed_s
    else:
        sum_s = run_duration_s(shape, first_context_tokens + num_seqs * j, num_seqs, count)
    ranges.append((index, count, sum_s, value, last_value))
    return ranges


def _last_below(
    duration: Callable[[int], float], upper_s: float, low: int, high: int, low_s: float, high_s: float
) -> int:
    """The last step in ``[low, high)`` lasting less than ``upper_s``, given that ``low`` does and
    ``high`` does not (durations non-decreasing): guessed on the chord, then bisected."""
    guess = low + int((upper_s - low_s) / (high_s - low_s) * (high - low)) if high_s > low_s else low
    guess = min(max(guess, low), high - 1)
    if duration(guess) < upper_s:
        low = guess
        if duration(guess + 1) >= upper_s:
            return guess
        low = guess + 1
    else:
        high = guess
    while high - low > 1:
        middle = (low + high) // 2
        if duration(middle) < upper_s:
            low = middle
        else:
            high = middle
    return low


class GapHistogram:
    """Binned gaps per key ``(tenant, measured)``: ``{key: {bin: [count, sum_s, min_s, max_s]}}``."""

    def __init__(self) -> None:
        self.keys: dict[GapKey, dict[int, list[float]]] = {}

    def add(self, key: GapKey, ranges: Iterable[BinRange], weight: int = 1) -> None:
        """Count each range's gaps ``weight`` times (one per sequence that saw them) under ``key``."""
        bins = self.keys.get(key)
        if bins is None:
            bins = self.keys[key] = {}
        for index, count, total_s, low_s, high_s in ranges:
            entry = bins.get(index)
            if entry is None:
                bins[index] = [count * weight, total_s * weight, low_s, high_s]
            else:
                entry[0] += count * weight
                entry[1] += total_s * weight
                if low_s < entry[2]:
                    entry[2] = low_s
                if high_s > entry[3]:
                    entry[3] = high_s

    def add_gap(self, key: GapKey, gap_s: float, weight: int = 1) -> None:
        """Count one gap ``weight`` times under ``key`` (:meth:`add` of a single gap, without the tuples)."""
        bins = self.keys.get(key)
        if bins is None:
            bins = self.keys[key] = {}
        if gap_s > 0.0:  # bin_of, inline (once per step)
            mantissa, exponent = math.frexp(gap_s)
            index = exponent * BINS_PER_OCTAVE + int((mantissa - 0.5) * (2 * BINS_PER_OCTAVE))
        else:
            index = ZERO_BIN
        entry = bins.get(index)
        if entry is None:
            bins[index] = [weight, gap_s * weight, gap_s, gap_s]
            return
        entry[0] += weight
        entry[1] += gap_s * weight
        if gap_s < entry[2]:
            entry[2] = gap_s
        elif gap_s > entry[3]:
            entry[3] = gap_s

    def rows(self) -> Iterator[tuple[str, bool, int, int, float, float, float]]:
        """``(tenant, measured, bin, count, sum_s, min_s, max_s)`` sorted by tenant, measured and bin."""
        for key in sorted(self.keys):
            for index, (count, total_s, low_s, high_s) in sorted(self.keys[key].items()):
                yield key[0], key[1], index, int(count), total_s, low_s, high_s


class SuffixMax:
    """The greatest decode gap from a decode index on, over the segments logged so far.

    Segments ``(first index, greatest gap)`` arrive in index order; only those greater than every
    later one are kept (a stack with decreasing gaps), so a query is one bisection.
    """

    def __init__(self) -> None:
        self.starts: list[int] = []
        self._values: list[float] = []

    def push(self, start_index: int, value_s: float) -> None:
        starts, values = self.starts, self._values
        while values and values[-1] <= value_s:
            values.pop()
            starts.pop()
        starts.append(start_index)
        values.append(value_s)

    def since(self, start_index: int) -> float:
        """The greatest gap of the segments starting at ``start_index`` or later (-inf if none)."""
        position = bisect.bisect_left(self.starts, start_index)
        return self._values[position] if position < len(self._values) else -math.inf

    def drop_before(self, start_index: int) -> None:
        """Forget segments no query will reach (every live sequence joined at ``start_index`` or later)."""
        position = bisect.bisect_left(self.starts, start_index)
        if position:
            del self.starts[:position]
            del self._values[:position]


class GapBins:
    """One tenant's (or the whole run's) gap bins, in bin order: what ``itl.parquet`` holds."""

    def __init__(self, bins: dict[int, list[float]]) -> None:
        order = sorted(bins)
        self.counts = [int(bins[b][0]) for b in order]
        self.sums_s = [bins[b][1] for b in order]
        self.mins_s = [bins[b][2] for b in order]
        self.maxs_s = [bins[b][3] for b in order]
        self.num_gaps = sum(self.counts)
        self._cumulative = list(_running_sum(self.counts))

    @classmethod
    def merged(cls, parts: Iterable[dict[int, list[float]]]) -> GapBins:
        """The bins of several tenants together."""
        total: dict[int, list[float]] = {}
        for bins in parts:
            for index, (count, sum_s, low_s, high_s) in bins.items():
                entry = total.get(index)
                if entry is None:
                    total[index] = [count, sum_s, low_s, high_s]
                else:
                    total[index] = [entry[0] + count, entry[1] + sum_s, min(entry[2], low_s), max(entry[3], high_s)]
        return cls(total)

    def value(self, rank: int) -> float:
        """The ``rank``-th smallest gap (0-based): exact where its bin holds one value, else spread
        evenly between the bin's least and greatest gap."""
        position = bisect.bisect_right(self._cumulative, rank)
        before = self._cumulative[position - 1] if position else 0
        count, low_s, high_s = self.counts[position], self.mins_s[position], self.maxs_s[position]
        if count == 1 or high_s == low_s:
            return low_s
        return low_s + (high_s - low_s) * (rank - before) / (count - 1)

    def percentile(self, p: float) -> float:
        """The ``p``-th percentile, interpolated between ranks as ``numpy.percentile`` does."""
        rank = (self.num_gaps - 1) * p / 100.0
        below = math.floor(rank)
        low = self.value(below)
        if rank == below:
            return low
        return low + (rank - below) * (self.value(below + 1) - low)

    def summary(self, percentiles: Iterable[int]) -> dict[str, float | int | None]:
        """``mean``, the percentiles, ``max`` and ``num_gaps`` (values None without a gap)."""
        if not self.num_gaps:
            return {"mean": None, **{f"p{p}": None for p in percentiles}, "max": None, "num_gaps": 0}
        result: dict[str, float | int | None] = {"mean": math.fsum(self.sums_s) / self.num_gaps}
        for p in percentiles:
            result[f"p{p}"] = self.percentile(p)
        result["max"] = max(self.maxs_s)
        result["num_gaps"] = self.num_gaps
        return result


def _running_sum(values: Iterable[int]) -> Iterator[int]:
    total = 0
    for value in values:
        total += value
        yield total
