"""The searches a plan runs for each option: the fewest replicas that meet the SLO, and the highest
rate that count sustains.

Both assume the verdict is monotone (more replicas, or less traffic, never hurt). Replicas: try
``start``, double until a count meets the SLO (or ``max`` does not: the option cannot), then
bisect between the last count that missed and the first that met; about ``2 log2(answer)``
evaluations instead of every count. Rate: from the target (which the answer meets), multiply by
1.5 until the SLO is missed (or ``max_factor``), then bisect until the bracket is within
``tolerance_frac``. An evaluation is one point of a sweep, every seed, and is remembered, so a
plan run again reuses all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RATE_STEP = 1.5


@dataclass(frozen=True)
class Evaluation:
    """One count at one rate factor, over every seed: the verdict, the stats row, or the error."""

    num_replicas: int
    rate_factor: float
    met: bool
    stats: dict[str, Any]
    error: str | None = None


Evaluate = Callable[[int, float], Evaluation]


@dataclass(frozen=True)
class ReplicaAnswer:
    """The fewest replicas meeting the SLO (None: none up to ``max``, or an error), and every evaluation."""

    num_replicas: int | None
    evaluations: list[Evaluation]
    reason: str | None = None


def fewest_replicas(evaluate: Evaluate, low: int, high: int, start: int) -> ReplicaAnswer:
    """Bracket then bisect the fewest replicas in ``[low, high]`` meeting the SLO at the target rate."""
    seen: list[Evaluation] = []

    def judge(count: int) -> Evaluation:
        result = evaluate(count, 1.0)
        seen.append(result)
        return result

    missed, met = low - 1, None
    count = start
    while met is None:
        result = judge(count)
        if result.error is not None:
            return ReplicaAnswer(None, seen, result.error)
        if result.met:
            met = count
        else:
            missed = count
            if count >= high:
                return ReplicaAnswer(None, seen, f"no count up to {high} replicas meets the SLO")
            count = min(high, count * 2)
    while met - missed > 1:
        middle = (met + missed) // 2
        result = judge(middle)
        if result.error is not None:
            return ReplicaAnswer(None, seen, result.error)
        if result.met:
            met = middle
        else:
            missed = middle
    return ReplicaAnswer(met, seen)


def highest_rate(
    evaluate: Evaluate, num_replicas: int, tolerance_frac: float, max_factor: float
) -> tuple[float, list[Evaluation]]:
    """The highest rate factor (relative to the target, which ``num_replicas`` meets) that still meets
    the SLO, to within ``tolerance_frac``; ``max_factor`` when even that meets it."""
    seen: list[Evaluation] = []
    met, missed = 1.0, None
    factor = 1.0
    while missed is None:
        factor = min(max_factor, factor * RATE_STEP)
        result = evaluate(num_replicas, factor)
        seen.append(result)
        if result.met and result.error is None:
            met = factor
            if factor >= max_factor:
                return met, seen
        else:
            missed = factor
    while (missed - met) / met > tolerance_frac:
        middle = (met + missed) / 2
        result = evaluate(num_replicas, middle)
        seen.append(result)
        if result.met and result.error is None:
            met = middle
        else:
            missed = middle
    return met, seen
