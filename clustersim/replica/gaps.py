"""One replica's inter-token gaps, counted per event, never per token (pure; see :mod:`clustersim.itl`).

At the end of each step (or run of decode steps) that advances the decode index, the sequences that
decoded in the previous advancing step too see the decode gap of each step, and those joining the
decodes (first token, recompute, swap-in) see their own first gap. A sequence's greatest gap is
asked of a :class:`~clustersim.itl.SuffixMax` of decode gaps when it leaves its seat. Gaps are counted
under each request's ``gap_key`` (its tenant, and whether the summary measures it), with one weight per
key: the decoding seats of that key.

Sequences with less than the full share of the decode steps (:mod:`clustersim.shares`) gain a token
only at some steps; each such share keeps its own last token time and suffix maximum (counted in the
share's tokens), and its gaps are the times between the steps where it gains one. The replica runs
one step at a time while any decodes, so these are counted per step.
"""

from __future__ import annotations

import math

from clustersim.itl import BinRange, GapHistogram, SuffixMax, anchored_ranges
from clustersim.replica.seats import Seat, SeatSet, ShareLane
from clustersim.replica.step import DecodeAnchor, Step
from clustersim.shares import FULL_SHARE, share_tokens
from clustersim.workload.request import GapKey, Request

PRUNE_FROM = 1024  # suffix-max segments kept before the ones no live sequence can reach are dropped


class LaneGaps:
    """What one share below full needs to count its gaps: its last token, its joiners, its suffix maximum."""

    __slots__ = ("joining", "last_token_at_s", "prune_at", "suffix")

    def __init__(self) -> None:
        self.last_token_at_s = math.nan
        self.joining: list[Seat] = []
        self.suffix = SuffixMax()
        self.prune_at = PRUNE_FROM


class GapTracker:
    """The gaps of one replica's sequences, into the run's shared histogram."""

    def __init__(self, histogram: GapHistogram, seats: SeatSet) -> None:
        self.histogram = histogram
        self.seats = seats
        self.suffix = SuffixMax()
        self.last_decode_end_s = math.nan  # the end of the last step that advanced the decode index
        self._joining: list[Seat] = []  # decoding seats (of the full share) that have not decoded yet
        self._prune_at = PRUNE_FROM
        self._lanes: dict[int, LaneGaps] = {}  # by share below full

    def joined(self, seat: Seat, last_token_at_s: float, first_decode_index: int) -> None:
        """``seat`` decodes from ``first_decode_index``; its previous token came at ``last_token_at_s``."""
        seat.joined_at_s = last_token_at_s
        seat.join_gap_s = -math.inf
        if seat.share == FULL_SHARE:
            seat.join_index = first_decode_index
            self._joining.append(seat)
            return
        # counted in its share's tokens: the first it gains from first_decode_index on
        seat.join_index = share_tokens(first_decode_index - 1, seat.share) + 1
        self._lane(seat.share).joining.append(seat)

    def _lane(self, share: int) -> LaneGaps:
        lane = self._lanes.get(share)
        if lane is None:
            lane = self._lanes[share] = LaneGaps()
        return lane

    def resumed(self, request: Request, now_s: float) -> None:
        """A recomputed sequence made its next token at ``now_s``."""
        gap_s = now_s - request.last_token_at_s
        self.histogram.add_gap(request.gap_key, gap_s)
        if gap_s > request.max_itl_s:
            request.max_itl_s = gap_s

    def advanced(self, step: Step, num_steps: int, now_s: float) -> None:
        """Count the gaps of the first ``num_steps`` steps of ``step`` (it advanced the decode index)."""
        anchor = step.anchor
        if anchor is not None and not self._joining and step.started_at_s == self.last_decode_end_s:
            self._run(step, anchor, num_steps, now_s)
        elif step.batch.num_decode_seqs:
            first = step.first_index
            # the first step's end: its start plus its formula if anchored (exactly what the gap of a
            # step inside a run is), else the step's own end
            if anchor is None:
                end_s = now_s
                gap_s = now_s - self.last_decode_end_s
            else:
                duration_s = anchor.step_duration_s(first)
                started_s = step.started_at_s
                end_s = started_s + duration_s
                gap_s = (started_s - self.last_decode_end_s) + duration_s
            joiners = None
            if self._joining:
                joiners, self._joining = self._join(self._joining, end_s), []
            add = self.histogram.add_gap
            continuing = False
            for key, count in self.seats.decode_by_key.items():
                weight = count - joiners.get(key, 0) if joiners else count
                if weight > 0:
                    add(key, gap_s, weight)
                    continuing = True
            if continuing:
                self.suffix.push(first, gap_s)
            if num_steps > 1:  # the run's later steps last (its span - the first's) together
                self._tail(step, first, num_steps, (now_s - step.started_at_s) - duration_s)
        if self.seats.lanes and step.batch.num_decode_seqs:  # one step: runs never span such seats
            d = step.first_index
            for share, lane in self.seats.lanes.items():
                if d * share % FULL_SHARE < share:  # shares.gains_at, inline
                    self._lane_gained(lane, d, now_s)
        self.last_decode_end_s = now_s
        if len(self.suffix.starts) > self._prune_at:
            self._prune()

    def _lane_gained(self, lane: ShareLane, index: int, now_s: float) -> None:
        """The seats of ``lane`` gained a token at decode step ``index``, which ended at ``now_s``."""
        gaps = self._lane(lane.share)
        joiners = None
        if gaps.joining:
            joiners, gaps.joining = self._join(gaps.joining, now_s), []
        gap_s = now_s - gaps.last_token_at_s
        add = self.histogram.add_gap
        continuing = False
        for key, count in lane.by_key.items():
            weight = count - joiners.get(key, 0) if joiners else count
            if weight > 0:
                add(key, gap_s, weight)
                continuing = True
        if continuing:
            gaps.suffix.push(share_tokens(index, lane.share), gap_s)
        gaps.last_token_at_s = now_s
        if len(gaps.suffix.starts) > gaps.prune_at:
            joins = [s.join_index for s in self.seats.seats.values() if s.decoding and s.share == lane.share]
            gaps.suffix.drop_before(min(joins) + 1)
            gaps.prune_at = max(PRUNE_FROM, 2 * len(gaps.suffix.starts))

    def _run(self, step: Step, anchor: DecodeAnchor, num_steps: int, now_s: float) -> None:
        """The common case: decode steps right after the last, nobody joining; each step's gap is its formula."""
        j = step.first_index - anchor.first_index
        ranges = anchored_ranges(
            anchor.shape, anchor.first_context_tokens, anchor.num_seqs, j, j + num_steps - 1, now_s - step.started_at_s
        )
        add = self.histogram.add
        for key, count in self.seats.decode_by_key.items():
            if count:
                add(key, ranges, count)
        self.suffix.push(step.first_index, ranges[-1][4])  # no sequence joined inside: one segment will do
        self.last_decode_end_s = now_s
        if len(self.suffix.starts) > self._prune_at:
            self._prune()

    def _join(self, joining: list[Seat], end_s: float) -> dict[GapKey, int]:
        """The first gaps of the ``joining`` sequences, whose first decode step ends at ``end_s``; how many per key."""
        add = self.histogram.add_gap
        joiners: dict[GapKey, int] = {}
        for seat in joining:
            if seat.alive:
                gap_s = end_s - seat.joined_at_s
                seat.join_gap_s = gap_s
                key = seat.request.gap_key
                add(key, gap_s)
                joiners[key] = joiners.get(key, 0) + 1
        return joiners

    def _tail(self, step: Step, first: int, num_steps: int, total_s: float) -> None:
        anchor = step.anchor
        assert anchor is not None  # runs of more than one step are anchored
        j = first - anchor.first_index
        ranges: list[BinRange] = anchored_ranges(
            anchor.shape, anchor.first_context_tokens, anchor.num_seqs, j + 1, j + num_steps - 1, total_s
        )
        for key, count in self.seats.decode_by_key.items():
            if count:
                self.histogram.add(key, ranges, count)
        self.suffix.push(first + 1, ranges[-1][4])

    def left(self, seat: Seat, next_decode_index: int) -> None:
        """A decoding seat leaves (finished, preempted before ``next_decode_index``, or the run
        ended): fold its greatest gap into its request, and note when its last token came."""
        request = seat.request
        if seat.share == FULL_SHARE:
            suffix, last_s, done = self.suffix, self.last_decode_end_s, next_decode_index - 1
        else:
            lane = self._lane(seat.share)
            suffix, last_s, done = lane.suffix, lane.last_token_at_s, share_tokens(next_decode_index - 1, seat.share)
        stint_s = max(seat.join_gap_s, suffix.since(seat.join_index + 1))
        if stint_s > request.max_itl_s:
            request.max_itl_s = stint_s
        decoded = seat.join_index <= done
        request.last_token_at_s = last_s if decoded else seat.joined_at_s

    def _prune(self) -> None:
        joins = [seat.join_index for seat in self.seats.seats.values() if seat.decoding and seat.share == FULL_SHARE]
        if joins:
            self.suffix.drop_before(min(joins) + 1)
        self._prune_at = max(PRUNE_FROM, 2 * len(self.suffix.starts))
