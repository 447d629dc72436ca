"""The autoscaler: HPA's rule and windows, cold starts, draining, exact small traces (unit cost: every
step 1 s; a request of 10 prompt and N output tokens prefills in its first second and then makes a
token a second)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import explicit_scenario, read_requests

from clustersim.autoscale import recommend
from clustersim.errors import ConfigError
from clustersim.runner import RunResult

Run = Callable[[dict[str, Any]], RunResult]
COLD = {"storage_bandwidth_bytes_per_s": 1e15, "engine_init_s": 2.0}  # 2 s (and 16 us of weights)


def scaled(requests: list[tuple[float, int, int]], **autoscaler: Any) -> dict[str, Any]:
    settings = {"kind": "queue_length", "interval_s": 1.0, "scale_down_window_s": 0.0, "cold_start": COLD}
    return explicit_scenario(
        requests, cluster={"num_replicas": 2}, router={"kind": "round_robin"}, autoscaler={**settings, **autoscaler}
    )


def moves(result: RunResult) -> list[tuple[int, float, str]]:
    rows = pq.read_table(result.out_dir / "lifecycle.parquet").to_pylist()
    return [(row["replica"], round(row["at_s"], 3), row["event"]) for row in rows]


def test_recommend_is_hpas_rule() -> None:
    assert recommend(2, 2, metric=30.0, target=10.0, tolerance_frac=0.1) == 6  # ceil(2 x 3)
    assert recommend(3, 3, metric=10.5, target=10.0, tolerance_frac=0.1) == 3  # within 10%: no change
    assert recommend(3, 4, metric=10.5, target=10.0, tolerance_frac=0.1) == 4  # ... counting the one starting
    assert recommend(4, 4, metric=2.0, target=10.0, tolerance_frac=0.1) == 1  # ceil(0.8)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_queue_starts_a_replica_cold_and_an_empty_one_stops(run_mapping: Run, fast_forward: bool) -> None:
    raw = scaled([(0.0, 10, 8)] * 4 + [(4.5, 10, 3)] * 2, target_outstanding_per_replica=1)
    result = run_mapping({**raw, "simulation": {"fast_forward": fast_forward}})
    # tick 1 s: 4 outstanding on the one replica up -> start replica 1 (up after its 2 s cold start);
    # tick 8 s: replica 0's four finished, 1 request left over 2 replicas -> drain the emptier, replica 1
    assert moves(result) == [(1, 0.0, "stopped"), (1, 1.0, "starting"), (1, 3.0, "up"), (1, 8.0, "draining"),
                             (1, 8.0, "stopped")]  # fmt: skip
    rows = read_requests(result)
    assert [r["replica"] for r in rows] == [0, 0, 0, 0, 1, 0]  # the 4.5 s arrivals, round robin over two up
    scaler = result.summary["autoscaler"]
    assert (scaler["num_starts"], scaler["num_drains"], scaler["num_stops"]) == (1, 1, 1)
    assert result.summary["makespan_s"] == 11.0
    # replica 0 for 11 s, replica 1 from 1 s (starting) to 8 s: 18 of 22 replica-seconds
    assert scaler["mean_replicas_provisioned"] == pytest.approx(18 / 11)
    assert scaler["provisioned_gpu_hours"] == pytest.approx(18 / 3600)
    assert scaler["gpu_hours_saved_frac"] == pytest.approx(4 / 22)


def test_a_draining_replica_finishes_what_it_holds_and_comes_back_without_a_cold_start(run_mapping: Run) -> None:
    # both up; tick 1 s: 1 outstanding each, target 2 -> one replica is enough: drain the highest index
    # of the equally loaded (replica 1, holding request 1 until 10 s)
    drained = run_mapping(scaled([(0.0, 10, 3), (0.0, 10, 10), (5.0, 10, 2)], target_outstanding_per_replica=2,
                                 initial_replicas=2))  # fmt: skip
    assert moves(drained) == [(1, 1.0, "draining"), (1, 10.0, "stopped")]
    assert [r["replica"] for r in read_requests(drained)] == [0, 1, 0]  # nothing new goes to a draining one
    # five more arrive at 2.5 s on replica 0: tick 3 s wants two replicas: replica 1 is up again at once
    back = run_mapping(scaled([(0.0, 10, 3), (0.0, 10, 10), *[(2.5, 10, 2)] * 5], target_outstanding_per_replica=2,
                              initial_replicas=2))  # fmt: skip
    assert moves(back)[:2] == [(1, 1.0, "draining"), (1, 3.0, "up")]


def test_the_scale_down_window_holds_the_highest_recommendation(run_mapping: Run) -> None:
    raw = scaled([(0.0, 10, 3), (0.0, 10, 10)], target_outstanding_per_replica=2, initial_replicas=2,
                 scale_down_window_s=5.0)  # fmt: skip
    # every tick recommends 1, but the starting pool (2, at time 0) stays in the 5 s window until the
    # tick at 6 s: the drain waits for it, and takes replica 0, empty since request 0 finished at 3 s
    assert moves(run_mapping(raw)) == [(0, 6.0, "draining"), (0, 6.0, "stopped")]


def test_autoscaler_bounds_are_checked(run_mapping: Run) -> None:
    with pytest.raises(ConfigError, match="min_replicas: 3 is more than the pool's 2 replicas"):
        run_mapping(scaled([(0.0, 10, 3)], target_outstanding_per_replica=2, min_replicas=3))
    with pytest.raises(ConfigError, match=r"initial_replicas: 3 is outside min_replicas..num_replicas \(1..2\)"):
        run_mapping(scaled([(0.0, 10, 3)], target_outstanding_per_replica=2, initial_replicas=3))


def test_slo_misses_are_the_recent_share_over_the_share_allowed() -> None:
    from clustersim.autoscale import SloMisses
    from clustersim.config.faults import SloAutoscaler
    from clustersim.workload.request import Request

    policy = SloMisses(SloAutoscaler(kind="slo", ttft_s=0.5, target_attainment_frac=0.9, window_s=10.0))
    assert policy.measure([], 0.0) is None  # nothing ended yet: nothing to judge
    for index, (ttft_s, status) in enumerate(
        [(0.1, "completed"), (0.9, "completed"), (0.0, "lost"), (0.2, "completed")]
    ):
        request = Request(index, "t", 0.0, 10, 2)
        request.status, request.first_token_at_s = status, ttft_s  # type: ignore[assignment]
        policy.heard(request, now_s=float(index))
    assert policy.measure([], 3.0) == pytest.approx((2 / 4) / 0.1)  # 2 of 4 missed, 10% allowed: 5x too many
    assert policy.measure([], 11.5) == pytest.approx((1 / 2) / 0.1)  # those ended before 1.5 s left the window


def test_an_slo_autoscaler_starts_a_replica_when_first_tokens_come_late(run_mapping: Run) -> None:
    # one replica up with two seats; four requests at 0 s and four at 2 s, three output tokens each:
    # pairs are served [0, 3], [3, 6], [6, 9], [9, 12], so first tokens come at 1, 4, 7 and 10 s
    raw = explicit_scenario([(0.0, 10, 3)] * 4 + [(2.0, 10, 3)] * 4, cluster={"num_replicas": 2},
                            scheduler={"max_num_seqs": 2}, router={"kind": "round_robin"},
                            autoscaler={"kind": "slo", "ttft_s": 1.5, "target_attainment_frac": 0.5, "window_s": 100,
                                        "interval_s": 1.0, "cold_start": COLD})  # fmt: skip
    result = run_mapping(raw)
    assert [r["first_token_at_s"] for r in read_requests(result)] == [1.0, 1.0, 4.0, 4.0, 7.0, 7.0, 10.0, 10.0]
    # tick 3 s: 0 of 2 missed (wants 0, held at min 1); tick 6 s: 2 of 4 missed, exactly the half allowed;
    # tick 9 s: 4 of 6 missed, (4/6) / 0.5 = 1.33 -> ceil(1 x 1.33) = 2: replica 1 starts, up at 11 s
    assert moves(result) == [(1, 0.0, "stopped"), (1, 9.0, "starting"), (1, 11.0, "up")]


def test_an_autoscaled_point_pays_for_the_gpu_hours_it_provisioned() -> None:
    from clustersim.sweeps.worker import provisioned_frac

    assert provisioned_frac({"autoscaler": {"gpu_hours_saved_frac": 0.25}}) == 0.75
    assert provisioned_frac({}) == 1.0  # a fixed pool pays for every GPU
