"""Closed-form durations of runs of identical decode steps (pure).

Between two events that change a replica's batch, consecutive steps are pure decodes of the
same ``n`` sequences whose total context grows by ``n`` each step. With the step duration
``fixed_s + sum(max(a + b*C, c + d*C))`` (a :class:`DecodeStepShape`), the duration of ``k``
such steps is a sum of arithmetic series, split where each piece's max switches sides.
"""

from __future__ import annotations

import math

from clustersim.cost.base import DecodeStepShape


def _affine_sum(intercept: float, slope: float, first_context: float, growth: float, j0: int, j1: int) -> float:
    """Sum over steps j in [j0, j1) of ``intercept + slope * (first_context + j * growth)``."""
    m = j1 - j0
    if m <= 0:
        return 0.0
    return m * (intercept + slope * first_context) + slope * growth * (j0 + j1 - 1) * m / 2.0


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


def run_duration_s(shape: DecodeStepShape, first_context_tokens: float, growth_tokens: float, num_steps: int) -> float:
    """Duration of ``num_steps`` decode steps; step j attends to ``first_context + j * growth`` tokens."""
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
