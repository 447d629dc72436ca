"""Closed-form durations of runs of identical decode steps (pure).

Between two events that change a replica's batch, consecutive steps are pure decodes of the
same ``n`` sequences whose total context grows by ``n`` each step. With the step duration
``fixed_s + sum(max(a + b*C, c + d*C))`` (a :class:`DecodeStepShape`), the duration of ``k``
such steps is a sum of arithmetic series, split where each piece's max switches sides. A shape
with a floor (host time an engine overlaps with the GPU) takes the floor for the leading steps
whose kernel time is below it, found by solving for the crossing and checked step by step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from clustersim.cost.base import DecodeStepShape


def _affine_sum(intercept: float, slope: float, first_context: float, growth: float, j0: int, j1: int) -> float:
    """Sum over steps j in [j0, j1) of ``intercept + slope * (first_context + j * growth)``."""
    m = j1 - j0
    if m <= 0:
        return 0.0
    return m * (intercept + slope * first_context) + slope * growth * (j0 + j1 - 1) * m / 2.0


def _piece_split(
    piece: tuple[float, float, float, float], first_context: float, growth: float, num_steps: int
) -> tuple[int, bool]:
    """Where a piece's max switches sides within a run: ``(split, first_side_leads)``.

    Steps ``[0, split)`` take the leading side (``(a, b)`` if ``first_side_leads`` else ``(c, d)``),
    steps ``[split, num_steps)`` the other.
    """
    a, b, c, d = piece
    du = b - d  # slope, per unit of context, of (first - second)
    u0 = (a - c) + du * first_context  # (first - second) at step 0
    if du == 0.0 or growth == 0.0:
        return num_steps, u0 >= 0.0
    crossing = -u0 / (du * growth)  # step at which the two sides are equal (may be +-inf for tiny slopes)
    crossing = min(max(crossing, -1.0), float(num_steps))
    if du > 0:  # second side first, then the first side from the crossing on
        return min(max(math.ceil(crossing), 0), num_steps), False
    return min(max(math.floor(crossing) + 1, 0), num_steps), True


def _piece_sum(piece: tuple[float, float, float, float], first_context: float, growth: float, num_steps: int) -> float:
    a, b, c, d = piece
    du = b - d  # slope, per unit of context, of (first - second)
    u0 = (a - c) + du * first_context  # (first - second) at step 0
    if du == 0.0 or growth == 0.0:
        first_wins = u0 >= 0.0
        intercept, slope = (a, b) if first_wins else (c, d)
        return _affine_sum(intercept, slope, first_context, growth, 0, num_steps)
    crossing = -u0 / (du * growth)  # step at which the two sides are equal (may be +-inf for tiny slopes)
    crossing = min(max(crossing, -1.0), float(num_steps))
    if du > 0:  # second side first, then the first side from the crossing on
        split = min(max(math.ceil(crossing), 0), num_steps)
        return _affine_sum(c, d, first_context, growth, 0, split) + _affine_sum(
            a, b, first_context, growth, split, num_steps
        )
    split = min(max(math.floor(crossing) + 1, 0), num_steps)
    return _affine_sum(a, b, first_context, growth, 0, split) + _affine_sum(
        c, d, first_context, growth, split, num_steps
    )


def floor_steps(shape: DecodeStepShape, first_context_tokens: float, growth_tokens: float, num_steps: int) -> int:
    """How many leading steps of a run last the shape's floor: those whose kernel time is below it
    (it never decreases along a run, so they come first). 0 without a floor."""
    floor_s = shape.floor_s
    if floor_s <= 0.0 or num_steps <= 0 or shape.kernels_s(first_context_tokens) >= floor_s:
        return 0

    def below(j: int) -> bool:
        return shape.kernels_s(first_context_tokens + growth_tokens * j) < floor_s

    if growth_tokens <= 0.0 or below(num_steps - 1):
        return num_steps
    guess = num_steps - 1
    if len(shape.pieces) == 1:  # solve each side of the one piece for the crossing, then check
        a, b, c, d = shape.pieces[0]
        need = floor_s - shape.fixed_s
        crossing = min((need - a) / b if b > 0 else math.inf, (need - c) / d if d > 0 else math.inf)
        guess = min(max(math.ceil((crossing - first_context_tokens) / growth_tokens), 1), num_steps - 1)
    low, high = 0, num_steps - 1  # below(low), not below(high): the answer is the first j not below
    if below(guess):
        low = guess
    else:
        high = guess
        if below(guess - 1):
            return guess
    while high - low > 1:
        middle = (low + high) // 2
        if below(middle):
            low = middle
        else:
            high = middle
    return high


def run_duration_s(shape: DecodeStepShape, first_context_tokens: float, growth_tokens: float, num_steps: int) -> float:
    """Duration of ``num_steps`` decode steps; step j attends to ``first_context + j * growth`` tokens."""
    if num_steps <= 0:
        return 0.0
    if shape.floor_s > 0.0:
        floored = floor_steps(shape, first_context_tokens, growth_tokens, num_steps)
        if floored:
            rest = num_steps - floored
            rest_s = _kernels_run_s(shape, first_context_tokens + growth_tokens * floored, growth_tokens, rest)
            return floored * shape.floor_s + rest_s
    return _kernels_run_s(shape, first_context_tokens, growth_tokens, num_steps)


def _kernels_run_s(shape: DecodeStepShape, first_context_tokens: float, growth_tokens: float, num_steps: int) -> float:
    if num_steps <= 0:
        return 0.0
    total = num_steps * shape.fixed_s
    for piece in shape.pieces:
        total += _piece_sum(piece, first_context_tokens, growth_tokens, num_steps)
    return total


def steps_done_by(
    shape: DecodeStepShape, first_context_tokens: float, growth_tokens: float, max_steps: int, elapsed_s: float
) -> int:
    """The number of whole steps of a run (at most ``max_steps``) that have ended ``elapsed_s`` after it started.

    Starts from the estimate ``elapsed / mean step`` and corrects it; step durations vary little
    within a run, so this takes two or three evaluations of the closed form.
    """
    if max_steps <= 0:
        return 0
    total_s = run_duration_s(shape, first_context_tokens, growth_tokens, max_steps)
    if total_s <= elapsed_s:
        return max_steps
    done = min(max_steps, int(elapsed_s * max_steps / total_s)) if total_s > 0 else 0
    while done > 0 and run_duration_s(shape, first_context_tokens, growth_tokens, done) > elapsed_s:
        done -= 1
    while done + 1 < max_steps and run_duration_s(shape, first_context_tokens, growth_tokens, done + 1) <= elapsed_s:
        done += 1
    return done


# ----------------------------------------------------------------------------- time integrals over a run
def step_ranges(
    shape: DecodeStepShape, first_context_tokens: float, growth_tokens: float, num_steps: int
) -> list[tuple[int, int, float, float]]:
    """Step ``j`` of the run lasts the sum, over the ranges ``(j0, j1, alpha, beta)`` with
    ``j0 <= j < j1``, of ``alpha + beta * j`` (the same split as :func:`run_duration_s`)."""
    floored = floor_steps(shape, first_context_tokens, growth_tokens, num_steps)
    if floored:  # the floor, then the kernel ranges of the rest, shifted by the floored steps
        rest = _kernel_ranges(shape, first_context_tokens + growth_tokens * floored, growth_tokens, num_steps - floored)
        shifted = [(j0 + floored, j1 + floored, alpha - beta * floored, beta) for j0, j1, alpha, beta in rest]
        return [(0, floored, shape.floor_s, 0.0), *shifted]
    return _kernel_ranges(shape, first_context_tokens, growth_tokens, num_steps)


def _kernel_ranges(
    shape: DecodeStepShape, first_context_tokens: float, growth_tokens: float, num_steps: int
) -> list[tuple[int, int, float, float]]:
    ranges = [(0, num_steps, shape.fixed_s, 0.0)]
    for piece in shape.pieces:
        a, b, c, d = piece
        split, first_leads = _piece_split(piece, first_context_tokens, growth_tokens, num_steps)
        lead, follow = ((a, b), (c, d)) if first_leads else ((c, d), (a, b))
        for (intercept, slope), j0, j1 in ((lead, 0, split), (follow, split, num_steps)):
            if j1 > j0:
                ranges.append((j0, j1, intercept + slope * first_context_tokens, slope * growth_tokens))
    return ranges


def boundary_time_sum(ranges: list[tuple[int, int, float, float]], first: int, stride: int, count: int) -> float:
    """Sum of ``T(s)`` over ``s = first + p * stride`` (p < count), where ``T(s)`` is the time from the
    run's start to the end of its ``s``-th step (``T(0) = 0``), in closed form over ``ranges``.

    ``p_lo, p_hi``: how many of the ``s`` are <= ``j0``, ``j1``; ``sum_s, sum_s2``: the sums of ``s``
    and ``s**2`` over ``p`` in ``[p_lo, p_hi)`` (inline: this runs for every block residue of every run).
    """
    total = 0.0
    for j0, j1, alpha, beta in ranges:
        # T_range(s) = sum over j in [j0, min(s, j1)) of alpha + beta*j: 0 up to j0, quadratic, then flat
        p_lo = 0 if j0 < first else min(count, (j0 - first) // stride + 1)
        p_hi = 0 if j1 < first else min(count, (j1 - first) // stride + 1)
        if p_hi > p_lo:
            m = p_hi - p_lo
            sum_p = (p_lo + p_hi - 1) * m / 2.0
            sum_p2 = ((p_hi - 1) * p_hi * (2 * p_hi - 1) - (p_lo - 1) * p_lo * (2 * p_lo - 1)) / 6.0
            sum_s = m * first + stride * sum_p
            sum_s2 = m * first * first + 2.0 * first * stride * sum_p + stride * stride * sum_p2
            total += alpha * (sum_s - m * j0) + 0.5 * beta * (sum_s2 - sum_s - m * (j0 - 1) * j0)
        if count > p_hi:
            total += (count - p_hi) * (alpha * (j1 - j0) + 0.5 * beta * ((j1 - 1) * j1 - (j0 - 1) * j0))
    return total


def run_integrals(
    shape: DecodeStepShape,
    first_context_tokens: float,
    growth_tokens: float,
    num_steps: int,
    blocks: Sequence[int],
) -> tuple[float, float, float]:
    """Time integrals a ledger row of a run needs, in closed form: ``(T, sum_j dur_j * j, sum_j dur_j * G_j)``.

    ``dur_j`` is step j's duration, ``T`` their sum, and ``G_j`` the blocks taken at steps 1..j, where
    step ``s`` takes ``blocks[(s - 1) % len(blocks)]`` blocks (``blocks`` lists steps 1, 2, ... of one
    period, or all of them if the run is shorter). Both weighted sums are 0 for a single step. The
    cost is O(min(steps, period)), not O(steps).
    """
    if num_steps <= 1:
        return run_duration_s(shape, first_context_tokens, growth_tokens, num_steps), 0.0, 0.0
    period = len(blocks)
    # sum_j dur_j * j = (K - 1) T(K) - sum_{s=1}^{K-1} T(s);  sum_j dur_j * G_j = sum_{s=1}^{K-1} g(s) (T(K) - T(s))
    if num_steps <= period + 1:  # each boundary once, step by step
        fixed_s, pieces, floor_s = shape.fixed_s, shape.pieces, shape.floor_s
        time_s = index_sum = weighted_s = 0.0
        grown = 0
        for j in range(num_steps):
            context = first_context_tokens + growth_tokens * j
            duration_s = fixed_s
            for a, b, c, d in pieces:
                first, second = a + b * context, c + d * context
                duration_s += first if first >= second else second
            if duration_s < floor_s:
                duration_s = floor_s
            time_s += duration_s
            index_sum += j * duration_s
            if j:
                grown += blocks[j - 1]
                weighted_s += grown * duration_s
        return time_s, index_sum, weighted_s
    total_s = run_duration_s(shape, first_context_tokens, growth_tokens, num_steps)
    ranges = step_ranges(shape, first_context_tokens, growth_tokens, num_steps)
    index_sum = (num_steps - 1) * total_s - boundary_time_sum(ranges, 1, 1, num_steps - 1)
    growth_sum = 0.0
    for first in range(1, period + 1):  # the boundaries s = first (mod period), summed in closed form
        taken = blocks[first - 1]
        if not taken or first > num_steps - 1:
            continue
        count = (num_steps - 1 - first) // period + 1
        growth_sum += taken * (count * total_s - boundary_time_sum(ranges, first, period, count))
    return total_s, index_sum, growth_sum


# ----------------------------------------------------------------------------- one anchor's run, many lengths
_NEVER = 1 << 62  # a split or floor crossing no run reaches


class RunClock:
    """:func:`run_duration_s` of one run start for any number of steps, bit for bit, cheaper per call.

    Everything that does not depend on the number of steps is worked out once: where the steps
    leave the floor (the first step whose kernel time reaches it; kernel time never decreases
    along a run), and per piece the step where its max switches sides and each side's affine
    terms. A length then costs the two affine sums per piece, with the same operations in the same
    order as :func:`run_duration_s`. Shapes outside the model's domain (a negative slope) fall back
    to :func:`run_duration_s` itself.
    """

    __slots__ = ("_args", "_fallback", "_first_unfloored", "_fixed_s", "_floor_s", "_pieces")

    def __init__(self, shape: DecodeStepShape, first_context_tokens: int, growth_tokens: int) -> None:
        self._args = (shape, first_context_tokens, growth_tokens)
        self._fallback = growth_tokens < 0
        for _, b, _, d in shape.pieces:
            if b < 0 or d < 0:
                self._fallback = True
        self._fixed_s, self._floor_s = shape.fixed_s, shape.floor_s
        first_unfloored = 0
        if not self._fallback and shape.floor_s > 0.0:
            first_unfloored = _first_unfloored(shape, first_context_tokens, growth_tokens)
        self._first_unfloored = first_unfloored
        context = first_context_tokens + growth_tokens * first_unfloored if first_unfloored < _NEVER else 0
        self._pieces = [_piece_terms(piece, context, growth_tokens) for piece in shape.pieces]

    def duration_s(self, num_steps: int) -> float:
        """``run_duration_s(shape, first_context_tokens, growth_tokens, num_steps)``."""
        if self._fallback:
            return run_duration_s(*self._args, num_steps)
        if num_steps <= 0:
            return 0.0
        floored = self._first_unfloored
        if floored:
            if num_steps <= floored:
                return num_steps * self._floor_s + 0.0
            return floored * self._floor_s + self._kernels_s(num_steps - floored)
        return self._kernels_s(num_steps)

    def _kernels_s(self, m: int) -> float:
        total = m * self._fixed_s
        for split, lead_base, lead_step, follow_base, follow_step in self._pieces:
            if split < 0:  # one side throughout
                total += m * lead_base + lead_step * (m - 1) * m / 2.0
                continue
            s = split if split < m else m
            lead = s * lead_base + lead_step * (s - 1) * s / 2.0 if s > 0 else 0.0
            rest = m - s
            follow = rest * follow_base + follow_step * (s + m - 1) * rest / 2.0 if rest > 0 else 0.0
            total += lead + follow
        return total


def _first_unfloored(shape: DecodeStepShape, first_context_tokens: int, growth_tokens: int) -> int:
    """The first step of a run whose kernel time is not below the floor (:data:`_NEVER`: none):
    what :func:`floor_steps` returns for runs longer than it."""
    floor_s, kernels_s = shape.floor_s, shape.kernels_s
    if kernels_s(first_context_tokens) >= floor_s:
        return 0
    if growth_tokens <= 0:
        return _NEVER
    high = 1
    if len(shape.pieces) == 1:  # start from the crossing of the one piece's sides with the floor
        a, b, c, d = shape.pieces[0]
        need = floor_s - shape.fixed_s
        crossing = min((need - a) / b if b > 0 else math.inf, (need - c) / d if d > 0 else math.inf)
        if crossing == math.inf:
            return _NEVER
        high = max(1, math.ceil((crossing - first_context_tokens) / growth_tokens))
        high = min(high, _NEVER >> 1)
        reached = kernels_s(first_context_tokens + growth_tokens * high) >= floor_s
        if reached and (high == 1 or kernels_s(first_context_tokens + growth_tokens * (high - 1)) < floor_s):
            return high
    while kernels_s(first_context_tokens + growth_tokens * high) < floor_s:
        if high >= _NEVER >> 1:
            return _NEVER
        high *= 2
    low = 0  # below the floor at low, not at high
    while high - low > 1:
        middle = (low + high) // 2
        if kernels_s(first_context_tokens + growth_tokens * middle) < floor_s:
            low = middle
        else:
            high = middle
    return high


def _piece_terms(
    piece: tuple[float, float, float, float], first_context: int, growth: int
) -> tuple[int, float, float, float, float]:
    """One piece of a run from ``first_context``: ``(split, lead base, lead step, follow base, follow
    step)``: steps before ``split`` take the leading side, the rest the other (as :func:`_piece_sum`);
    ``split`` -1: the leading side throughout."""
    a, b, c, d = piece
    du = b - d
    u0 = (a - c) + du * first_context
    if du == 0.0 or growth == 0.0:
        intercept, slope = (a, b) if u0 >= 0.0 else (c, d)
        base, step = intercept + slope * first_context, slope * growth
        return -1, base, step, base, step
    crossing = -u0 / (du * growth)
    if du > 0:  # second side first
        split = _NEVER if crossing >= _NEVER else max(math.ceil(max(crossing, -1.0)), 0)
        lead, follow = (c, d), (a, b)
    else:
        split = _NEVER if crossing >= _NEVER else max(math.floor(max(crossing, -1.0)) + 1, 0)
        lead, follow = (a, b), (c, d)
    return (
        split,
        lead[0] + lead[1] * first_context,
        lead[1] * growth,
        follow[0] + follow[1] * first_context,
        follow[1] * growth,
    )
