"""SGLang's reserve for the running requests' future tokens (``new_token_ratio``; pure).

SGLang's scheduler admits a waiting request only if its prompt and the tokens it may still make fit
beside what the running requests may still make (``python/sglang/srt/managers/schedule_policy.py``
``PrefillAdder``, v0.4-0.5: ``rem_total_tokens`` = free + evictable KV tokens less ``new_token_ratio``
x each running request's ``min(max_new_tokens - len(output_ids), CLIP_MAX_NEW_TOKENS_ESTIMATION)``;
``add_one_req`` refuses a request whose ``extend_input_len + min(max_new_tokens, clip)`` is not below
it, and charges an admitted one its whole ``max_new_tokens``). The ratio starts high, decays at each
decode step, returns to its start when the replica is idle and jumps after a retraction
(``scheduler.py``: ``new_token_ratio_decay``, ``update_running_batch``, ``retract_decode``); see
:class:`~clustersim.config.reserve.DecodeReserve`. A request's ``max_new_tokens`` is taken to be its
output length: benchmark clients send ``max_tokens`` equal to the length they want and ignore EOS. SGLang
retracts the requests that have made the fewest tokens (the longest prompt first among equals); here the
most recently admitted, as every preemption does, which are nearly always the same.

The ratio is a function of the decode index, ``max(min_ratio, base - (d - from_index) x decay)``, so
the step-by-step mode and a run of decode steps (:meth:`first_fit`) compute it alike at any step.
"""

from __future__ import annotations

import numpy as np

from clustersim.config.reserve import DecodeReserve
from clustersim.replica.seats import SeatSet


class Reservation:
    """The reserve of one replica: its rule and where its ratio last started."""

    __slots__ = ("base", "clip", "decay", "floor", "from_index", "rule")

    def __init__(self, rule: DecodeReserve) -> None:
        self.rule = rule
        self.clip = rule.clip_tokens
        self.decay = rule.decay_per_step
        self.floor = rule.min_ratio
        self.base = rule.init_ratio
        self.from_index = 0

    def ratio(self, d: int) -> float:
        """The ratio at the plan of decode step ``d``."""
        return max(self.floor, self.base - max(0, d - self.from_index) * self.decay)

    def idle(self, d: int) -> None:
        """Nothing runs: the ratio starts again (``Scheduler.self_check_during_idle``)."""
        self.base, self.from_index = self.rule.init_ratio, d

    def retracted(self, seats: SeatSet, d: int) -> None:
        """Requests were retracted before decode step ``d``: the ratio becomes what the remaining ones
        have made (plus ``retract_steps`` each) over what they may make (``ScheduleBatch.retract_decode``)."""
        if not seats.num_decode:
            return
        left = seats.tokens_left(d)
        total = sum(seat.request.output_tokens for seat in seats.seats.values() if seat.decoding)
        made = total - left
        self.base = min(1.0, (made + self.rule.retract_steps * seats.num_decode) / total)
        self.from_index = d + 1

    def running_tokens(self, seats: SeatSet, d: int) -> int:
        """What the decoding seats may still make at decode step ``d``, each clipped."""
        left = seats.tokens_left(d)
        for seat in seats.long_seats.values():
            left -= max(0, seat.request.output_tokens - seats.emitted_at(seat, d - 1) - self.clip)
        return left

    def need(self, prompt_tokens: int, output_tokens: int) -> int:
        """KV tokens a waiting request must find: its prompt and what it may make, clipped."""
        return prompt_tokens + min(output_tokens, self.clip)

    def fits(self, need: int, free_tokens: int, running_tokens: int, d: int, admitted: int) -> bool:
        """Whether a request needing ``need`` tokens is admitted at decode step ``d`` with ``free_tokens``
        free (and evictable) and ``admitted`` tokens charged to requests admitted before it in the step."""
        return need < free_tokens - self.ratio(d) * running_tokens - admitted

    def first_fit(self, need: int, free_tokens: np.ndarray, running_tokens: np.ndarray, first_index: int) -> int:
        """The first of the steps ``first_index, first_index + 1, ...`` (given their free and running
        tokens) at which :meth:`fits` admits the request (no one admitted before it), or -1."""
        index = np.arange(first_index, first_index + len(free_tokens))
        ratio = np.maximum(self.floor, self.base - np.maximum(0, index - self.from_index) * self.decay)
        fit = need < free_tokens - ratio * running_tokens - 0
        hits = np.flatnonzero(fit)
        return int(hits[0]) if len(hits) else -1
