"""The streaming an API server has not caught up with: a fluid queue, exact within each piece."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clustersim.streamlag import StreamLag


def test_work_waits_while_it_comes_faster_than_it_is_done_and_drains_after():
    lag = StreamLag()
    lag.change(1.0, inflow=1.5, drain=1.0)  # half a second of work more each second
    assert lag.backlog_s(1.0) == 0.0
    assert lag.backlog_s(3.0) == pytest.approx(1.0)
    assert lag.lag_s(3.0) == pytest.approx(1.0)  # a token made at 3 s waits for that second of work
    lag.change(3.0, inflow=0.5, drain=0.9)  # the server parses beside it: it drains at 0.4 a second
    assert lag.backlog_s(4.0) == pytest.approx(0.6)
    assert lag.lag_s(4.0) == pytest.approx(0.6 / 0.9)
    assert lag.backlog_s(5.5) == 0.0 and lag.backlog_s(10.0) == 0.0  # drained at 5.5 s and stays so
    assert lag.lag_s(10.0, own_work_s=0.01) == pytest.approx(0.01)  # a token's own work, at least
    assert lag.backlog_s(2.0) == pytest.approx(0.5)  # the past, as it was


def test_work_that_comes_at_once_adds_to_what_waits():
    lag = StreamLag()
    lag.add(0.0, 0.25)
    lag.add(0.0, 0.25)  # at one instant: one piece
    assert lag.backlog_s(0.0) == pytest.approx(0.5)
    assert lag.backlog_s(0.2) == pytest.approx(0.3)
    lag.add(0.2, 0.1)
    assert lag.backlog_s(0.2) == pytest.approx(0.4) and lag.backlog_s(0.1) == pytest.approx(0.4)
    assert lag.backlog_s(1.0) == 0.0


changes = st.lists(
    st.tuples(
        st.floats(0.0, 2.0),  # time since the last change
        st.floats(0.0, 3.0),  # inflow
        st.sampled_from([1.0, 0.9]),  # drain
        st.floats(0.0, 0.5),  # work at once
    ),
    max_size=120,
)


@given(changes, st.data())
def test_forgetting_the_past_never_changes_an_answer_about_the_time_kept(steps, data):
    """One queue forgets what ended before each time asked of; a second keeps everything: every question
    about a time at or after the forgotten past has one answer from both."""
    forgetful, keeper = StreamLag(), StreamLag()
    now = since = 0.0
    for gap, inflow, drain, lump in steps:
        now += gap
        for lag in (forgetful, keeper):
            lag.change(now, inflow, drain)
            lag.add(now, lump)
        since = data.draw(st.floats(since, now))  # what is forgotten stays so
        forgetful.forget_before(since)
        at = data.draw(st.floats(since, now + 1.0)) if now + 1.0 > since else since
        assert forgetful.backlog_s(at) == keeper.backlog_s(at)
        assert forgetful.lag_s(at, 0.01) == keeper.lag_s(at, 0.01)
        assert keeper.backlog_s(at) >= 0.0


class _EveryPiece:
    """The same queue kept the plain way: a piece for every change, nothing skipped or forgotten."""

    def __init__(self) -> None:
        self.pieces = [(0.0, 0.0, 0.0, 1.0)]  # (start, backlog then, inflow, drain)

    def _at(self, at_s: float) -> tuple[float, float]:
        start, backlog, inflow, drain = [p for p in self.pieces if p[0] <= at_s][-1]  # the latest begun
        return max(0.0, backlog + (inflow - drain) * (at_s - start)), drain

    def change(self, now_s: float, inflow: float, drain: float) -> None:
        self.pieces.append((now_s, self._at(now_s)[0], inflow, drain))

    def add(self, now_s: float, work_s: float) -> None:
        _, _, inflow, drain = self.pieces[-1]
        self.pieces.append((now_s, self._at(now_s)[0] + work_s, inflow, drain))

    def lag_s(self, at_s: float, own_work_s: float) -> float:
        backlog, drain = self._at(at_s)
        return max(backlog / drain, own_work_s)


@given(changes, st.lists(st.floats(0.0, 30.0), min_size=1, max_size=20))
def test_the_queue_answers_as_one_kept_the_plain_way(steps, times):
    """Changes that change nothing (a new rate of work done while nothing waits nor will) are not kept,
    and pieces at one instant are merged: the answers are those of a piece for every change."""
    lag, plain = StreamLag(), _EveryPiece()
    now = 0.0
    for gap, inflow, drain, lump in steps:
        now += gap
        for queue in (lag, plain):
            queue.change(now, inflow, drain)
            queue.add(now, lump)
    for at in times:
        assert lag.backlog_s(at) == pytest.approx(plain._at(at)[0], abs=1e-9)
        assert lag.lag_s(at, 0.01) == pytest.approx(plain.lag_s(at, 0.01), abs=1e-9)
