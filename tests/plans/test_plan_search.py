"""The plan's searches against hand-made monotone verdicts: the answer, and how few evaluations it takes."""

from __future__ import annotations

import pytest

from clustersim.plans.search import Evaluation, cheapest_split, fewest_replicas, highest_rate


def counting(needed: int, error_at: int | None = None) -> tuple[list[int], object]:
    asked: list[int] = []

    def evaluate(count: int, factor: float) -> Evaluation:
        assert factor == 1.0
        asked.append(count)
        error = "does not fit" if count == error_at else None
        return Evaluation(count, factor, count >= needed, {}, error)

    return asked, evaluate


@pytest.mark.parametrize(
    ("needed", "low", "high", "start", "answer", "asked"),
    [
        (1, 1, 64, 1, 1, [1]),
        (5, 1, 64, 1, 5, [1, 2, 4, 8, 6, 5]),
        (11, 1, 32, 2, 11, [2, 4, 8, 16, 12, 10, 11]),
        (3, 1, 64, 8, 3, [8, 4, 2, 3]),  # a start above the answer bisects down from low
        (64, 1, 64, 1, 64, [1, 2, 4, 8, 16, 32, 64, 48, 56, 60, 62, 63]),
        (40, 1, 50, 1, 40, [1, 2, 4, 8, 16, 32, 50, 41, 36, 38, 39, 40]),
    ],
)
def test_fewest_replicas_brackets_then_bisects(
    needed: int, low: int, high: int, start: int, answer: int, asked: list[int]
) -> None:
    seen, evaluate = counting(needed)
    result = fewest_replicas(evaluate, low, high, start)  # type: ignore[arg-type]
    assert result.num_replicas == answer and result.reason is None
    assert seen == asked
    assert [e.num_replicas for e in result.evaluations] == asked


def test_fewest_replicas_says_when_no_count_meets_the_slo() -> None:
    seen, evaluate = counting(100)
    result = fewest_replicas(evaluate, 1, 20, 1)  # type: ignore[arg-type]
    assert result.num_replicas is None and result.reason == "no count up to 20 replicas meets the SLO"
    assert seen == [1, 2, 4, 8, 16, 20]


def test_fewest_replicas_stops_at_an_error() -> None:
    seen, evaluate = counting(5, error_at=2)
    result = fewest_replicas(evaluate, 1, 20, 1)  # type: ignore[arg-type]
    assert result.num_replicas is None and result.reason == "does not fit" and seen == [1, 2]


def test_highest_rate_brackets_by_half_again_then_bisects_to_the_tolerance() -> None:
    factors: list[float] = []

    def evaluate(count: int, factor: float) -> Evaluation:
        factors.append(factor)
        return Evaluation(count, factor, factor <= 2.0, {})

    best, seen = highest_rate(evaluate, 4, tolerance_frac=0.05, max_factor=16.0)  # type: ignore[arg-type]
    assert factors[:2] == [1.5, 2.25]
    assert [e.rate_factor for e in seen] == factors
    assert 2.0 / 1.05 <= best <= 2.0
    # every factor that met is at most the answer; the bracket closed within 5%
    assert all(f <= best for f in factors if f <= 2.0)


def test_highest_rate_stops_at_the_cap() -> None:
    best, seen = highest_rate(lambda c, f: Evaluation(c, f, True, {}), 1, 0.05, 3.0)  # type: ignore[arg-type]
    assert best == 3.0 and [e.rate_factor for e in seen] == [1.5, 2.25, 3.0]


def split_counting(meets: object) -> tuple[list[tuple[int, int]], object]:
    asked: list[tuple[int, int]] = []

    def evaluate(p: int, d: int, factor: float) -> Evaluation:
        assert factor == 1.0
        asked.append((p, d))
        return Evaluation(p + d, factor, meets(p, d), {}, None, (p, d))  # type: ignore[operator]

    return asked, evaluate


def brute_force(meets: object, high: int, prefill_gpus: int, decode_gpus: int) -> tuple[int, int] | None:
    splits = [(p, d) for p in range(1, high) for d in range(1, high - p + 1) if meets(p, d)]  # type: ignore[operator]
    return min(splits, key=lambda s: (s[0] * prefill_gpus + s[1] * decode_gpus, s[0])) if splits else None


FRONTIERS = [
    lambda p, d: p >= 2 and d >= 3,  # a corner: 2 + 3
    lambda p, d: p * d >= 12,  # a hyperbola: 3 x 4 (or 4 x 3, more prefill: the tie goes to fewer)
    lambda p, d: p >= 1 and d >= 9,  # decode-bound
    lambda p, d: p >= 7 and d >= 1,  # prefill-bound
    lambda p, d: 2 * p + d >= 14 and d >= 2,  # prefill worth two decode replicas
    lambda p, d: False,  # nothing meets it
]


@pytest.mark.parametrize("meets", FRONTIERS)
@pytest.mark.parametrize(("prefill_gpus", "decode_gpus"), [(1, 1), (2, 1), (1, 4)])
def test_cheapest_split_finds_what_every_split_tried_would(meets: object, prefill_gpus: int, decode_gpus: int) -> None:
    asked, evaluate = split_counting(meets)
    result = cheapest_split(evaluate, 16, prefill_gpus, decode_gpus)  # type: ignore[arg-type]
    expected = brute_force(meets, 16, prefill_gpus, decode_gpus)
    assert result.split == expected
    assert result.num_replicas == (sum(expected) if expected else None)
    assert len(asked) == len(set(asked))  # never the same split twice
    assert len(asked) < 16 * 15 // 2  # fewer than every split (of 16 replicas at most)


def test_cheapest_split_walks_the_frontier_once() -> None:
    # p * d >= 12 with at most 16 replicas: p = 1 tries its most (15) and bisects to 12; each next p
    # bisects below the previous answer (p = 2: 6, p = 3: 4, p = 4: 3, p = 5: 3); it stops before
    # p = 6 (6 + 1 GPUs >= the 7 of 3 + 4)
    asked, evaluate = split_counting(lambda p, d: p * d >= 12)
    result = cheapest_split(evaluate, 16, 1, 1)  # type: ignore[arg-type]
    assert result.split == (3, 4)
    assert asked[:5] == [(1, 15), (1, 7), (1, 11), (1, 13), (1, 12)]
    assert max(p for p, _ in asked) == 5


def test_a_prefill_count_whose_most_decode_replicas_miss_costs_one_evaluation() -> None:
    asked, evaluate = split_counting(lambda p, d: p >= 3 and d >= 2)
    result = cheapest_split(evaluate, 10, 1, 1)  # type: ignore[arg-type]
    assert result.split == (3, 2)
    assert asked[:2] == [(1, 9), (2, 8)]


def test_a_split_is_weighed_by_price_not_only_by_gpus() -> None:
    # p + d >= 6 meets it; prefill replicas cost 3 and decode replicas 1: (1, 5) costs 8, (5, 1) costs 16
    _, evaluate = split_counting(lambda p, d: p + d >= 6)
    result = cheapest_split(evaluate, 8, 3.0, 1.0)  # type: ignore[arg-type]
    assert result.split == (1, 5)
