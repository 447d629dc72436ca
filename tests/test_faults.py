"""Replicas that fail, hand on or lose what they held, and start again cold: exact small traces.

Unit cost (every step 1 s) on two round-robin replicas: requests 0 and 1 arrive at 0 with 10 prompt
and 5 output tokens, one per replica. Each prefills in [0, 1] (first token at 1) and decodes one token
a second. Replica 0 failing at 2.5 s keeps its tokens at 1 and 2 and loses the step in progress.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import explicit_scenario, read_requests

from clustersim.config.faults import ColdStart
from clustersim.errors import ConfigError
from clustersim.lifecycle import cold_start_s
from clustersim.lifecyclestats import check_lifecycle, state_seconds
from clustersim.requeststats import RequestTotals
from clustersim.runner import RunResult

Run = Callable[[dict[str, Any]], RunResult]
TWO = [(0.0, 10, 5), (0.0, 10, 5)]
NO_COLD_START = {"storage_bandwidth_bytes_per_s": 1e15, "engine_init_s": 0.0}


def two_replicas(faults: dict[str, Any], requests: list[tuple[float, int, int]] = TWO, **extra: Any) -> dict[str, Any]:
    faults = {"kind": "scripted", "repair_s": None, "cold_start": NO_COLD_START, **faults}
    return explicit_scenario(requests, cluster={"num_replicas": 2}, faults=faults, **extra)


def lifecycle(result: RunResult) -> list[dict[str, Any]]:
    return pq.read_table(result.out_dir / "lifecycle.parquet").to_pylist()


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_retried_request_resumes_on_the_other_replica_after_its_prompt_and_tokens_are_prefilled_again(
    run_mapping: Run, fast_forward: bool
) -> None:
    result = run_mapping(
        two_replicas({"events": [{"at_s": 2.5, "replica": 0}]}, simulation={"fast_forward": fast_forward})
    )
    moved, stayed = read_requests(result)
    # replica 1's decode run is cut at its next boundary (3 s); its step [3, 4] prefills 10 + 2 tokens
    # with request 1's decode: request 0's third token comes at 4 (a 2 s gap), its fifth at 6
    assert (moved["replica"], moved["status"], moved["num_retries"]) == (1, "completed", 1)
    assert (moved["first_token_at_s"], moved["finished_at_s"], moved["max_itl_s"]) == (1.0, 6.0, 2.0)
    assert (stayed["finished_at_s"], stayed["num_retries"]) == (5.0, 0)
    steps = pq.read_table(result.out_dir / "steps.parquet").to_pylist()
    assert [(s["started_at_s"], s["num_prefill_tokens"]) for s in steps if s["replica"] == 1][-3:] == [
        (3.0, 12), (4.0, 0), (5.0, 0)
    ]  # fmt: skip
    assert max(s["started_at_s"] for s in steps if s["replica"] == 0) == 1.0  # the step [2, 3] was lost
    assert lifecycle(result) == [
        {"replica": 0, "at_s": 2.5, "event": "failed", "cause": "fault", "num_held": 1, "num_retried": 1, "num_lost": 0}
    ]
    faults = result.summary["faults"]
    assert (faults["num_failures"], faults["num_requests_retried"], faults["num_requests_lost"]) == (1, 1, 0)
    assert faults["down_replica_hours"] == pytest.approx(3.5 / 3600)  # 2.5 s to the makespan, 6 s
    assert faults["availability_frac"] == pytest.approx(8.5 / 12)


def test_lose_keeps_the_tokens_streamed_before_the_failure(run_mapping: Run) -> None:
    result = run_mapping(two_replicas({"events": [{"at_s": 2.5, "replica": 0}], "on_failure": "lose"}))
    lost, kept = read_requests(result)
    assert (lost["status"], lost["num_emitted_tokens"], lost["finished_at_s"]) == ("lost", 2, None)
    assert lost["reject_reason"] == "replica 0 failed at 2.500 s"
    assert kept["status"] == "completed"
    assert result.summary["num_requests"]["lost"] == 1
    assert result.summary["faults"]["num_requests_lost"] == 1


def test_a_failure_at_a_step_boundary_keeps_the_step_that_ended_then(run_mapping: Run) -> None:
    for fast_forward in (True, False):
        result = run_mapping(
            two_replicas(
                {"events": [{"at_s": 2.0, "replica": 0}], "on_failure": "lose"},
                simulation={"fast_forward": fast_forward},
            )
        )
        assert read_requests(result)[0]["num_emitted_tokens"] == 2  # the token at 2 s was made


def test_retries_run_out_and_a_lone_replica_has_nowhere_to_send(run_mapping: Run) -> None:
    result = run_mapping(two_replicas({"events": [{"at_s": 2.5, "replica": 0}], "max_retries": 0}))
    assert read_requests(result)[0]["reject_reason"] == "replica 0 failed at 2.500 s after 0 retries"
    both = [{"at_s": 1.5, "replica": 1}, {"at_s": 2.5, "replica": 0}]
    result = run_mapping(two_replicas({"events": both}))
    first, second = read_requests(result)
    assert second["status"] == first["status"] == "lost"  # request 1 moved to replica 0, which then failed
    assert first["reject_reason"].endswith("and no replica was up to retry on")
    assert (second["num_retries"], first["num_retries"]) == (1, 0)


def test_arrivals_while_every_replica_is_down_are_rejected_and_a_repaired_one_serves_again(run_mapping: Run) -> None:
    events = [{"at_s": 0.5, "replica": 0}, {"at_s": 0.5, "replica": 1, "repair_s": 2.0}]
    cold = {"storage_bandwidth_bytes_per_s": 1e15, "engine_init_s": 1.5}
    requests = [(1.0, 10, 2), (5.0, 10, 2), (5.0, 10, 2)]
    result = run_mapping(two_replicas({"events": events, "on_failure": "lose", "cold_start": cold}, requests))
    rows = read_requests(result)
    assert (rows[0]["status"], rows[0]["reject_reason"]) == ("rejected", "no replica was up")
    # replica 1: repaired at 2.5, up just after 4.0 (1.5 s of engine start-up, 16 GB of weights at
    # 1 PB/s): both later arrivals go there
    assert [(r["status"], r["replica"]) for r in rows[1:]] == [("completed", 1), ("completed", 1)]
    rows = lifecycle(result)
    assert [(row["replica"], row["at_s"], row["event"]) for row in rows[:3]] == [
        (0, 0.5, "failed"), (1, 0.5, "failed"), (1, 2.5, "starting")
    ]  # fmt: skip
    assert (rows[3]["event"], rows[3]["at_s"]) == ("up", pytest.approx(4.0 + 16.06e9 / 1e15, rel=1e-3))
    assert result.summary["faults"]["starting_replica_hours"] == pytest.approx(1.5 / 3600, rel=1e-3)


def test_random_failures_follow_the_seed_and_the_gpu_rate(run_mapping: Run) -> None:
    requests = [(float(t), 10, 2) for t in range(0, 600, 2)]
    mtbf = {"kind": "mtbf", "mtbf_gpu_hours": 0.01, "repair_s": 0.0}  # one failure per 36 s of up time
    runs = [run_mapping(two_replicas(mtbf, requests, seed=seed)) for seed in (1, 1, 2)]
    first, again, other = (lifecycle(r) for r in runs)
    assert first == again and first != other
    failures = sum(1 for row in first if row["event"] == "failed")
    # 2 replicas x ~600 s up / 36 s: about 33 expected (a Poisson count: 20-50 is beyond 2.5 sigma)
    assert 20 <= failures <= 50
    assert runs[0].summary["faults"]["num_failures"] == failures


def test_cold_start_reads_the_weights_then_starts_the_engine() -> None:
    assert cold_start_s(16e9, ColdStart(storage_bandwidth_bytes_per_s=4e9, engine_init_s=30.0)) == 34.0


def test_a_scripted_failure_of_a_replica_the_cluster_lacks_is_refused(run_mapping: Run) -> None:
    with pytest.raises(ConfigError, match=r"faults.events\[0\].replica: 2 is not a replica of this cluster"):
        run_mapping(two_replicas({"events": [{"at_s": 1.0, "replica": 2}]}))


def test_the_lifecycle_invariants_catch_a_request_that_went_missing(run_mapping: Run) -> None:
    result = run_mapping(two_replicas({"events": [{"at_s": 2.5, "replica": 0}]}))
    rows = lifecycle(result)
    totals = RequestTotals.of(result.out_dir / "requests.parquet")
    assert check_lifecycle(rows, totals) == []
    broken = [{**rows[0], "num_retried": 0}]
    problems = check_lifecycle(broken, totals)
    assert "a failure's held requests are not its retried plus its lost ones" in problems
    assert "failures handed on 0 requests, the requests record 1 retries" in problems


def test_state_seconds_splits_each_replica_over_its_states() -> None:
    rows = [
        {"replica": 0, "at_s": 1.0, "event": "failed"},
        {"replica": 0, "at_s": 3.0, "event": "starting"},
        {"replica": 0, "at_s": 4.0, "event": "up"},
    ]
    assert state_seconds(rows, 2, 10.0) == [
        {"up": 7.0, "starting": 1.0, "draining": 0.0, "stopped": 0.0, "down": 2.0},
        {"up": 10.0, "starting": 0.0, "draining": 0.0, "stopped": 0.0, "down": 0.0},
    ]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_until_a_failure_is_detected_the_router_sends_the_dead_replica_requests_it_holds(
    run_mapping: Run, fast_forward: bool
) -> None:
    # round robin: requests 0 and 2 to replica 0, 1 and 3 to replica 1. Replica 0 fails at 2.5 s; the
    # router learns of it at 4.5 s, so request 2 (arrived at 3 s) waits there too; both go to replica 1,
    # whose run is cut at 5 s: [5, 6] prefills 10 + 2 and 10 tokens; request 0's third token comes at 6
    # (a 4 s gap), its fifth at 8; request 2's first at 6 (TTFT 3 s), its last at 7
    failure = {"events": [{"at_s": 2.5, "replica": 0}], "detect_s": 2.0}
    result = run_mapping(
        two_replicas(failure, [(0.0, 10, 5), (0.0, 10, 5), (3.0, 10, 2), (3.0, 10, 2)],
                     simulation={"fast_forward": fast_forward})
    )  # fmt: skip
    rows = read_requests(result)
    assert [(r["replica"], r["num_retries"], r["first_token_at_s"], r["finished_at_s"]) for r in rows] == [
        (1, 1, 1.0, 8.0), (1, 0, 1.0, 5.0), (1, 1, 6.0, 7.0), (1, 0, 4.0, 5.0)
    ]  # fmt: skip
    assert rows[0]["max_itl_s"] == 4.0
    assert [(row["at_s"], row["event"], row["num_held"], row["num_retried"]) for row in lifecycle(result)] == [
        (2.5, "failed", 1, 0), (4.5, "detected", 1, 2)
    ]  # fmt: skip
    assert result.summary["faults"]["num_requests_held"] == 2


def test_a_failure_undetected_at_the_horizon_leaves_what_it_holds_unfinished(run_mapping: Run) -> None:
    failure = {"events": [{"at_s": 2.5, "replica": 0}], "detect_s": 100.0}
    result = run_mapping(two_replicas(failure, stop={"horizon_s": 10.0}))
    held, other = read_requests(result)
    assert (held["status"], held["num_emitted_tokens"], other["status"]) == ("unfinished", 2, "completed")
    assert [row["event"] for row in lifecycle(result)] == ["failed"]
