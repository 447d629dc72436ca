"""The searches a plan runs for each option: the fewest replicas that meet the SLO, and the highest
rate that count sustains.

Both assume the verdict is monotone (more replicas, or less traffic, never hurt). Replicas: try
``start``, double until a count meets the SLO (or ``max`` does not: the option cannot), then
bisect between the last count that missed and the first that met; about ``2 log2(answer)``
evaluations instead of every count. Rate: from the target (which the answer meets), multiply by
1.5 until the SLO is missed (or ``max_factor``), then bisect until the bracket is within
``tolerance_frac``. An evaluation is one point of a sweep, every seed, and is remembered, so a
plan run again reuses all of them.

A disaggregated option has two counts, prefill and decode replicas, and the answer is the cheapest
split (:func:`cheapest_split`: by price per hour, or by GPUs where a price is unknown): the least
decode count meeting the SLO can only fall as the prefill count grows, so the search walks that
frontier once, prefill count by prefill count, bisecting each time below the decode count the
previous one needed.
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
    split: tuple[int, int] | None = None  # (prefill, decode) replicas of a disaggregated option


Evaluate = Callable[[int, float], Evaluation]
SplitEvaluate = Callable[[int, int, float], Evaluation]  # (prefill replicas, decode replicas, rate factor)


@dataclass(frozen=True)
class ReplicaAnswer:
    """The fewest replicas meeting the SLO (None: none up to ``max``, or an error), and every evaluation."""

    num_replicas: int | None
    evaluations: list[Evaluation]
    reason: str | None = None
    split: tuple[int, int] | None = None  # the answer's (prefill, decode) replicas, when disaggregated


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


def cheapest_split(evaluate: SplitEvaluate, high: int, prefill_weight: float, decode_weight: float) -> ReplicaAnswer:
    """The (prefill, decode) split of the least weight meeting the SLO at the target rate, with at most
    ``high`` replicas in all; ties go to the fewer prefill replicas. A replica's weight is its price
    per hour (or its GPUs where a price is unknown).

    For each prefill count p (from 1): whether the most decode replicas it may have meet the SLO
    (if not, more prefill replicas may be what it needs), then the least decode count meeting it,
    bisecting below that most, which for every p after the first is the least count the previous
    p needed (it meets at p too: more prefill never hurts). It stops once p prefill replicas and one
    decode replica weigh as much as the best split found.
    """
    seen: list[Evaluation] = []
    judged: dict[tuple[int, int], Evaluation] = {}

    def judge(p: int, d: int) -> Evaluation:
        if (p, d) not in judged:
            judged[p, d] = evaluate(p, d, 1.0)
            seen.append(judged[p, d])
        return judged[p, d]

    best: tuple[float, int, int] | None = None  # (weight, prefill, decode)
    cap: int | None = None  # the least decode count the previous prefill count needed
    for p in range(1, high):
        if best is not None and p * prefill_weight + decode_weight >= best[0]:
            break
        met = high - p if cap is None else min(cap, high - p)
        if met < 1:
            break
        if met != cap:  # not known to meet it: try it
            result = judge(p, met)
            if result.error is not None:
                return ReplicaAnswer(None, seen, result.error)
            if not result.met:
                continue
        missed = 0
        while met - missed > 1:
            middle = (met + missed) // 2
            result = judge(p, middle)
            if result.error is not None:
                return ReplicaAnswer(None, seen, result.error)
            met, missed = (middle, missed) if result.met else (met, middle)
        cap = met
        weight = p * prefill_weight + met * decode_weight
        if best is None or weight < best[0]:
            best = (weight, p, met)
    if best is None:
        return ReplicaAnswer(None, seen, f"no split of up to {high} replicas meets the SLO")
    _, p, d = best
    answer = judge(p, d)  # evaluated already unless the frontier reached it through a previous count
    if answer.error is not None or not answer.met:
        return ReplicaAnswer(None, seen, answer.error or f"{p} prefill + {d} decode replicas missed the SLO")
    return ReplicaAnswer(p + d, seen, split=(p, d))
