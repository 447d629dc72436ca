"""Waiting queues: preempted requests and landed KV caches at the front, in the order that cannot deadlock."""

from __future__ import annotations

import pytest

from clustersim.replica.queues import FairShareQueue, FcfsQueue, PriorityQueue, ShortestPromptFirstQueue
from clustersim.workload.request import LANDED, Request


def request(request_id: int, landed: bool = False) -> Request:
    r = Request(request_id, "t", float(request_id), 10 * (request_id + 1), 5)
    if landed:
        r.remote_kv = LANDED
    return r


@pytest.mark.parametrize(
    "make",
    [FcfsQueue, lambda: ShortestPromptFirstQueue(0.0), lambda: PriorityQueue({}), lambda: FairShareQueue({})],
)
def test_a_preempted_request_goes_behind_landed_kv_caches_and_before_new_arrivals(make):
    queue = make()
    queue.push(request(0))  # a new arrival
    queue.push_front(request(1, landed=True))
    queue.push_front(request(2, landed=True))  # landed later: first (LIFO among the front)
    queue.push_front(request(3))  # preempted: behind the landed ones, which hold their blocks
    queue.push_front(request(4))  # preempted later: ahead of 3, still behind the landed ones
    assert [r.request_id for r in queue] == [2, 1, 4, 3, 0]
    assert [queue.pop().request_id for _ in range(5)] == [2, 1, 4, 3, 0]


def test_without_landed_requests_the_front_is_last_in_first_out():
    queue = FcfsQueue()
    queue.push(request(0))
    queue.push_front(request(1))
    queue.push_front(request(2))
    assert [r.request_id for r in queue] == [2, 1, 0]
