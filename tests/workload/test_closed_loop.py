"""Closed-loop users: the next request a think time after the previous one ends (exact traces, Little's law)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from conftest import read_requests

from clustersim.errors import ClusterSimError


def closed_loop(num_users: int, think: dict[str, Any], max_requests: int, **arrival: Any) -> dict[str, Any]:
    return {
        "name": "closed",
        "workload": {
            "tenants": [
                {
                    "name": "users",
                    "arrival": {"kind": "closed_loop", "num_users": num_users, "think_time": think, **arrival},
                    "prompt_tokens": {"kind": "fixed", "tokens": 10},
                    "output_tokens": {"kind": "fixed", "tokens": 3},
                }
            ]
        },
        "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {"policy": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 4096},
        "kv": {"num_blocks": 1000},
        "cost": {"kind": "unit", "step_time_s": 1.0},
        "stop": {"max_requests": max_requests},
    }


def test_two_users_exact_trace(run_mapping):
    """Unit steps, 3 output tokens: a request alone takes 3 steps; each user thinks 1 s after its answer.

    user 0 sends at 0 (done 3), user 1 at 1 (ramp-up 2 s / 2 users; it shares steps 1-2, done 4);
    user 0 again at 3 + 1 = 4 (done 7), user 1 at 4 + 1 = 5 (done 8); then 8 (done 11) and 9 (done 12).
    """
    rows = read_requests(run_mapping(closed_loop(2, {"kind": "fixed", "time_s": 1.0}, 6, ramp_up_s=2.0)))
    assert [r["arrival_at_s"] for r in rows] == [0, 1, 4, 5, 8, 9]
    assert [r["finished_at_s"] for r in rows] == [3, 4, 7, 8, 11, 12]
    assert [r["status"] for r in rows] == ["completed"] * 6


def test_zero_think_time_resends_at_the_instant_the_answer_ends(run_mapping):
    rows = read_requests(run_mapping(closed_loop(1, {"kind": "fixed", "time_s": 0.0}, 3)))
    assert [(r["arrival_at_s"], r["first_scheduled_at_s"], r["finished_at_s"]) for r in rows] == [
        (0, 0, 3),
        (3, 3, 6),
        (6, 6, 9),
    ]


@pytest.mark.parametrize("arrival", ["closed_loop", "poisson"])
def test_lengths_in_sequence_go_to_requests_in_the_order_they_are_sent(run_mapping, arrival):
    raw = closed_loop(3, {"kind": "fixed", "time_s": 0.5}, 7, ramp_up_s=0.3)
    if arrival == "poisson":
        raw["workload"]["tenants"][0]["arrival"] = {"kind": "poisson", "rate_per_s": 2.0}
    raw["workload"]["tenants"][0]["prompt_tokens"] = {"kind": "empirical", "values": [11, 22, 33], "order": "sequence"}
    rows = sorted(read_requests(run_mapping(raw)), key=lambda r: (r["arrival_at_s"], r["request_id"]))
    assert [r["prompt_tokens"] for r in rows] == [11, 22, 33, 11, 22, 33, 11]


def test_rejected_requests_end_too_and_the_user_carries_on(run_mapping):
    raw = closed_loop(1, {"kind": "fixed", "time_s": 2.0}, 3)
    raw["workload"]["tenants"][0]["prompt_tokens"] = {"kind": "empirical", "values": [10, 5000]}
    rows = read_requests(run_mapping(raw))
    assert len(rows) == 3
    for before, after in itertools.pairwise(rows):
        end = before["finished_at_s"] if before["status"] == "completed" else before["arrival_at_s"]
        assert after["arrival_at_s"] == end + 2.0


def test_a_user_whose_requests_are_all_rejected_with_no_think_time_is_reported(run_mapping):
    raw = closed_loop(1, {"kind": "fixed", "time_s": 0.0}, 100_000)
    raw["workload"]["tenants"][0]["prompt_tokens"] = {"kind": "fixed", "tokens": 5000}
    with pytest.raises(ClusterSimError) as info:
        run_mapping(raw)
    message = str(info.value)  # the replica's reject reason in the middle
    assert message.startswith(
        "tenant 'users': user 0 had 1000 requests in a row rejected at 0 s with no think time "
        "(prompt of 5000 tokens exceeds max_num_batched_tokens 4096"
    )
    assert message.endswith("); time cannot advance")


def test_closed_system_obeys_littles_law(run_mapping):
    """N users = throughput x (mean response time + mean think time)."""
    raw = closed_loop(8, {"kind": "exponential", "mean_s": 20.0}, 4000)
    raw["workload"]["tenants"][0]["output_tokens"] = {"kind": "uniform", "min_tokens": 1, "max_tokens": 19}
    rows = read_requests(run_mapping(raw))
    ends = [r["finished_at_s"] for r in rows]
    response = sum(r["finished_at_s"] - r["arrival_at_s"] for r in rows) / len(rows)
    span = max(ends)  # users are busy or thinking from time 0 to the end
    throughput = len(rows) / span
    assert throughput * (response + 20.0) == pytest.approx(8, rel=0.03)


def test_users_are_sessions(run_mapping):
    """With the affinity router every user stays on the replica its first request went to.

    4 users, 3 replicas, unit steps, 3 output tokens, 0.5 s think time. At 0 the new sessions go to
    the least-outstanding replica: users 0, 1, 2, 3 -> replicas 0, 1, 2, 0. All finish at 3 (replica
    0's two first, in admission order, then replica 1's, then replica 2's), so from then on the users
    send in the order 0, 3, 1, 2 every 3.5 s, each to its own replica.
    """
    raw = closed_loop(4, {"kind": "fixed", "time_s": 0.5}, 40)
    raw["cluster"]["num_replicas"] = 3
    raw["router"] = {"kind": "affinity"}
    rows = read_requests(run_mapping(raw))
    assert [r["replica"] for r in rows] == [0, 1, 2, 0] + [0, 0, 1, 2] * 9
    assert [r["arrival_at_s"] for r in rows[4:8]] == [3.5] * 4


def _start_every_user(traffic: Any, tenant: Any, tenant_index: int) -> None:
    """The plain rule the shortcut must equal: a process for every user."""
    from clustersim.workload import source

    draws = source.closed_loop_draws(tenant, traffic.seed, traffic.data.get(tenant.name))
    arrival = tenant.arrival
    for user in range(arrival.num_users):
        start_s = user * arrival.ramp_up_s / arrival.num_users
        traffic.env.process(
            source.closed_loop_user(
                traffic.env, tenant.name, user, start_s, draws, traffic.budget, traffic.dispatch, traffic.completions
            )
        )


@pytest.mark.parametrize("ramp_up_s", [0.0, 7.0])
def test_users_beyond_max_requests_are_not_started_and_nothing_changes(run_mapping, monkeypatch, ramp_up_s):
    # 60 users, 20 requests: only the first 20 users can send one (users start in order, each first
    # takes one from the budget), so not starting the rest changes no request
    from clustersim.workload import source

    think = {"kind": "exponential", "mean_s": 2.0}
    raw = closed_loop(60, think, 20, ramp_up_s=ramp_up_s)
    raw["workload"]["tenants"][0]["output_tokens"] = {"kind": "uniform", "min_tokens": 1, "max_tokens": 9}
    shortcut = run_mapping(raw)
    monkeypatch.setitem(source.ARRIVALS._entries, "closed_loop", _start_every_user)
    plain = run_mapping(raw)
    assert read_requests(shortcut) == read_requests(plain)
    assert shortcut.summary["simulator"]["num_events"] < plain.summary["simulator"]["num_events"]


def test_a_million_users_for_twenty_requests_start_twenty(run_mapping):
    result = run_mapping(closed_loop(1_000_000, {"kind": "fixed", "time_s": 1.0}, 20))
    assert result.summary["num_requests"]["completed"] == 20
    assert result.summary["simulator"]["num_events"] < 500


def test_the_clients_work_on_each_ended_request_is_done_on_one_thread(run_mapping):
    """Unit steps: two users' 10-token requests end together at 3 s; the client's work on each is
    0.5 s + 0.1 s per prompt token (1.5 s), one after the other: user 0 sends again at 4.5, user 1 at 6
    (which waits for the step boundary at 6.5)."""
    raw = closed_loop(2, {"kind": "fixed", "time_s": 0.0}, 4,
                      client_time_per_request_s=0.5, client_time_per_prompt_token_s=0.1)  # fmt: skip
    rows = read_requests(run_mapping(raw))
    assert [r["arrival_at_s"] for r in rows] == [0, 0, 4.5, 6]
    assert [r["finished_at_s"] for r in rows] == [3, 3, 7.5, 9.5]


def test_a_think_time_follows_the_clients_work(run_mapping):
    raw = closed_loop(1, {"kind": "fixed", "time_s": 1.0}, 3, client_time_per_prompt_token_s=0.05)
    rows = read_requests(run_mapping(raw))
    assert [r["arrival_at_s"] for r in rows] == [0, 3 + 0.5 + 1, 2 * (3 + 0.5 + 1)]
