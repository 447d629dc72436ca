"""Autoscaling disaggregated pools: each pool's autoscaler starts and drains its own replicas, on the
load of that pool alone (the setup of tests/test_disagg.py: unit-cost steps of 1 s, a link moving 10
tokens' KV a second with a 0.5 s latency; a 10-token step budget, so a prefill replica computes one
10-token prompt a second)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import read_requests
from test_disagg import disaggregated, transfers

from clustersim.autoscale import SloMisses
from clustersim.config.faults import SloAutoscaler
from clustersim.printout import format_summary
from clustersim.runner import RunResult

Run = Callable[[dict[str, Any]], RunResult]
COLD = {"storage_bandwidth_bytes_per_s": 1e15, "engine_init_s": 2.0}  # 2 s (and 16 us of weights)


def pools(num_prefill: int, num_decode: int) -> dict[str, Any]:
    return {"groups": [{"count": num_prefill, "role": "prefill"}, {"count": num_decode, "role": "decode"}]}


def scaled(
    requests: list[tuple[float, int, int]], cluster: dict[str, Any], fast_forward: bool, **by_pool: Any
) -> dict[str, Any]:
    settings = {"kind": "queue_length", "interval_s": 1.0, "scale_down_window_s": 0.0, "cold_start": COLD}
    raw = disaggregated(requests, cluster=cluster, scheduler={"max_num_batched_tokens": 10})
    raw["disaggregation"]["autoscaler"] = {pool: {**settings, **scaler} for pool, scaler in by_pool.items()}
    raw["simulation"] = {"fast_forward": fast_forward}
    return raw


def moves(result: RunResult) -> list[tuple[int, float, str]]:
    rows = pq.read_table(result.out_dir / "lifecycle.parquet").to_pylist()
    return [(row["replica"], round(row["at_s"], 3), row["event"]) for row in rows]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_draining_prefill_replica_stops_when_the_last_kv_cache_it_kept_has_landed(
    run_mapping: Run, fast_forward: bool
) -> None:
    # Prefill replicas 0 and 1 (one up at first), decode replica 2. Four prompts at 0 s queue on
    # replica 0, prefilled one a second (hand-ons at 1, 2, 3, 4). Tick 1 s: 3 outstanding over one
    # replica, target 1 -> replica 1 starts (up at 3 s). The arrival at 3.5 s goes to it (the least
    # outstanding) and is prefilled [3.5, 4.5]. Tick 4 s: replica 0 holds no request (the last was
    # handed on at 4), replica 1 holds one: 1 over 2 -> drain replica 0. It still keeps request 3's
    # KV cache, pulled at the decode replica's plan at 4.5 and landed at 6.0: it stops then.
    raw = scaled([(0.0, 10, 2)] * 4 + [(3.5, 10, 2)], pools(2, 1), fast_forward,
                 prefill={"target_outstanding_per_replica": 1})  # fmt: skip
    raw["router"] = {"kind": "least_outstanding"}
    result = run_mapping(raw)
    assert moves(result) == [(1, 0.0, "stopped"), (1, 1.0, "starting"), (1, 3.0, "up"), (0, 4.0, "draining"),
                             (0, 6.0, "stopped")]  # fmt: skip
    rows = transfers(result)
    assert [(r["prefill_replica"], r["landed_at_s"], r["released_at_s"]) for r in rows] == [
        (0, 2.5, 2.5),
        (0, 3.5, 3.5),
        (0, 5.0, 5.0),
        (0, 6.0, 6.0),  # replica 0's last KV cache: it stops at 6.0
        (1, 7.0, 7.0),
    ]
    assert [r["finished_at_s"] for r in read_requests(result)] == [4.5, 5.5, 7.5, 8.5, 9.5]
    scaler = result.summary["autoscaler"]
    assert list(scaler["pools"]) == ["prefill"]  # the decode pool has no autoscaler: it stays up
    prefill = scaler["pools"]["prefill"]
    assert (prefill["num_starts"], prefill["num_drains"], prefill["num_stops"]) == (1, 1, 1)
    # over the 9.5 s makespan: replica 0 for 6 s, replica 1 from 1 s; the decode replica throughout
    assert prefill["mean_replicas_provisioned"] == pytest.approx((6 + 8.5) / 9.5)
    assert scaler["mean_replicas_provisioned"] == pytest.approx((6 + 8.5 + 9.5) / 9.5)
    assert scaler["fixed_pool_gpu_hours"] == pytest.approx(3 * 9.5 / 3600)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_the_decode_pool_scales_on_its_own_queue_and_routes_to_a_started_replica(
    run_mapping: Run, fast_forward: bool
) -> None:
    # Prefill replica 0; decode replicas 1 and 2 (one up at first). Three prompts at 0 s are handed
    # on at 1, 2 and 3 s, all to replica 1 (replica 2 is stopped, then starting). Tick 3 s: replica 1
    # holds two (request 0 seated, request 1 landing at 3.5) -> replica 2 starts, up at 5 s. The
    # arrival at 5.5 s is prefilled [5.5, 6.5] and goes to replica 2 (the most free KV), landed at
    # 8.0: first token [8, 9], finished 11. Tick 11 s: replica 2 is empty, replica 1 holds one ->
    # drain replica 2, which stops at once.
    raw = scaled([(0.0, 10, 6)] * 3 + [(5.5, 10, 3)], pools(1, 2), fast_forward,
                 decode={"target_outstanding_per_replica": 1})  # fmt: skip
    result = run_mapping(raw)
    assert moves(result) == [(2, 0.0, "stopped"), (2, 3.0, "starting"), (2, 5.0, "up"), (2, 11.0, "draining"),
                             (2, 11.0, "stopped")]  # fmt: skip
    rows = read_requests(result)
    assert [(r["replica"], r["first_token_at_s"], r["finished_at_s"]) for r in rows] == [
        (1, 3.5, 8.5),
        (1, 4.5, 9.5),
        (1, 6.5, 11.5),
        (2, 9.0, 11.0),
    ]
    assert [r["decode_replica"] for r in transfers(result)] == [1, 1, 1, 2]
    decode = result.summary["autoscaler"]["pools"]["decode"]
    assert decode["mean_replicas_provisioned"] == pytest.approx((11.5 + 8) / 11.5)
    lines = format_summary(result.summary).splitlines()
    assert any(line.startswith("  decode pool: 1 start, 1 stop; 1.70 replicas provisioned") for line in lines)


def test_slo_misses_count_ttft_and_tpot_targets() -> None:
    def completed(ttft_s: float, tpot_s: float, output_tokens: int = 5) -> Any:
        first = 1.0 + ttft_s
        return SimpleNamespace(status="completed", arrival_at_s=1.0, first_token_at_s=first,
                               finished_at_s=first + tpot_s * (output_tokens - 1), output_tokens=output_tokens)  # fmt: skip

    by_tpot = SloMisses(SloAutoscaler(kind="slo", tpot_s=0.05))
    assert not by_tpot.missed(completed(ttft_s=9.0, tpot_s=0.04))  # no TTFT target
    assert by_tpot.missed(completed(ttft_s=0.1, tpot_s=0.06))
    assert not by_tpot.missed(completed(ttft_s=0.1, tpot_s=9.0, output_tokens=1))  # one token: no TPOT
    both = SloMisses(SloAutoscaler(kind="slo", ttft_s=0.5, tpot_s=0.05))
    assert both.missed(completed(ttft_s=0.6, tpot_s=0.01)) and both.missed(completed(ttft_s=0.1, tpot_s=0.06))
    assert not both.missed(completed(ttft_s=0.5, tpot_s=0.05))  # at the targets: met
