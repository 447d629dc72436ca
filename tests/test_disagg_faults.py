"""Failures of disaggregated pools: exact small traces of what each kind of failure does to the
requests whose KV caches are on their way (the setup of tests/test_disagg.py: unit-cost steps of 1 s,
a link moving 10 tokens' KV a second with a 0.5 s latency; replica 0 prefills, the others decode)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import read_requests
from test_disagg import disaggregated, moments, transfers

from clustersim.runner import RunResult

Run = Callable[[dict[str, Any]], RunResult]
TWO_DECODERS = {"groups": [{"count": 1, "role": "prefill"}, {"count": 2, "role": "decode"}]}


def failing(replica: int, at_s: float, on_failure: str = "retry") -> dict[str, Any]:
    return {"kind": "scripted", "events": [{"at_s": at_s, "replica": replica}], "on_failure": on_failure,
            "repair_s": None}  # fmt: skip


def lifecycle(result: RunResult) -> list[tuple[Any, ...]]:
    rows = pq.read_table(result.out_dir / "lifecycle.parquet").to_pylist()
    return [(r["replica"], r["at_s"], r["event"], r["num_held"], r["num_retried"], r["num_lost"]) for r in rows]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_decode_replica_failing_mid_transfer_sends_the_request_to_another(
    run_mapping: Run, fast_forward: bool
) -> None:
    # prefill [0, 1]; pulled by replica 1 at 1, on the wire [1, 3]. Replica 1 fails at 2: the KV
    # cache is still on the prefill replica, so the request goes to replica 2, which pulls it at 2;
    # the prefill replica's link is busy until 3 (the dropped transfer), so wire [3, 5], landed
    # 5.5; its last prompt token [5.5, 6.5] gives its first token, then 7.5 and 8.5.
    raw = disaggregated([(0.0, 20, 3)], cluster=TWO_DECODERS, faults=failing(1, 2.0))
    raw["simulation"] = {"fast_forward": fast_forward}
    result = run_mapping(raw)
    (request,) = read_requests(result)
    assert (request["replica"], request["first_token_at_s"], request["finished_at_s"]) == (2, 6.5, 8.5)
    assert request["num_retries"] == 1
    (row,) = transfers(result)
    assert (row["decode_replica"], moments(row)) == (2, (1.0, 2.0, 3.0, 5.5))
    assert lifecycle(result) == [(1, 2.0, "failed", 1, 1, 0)]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_prefill_replica_failing_mid_transfer_has_the_decode_replica_compute_the_prompt(
    run_mapping: Run, fast_forward: bool
) -> None:
    # the KV cache is lost at 2 with the prefill replica: the decode replica gives back the blocks it
    # held for it and computes the 20-token prompt itself [2, 3] (vLLM's recompute policy for a failed
    # KV load): first token at 3, then 4 and 5. Nothing the failed replica held was waiting.
    raw = disaggregated([(0.0, 20, 3)], faults=failing(0, 2.0))
    raw["simulation"] = {"fast_forward": fast_forward}
    result = run_mapping(raw)
    (request,) = read_requests(result)
    assert (request["replica"], request["first_token_at_s"], request["finished_at_s"]) == (1, 3.0, 5.0)
    assert request["num_retries"] == 0
    (row,) = transfers(result)
    assert moments(row)[:3] == (1.0, 1.0, 1.0) and math.isnan(row["landed_at_s"])
    assert (row["decode_replica"], row["kv_lost_at_s"]) == (1, 2.0)
    assert lifecycle(result) == [(0, 2.0, "failed", 0, 0, 0)]
    assert result.summary["disaggregation"]["num_kv_lost"] == 1


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_prefill_replica_failing_while_the_request_waits_for_its_pull(run_mapping: Run, fast_forward: bool) -> None:
    # 24 one-token blocks a side. Request 0 (20 prompt, 3 out) lands at 3.5 and decodes until 6.5,
    # holding 20-22 blocks on the decode replica. Request 1 (10 prompt, 1 out) arrives at 3.6,
    # prefills [3.6, 4.6] and waits at the decode replica for 10 free blocks. The prefill replica
    # fails at 5: request 1's KV cache is gone, so it leaves the queue and comes back as a prompt
    # to compute there, admitted once request 0 has finished: [6.5, 7.5], its only token at 7.5.
    kv = {"block_size_tokens": 1, "num_blocks": 24, "watermark_frac": 0.0}
    raw = disaggregated([(0.0, 20, 3), (3.6, 10, 1)], kv=kv, faults=failing(0, 5.0))
    raw["simulation"] = {"fast_forward": fast_forward}
    result = run_mapping(raw)
    first, second = read_requests(result)
    assert first["finished_at_s"] == 6.5
    assert (second["replica"], second["first_token_at_s"]) == (1, 7.5)
    rows = transfers(result)
    assert [(r["request_id"], r["kv_lost_at_s"]) for r in rows if not math.isnan(r["kv_lost_at_s"])] == [(1, 5.0)]
    assert math.isnan(rows[-1]["pulled_at_s"])


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_decode_replica_failing_after_the_landing_sends_the_request_back_to_the_prefill_pool(
    run_mapping: Run, fast_forward: bool
) -> None:
    # landed on replica 1 at 3.5, first token at 4.5; replica 1 fails at 5 and its KV cache with it.
    # The prefill replica recomputes the prompt and the token made (21 tokens) [5, 6]; the decode
    # router sends it to replica 2: wire [6, 8.1], landed 8.6; its last prompt token [8.6, 9.6]
    # makes its second token, the third at 10.6. Its first token stays the one at 4.5.
    raw = disaggregated([(0.0, 20, 3)], cluster=TWO_DECODERS, faults=failing(1, 5.0))
    raw["simulation"] = {"fast_forward": fast_forward}
    result = run_mapping(raw)
    (request,) = read_requests(result)
    assert (request["replica"], request["first_token_at_s"]) == (2, 4.5)
    assert request["finished_at_s"] == pytest.approx(10.6)
    assert request["num_retries"] == 1
    rows = transfers(result)
    assert [(r["decode_replica"], r["kv_tokens"]) for r in rows] == [(1, 20), (2, 21)]
    assert moments(rows[1]) == pytest.approx((6.0, 6.0, 6.0, 8.6))
    assert lifecycle(result) == [(1, 5.0, "failed", 1, 1, 0)]


def test_lose_lets_the_prefill_replica_free_what_the_lost_request_waited_with(run_mapping: Run) -> None:
    # as the first test, but requests held by a failed replica are lost: the KV cache it was pulling
    # is let go on the prefill side too (the run's invariants check every block)
    result = run_mapping(disaggregated([(0.0, 20, 3)], cluster=TWO_DECODERS, faults=failing(1, 2.0, "lose")))
    (request,) = read_requests(result)
    assert request["status"] == "lost"
    (row,) = transfers(result)
    assert math.isnan(row["landed_at_s"]) and math.isnan(row["kv_lost_at_s"])
    assert row["released_at_s"] == 2.0
    assert lifecycle(result) == [(1, 2.0, "failed", 1, 0, 1)]


def test_a_request_awaiting_a_pull_with_no_decode_replica_up_is_lost_and_its_kv_let_go(run_mapping: Run) -> None:
    result = run_mapping(disaggregated([(0.0, 20, 3)], faults=failing(1, 2.0)))
    (request,) = read_requests(result)
    assert (request["status"], request["num_retries"]) == ("lost", 0)
    assert "no replica was up to retry on" in request["reject_reason"]
