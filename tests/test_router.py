"""Routing policies: decisions on hand-built replica states, and exact routing in tiny scenarios."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from conftest import explicit_scenario, read_requests

from clustersim.config.routing import AffinityRouter
from clustersim.router import (
    Affinity,
    LeastKV,
    LeastOutstanding,
    PowerOfTwo,
    RandomChoice,
    RoundRobin,
    VllmDP,
    router_rng,
)
from clustersim.workload.arrivals import tenant_rng
from clustersim.workload.request import Request


@dataclass
class View:
    num_outstanding: int = 0
    num_used_kv_blocks: int = 0
    num_kv_blocks: int = 100
    num_waiting: int = 0


def views(*loads: int) -> list[View]:
    return [View(load) for load in loads]


def request(session_id: int = -1, prefix: tuple[int, ...] = (), tenant: str = "t") -> Request:
    return Request(0, tenant, 0.0, 10, 10, session_id=session_id, prefix_hash_ids=prefix)


class FakeRng:
    """Returns the given arrays from ``integers``, in turn (stands in for numpy's Generator)."""

    def __init__(self, *arrays: list[int]) -> None:
        self.arrays = [np.array(a) for a in arrays]

    def integers(self, low: int, high: int, size: int) -> Any:
        values = self.arrays.pop(0)
        assert values.min() >= low and values.max() < high
        return values


# ----------------------------------------------------------------------------- decisions
def test_round_robin_cycles():
    router = RoundRobin()
    assert [router.choose(request(), views(0, 0, 0)) for _ in range(5)] == [0, 1, 2, 0, 1]


@pytest.mark.parametrize(("loads", "expected"), [((3, 1, 2), 1), ((2, 0, 0), 1), ((0, 0, 0), 0), ((5,), 0)])
def test_least_outstanding_takes_the_lowest_index_on_ties(loads, expected):
    assert LeastOutstanding().choose(request(), views(*loads)) == expected


@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        (((5, 0), (2, 2)), 0),  # (outstanding, waiting): scores 5 and 4 x 2 + 0 = 8
        (((5, 1), (2, 2)), 0),  # 4 + 4 = 8 against 8: the lower index
        (((6, 1), (2, 2)), 1),  # 4 + 5 = 9 against 8
        (((3, 3), (3, 0), (3, 0)), 1),  # 12, 3, 3: the first of the tie
        (((0, 0),), 0),
    ],
)
def test_vllm_dp_scores_waiting_four_times_running(loads, expected):
    replicas = [View(num_outstanding=outstanding, num_waiting=waiting) for outstanding, waiting in loads]
    assert VllmDP().choose(request(), replicas) == expected


def test_least_kv_breaks_ties_by_outstanding_then_index():
    replicas = [View(0, 50, 100), View(9, 10, 100), View(2, 20, 200), View(1, 1, 10)]
    assert LeastKV().choose(request(), replicas) == 3  # 10%, 10%, 10%: one outstanding beats 2 and 9
    replicas[3].num_used_kv_blocks = 2
    assert LeastKV().choose(request(), replicas) == 2


def test_power_of_two_draws_distinct_pairs_and_takes_the_less_loaded():
    """First draws 2, 0, 1; second draws 1, 0, 1 over the other two replicas (shifted past the first):
    pairs (2, 1), (0, 1), (1, 2). Loads 4, 1, 1: a tie keeps the first drawn (2), then 1 beats 0, then a tie -> 1."""
    router = PowerOfTwo(FakeRng([2, 0, 1], [1, 0, 1]))  # type: ignore[arg-type]
    replicas = views(4, 1, 1)
    assert [router.choose(request(), replicas) for _ in range(3)] == [2, 1, 1]


def test_power_of_two_pairs_are_uniform_over_distinct_replicas():
    router = PowerOfTwo(np.random.default_rng(0))
    router._refill(4)
    pairs = Counter(router._pairs)
    assert all(a != b for a, b in pairs)
    assert len(pairs) == 12 and min(pairs.values()) > 4096 / 12 * 0.8


def test_random_router_is_uniform_and_seeded():
    def picks(seed: int) -> list[int]:
        router = RandomChoice(router_rng(seed))
        return [router.choose(request(), views(0, 0, 0, 0)) for _ in range(8000)]

    counts = np.bincount(picks(1), minlength=4)
    assert counts == pytest.approx([2000] * 4, rel=0.08)
    assert picks(1) == picks(1) and picks(1) != picks(2)


def test_router_stream_is_not_a_tenant_stream():
    assert router_rng(0).random() != tenant_rng(0, "router", 0).random()


def test_affinity_keeps_sessions_and_prefixes_together():
    router = Affinity(AffinityRouter(kind="affinity", prefix_blocks=2))
    replicas = views(0, 0, 0)
    assert router.choose(request(session_id=1), replicas) == 0  # new key: least outstanding
    replicas[0].num_outstanding = 1
    assert router.choose(request(session_id=2), replicas) == 1
    replicas[1].num_outstanding = 1
    assert router.choose(request(session_id=1), replicas) == 0  # home, although replica 2 is idle
    assert router.choose(request(session_id=1, tenant="other"), replicas) == 2  # sessions are per tenant
    assert router.choose(request(prefix=(0, 7, 8)), replicas) == 2
    replicas[2].num_outstanding = 1
    assert router.choose(request(prefix=(0, 7, 99)), replicas) == 2  # same first two blocks
    assert router.choose(request(prefix=(0, 8)), replicas) == 0  # another prefix: least outstanding
    assert router.choose(request(), replicas) == 0  # no key: least outstanding


@pytest.mark.parametrize(
    ("home_load", "min_load", "stays"),
    [
        (8, 0, True),  # 8 <= 0 + 8
        (9, 0, False),  # 9 > 0 + 8 and 9 > 1.5 x 0
        (20, 12, True),  # 20 <= 12 + 8
        (30, 21, True),  # 30 > 21 + 8 but 30 <= 1.5 x 21
        (33, 21, False),  # 33 > 29 and 33 > 31.5
    ],
)
def test_affinity_overload_rule(home_load, min_load, stays):
    router = Affinity(AffinityRouter(kind="affinity"))  # overload_abs_requests 8, overload_rel 1.5
    replicas = views(0, 0)
    assert router.choose(request(session_id=5), replicas) == 0
    replicas[0].num_outstanding, replicas[1].num_outstanding = home_load, min_load
    assert router.choose(request(session_id=5), replicas) == (0 if stays else 1)
    replicas[0].num_outstanding = replicas[1].num_outstanding = 0
    assert router.choose(request(session_id=5), replicas) == (0 if stays else 1)  # the key moved with it


# ----------------------------------------------------------------------------- exact routing in runs
def routed(run_mapping, requests: list[tuple[float, int, int]], router: dict[str, Any], num_replicas: int = 2):
    raw = explicit_scenario(requests, router=router, cluster={"num_replicas": num_replicas})
    return [r["replica"] for r in read_requests(run_mapping(raw))]


def test_round_robin_run(run_mapping):
    assert routed(run_mapping, [(0, 10, 2)] * 5, {"kind": "round_robin"}) == [0, 1, 0, 1, 0]


def test_least_outstanding_run(run_mapping):
    """r0 (2 tokens) -> 0; r1 (10 tokens, loads 1 vs 0) -> 1. At 5, r0 has ended (at 2), r1 has not:
    loads (0, 1) -> r2 to 0; (1, 1) -> r3 to 0 (lowest index); (2, 1) -> r4 to 1."""
    requests = [(0, 10, 2), (0, 10, 10), (5, 10, 2), (5, 10, 2), (5, 10, 2)]
    assert routed(run_mapping, requests, {"kind": "least_outstanding"}) == [0, 1, 0, 0, 1]


def test_vllm_dp_run(run_mapping):
    """As in test_least_outstanding_run up to r2, which goes to 0 and waits there until replica 0 next
    plans: r3 sees scores (4 x 1, 1 running) -> 1; r4 sees (4, 4 + 1) -> 0."""
    requests = [(0, 10, 2), (0, 10, 10), (5, 10, 2), (5, 10, 2), (5, 10, 2)]
    assert routed(run_mapping, requests, {"kind": "vllm_dp"}) == [0, 1, 0, 1, 0]


def test_least_kv_run(run_mapping):
    """r0 (160-token prompt: 10 of 1000 blocks) -> 0. At 0.5 replica 0 holds 11 blocks, replica 1 none:
    r1 and r2 (arriving together, before replica 1 admits r1) -> 1 (0 blocks; 1 outstanding vs 1, KV decides)."""
    requests = [(0, 160, 5), (0.5, 16, 5), (0.5, 16, 5), (8, 16, 1)]
    # at 8 both are idle and empty: tie -> replica 0
    assert routed(run_mapping, requests, {"kind": "least_kv"}) == [0, 1, 1, 0]


def test_power_of_two_run_matches_the_router_stream(run_mapping):
    """Replicas idle (all requests end before the next arrives): the first of each drawn pair wins the tie."""
    rng = router_rng(0)  # explicit_scenario's seed is the default 0
    first = rng.integers(0, 3, size=4096)[:6].tolist()
    assert routed(run_mapping, [(10.0 * i, 10, 2) for i in range(6)], {"kind": "power_of_two"}, 3) == first


def test_random_run_matches_the_router_stream(run_mapping):
    expected = router_rng(0).integers(0, 3, size=4096)[:6].tolist()
    assert routed(run_mapping, [(0, 10, 2)] * 6, {"kind": "random"}, 3) == expected


def test_affinity_run_with_a_session_column(run_mapping, tmp_path):
    """Sessions 7, 8, 7, 9, 8 arrive together on 2 replicas: 7 -> 0 (new key, tie -> lowest index);
    8 -> 1 (new, loads 1 vs 0); 7 -> 0 (its home); 9 -> 1 (new, loads 2 vs 1); 8 -> 1 (its home)."""
    trace = tmp_path / "s.csv"
    trace.write_text("t,p,o,s\n0,10,50,7\n0,10,50,8\n0,10,50,7\n0,10,50,9\n0,10,50,8\n")
    raw = explicit_scenario([], router={"kind": "affinity"}, cluster={"num_replicas": 2})
    raw["workload"]["tenants"][0]["arrival"] = {
        "kind": "trace",
        "path": str(trace),
        "format": "csv",
        "columns": {"arrival_at_s": "t", "prompt_tokens": "p", "output_tokens": "o", "session_id": "s"},
    }
    assert [r["replica"] for r in read_requests(run_mapping(raw))] == [0, 1, 0, 1, 1]
