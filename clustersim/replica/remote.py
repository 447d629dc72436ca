"""A replica's side of disaggregated prefill and decode: KV caches it sends or pulls (pure, no simpy).

A prefill replica hands each finished prompt on and keeps its blocks until the decode replica has them
(:meth:`RemoteKV.hand_off`, :meth:`RemoteKV.release_sent`); a decode replica takes the blocks for a KV
cache and pulls it (:meth:`RemoteKV.take_for_pull`), then seats the request when it has landed
(:meth:`RemoteKV.seat_landed`). The coordinator that moves the caches between replicas is
:mod:`clustersim.disagg`; the hooks are its.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from clustersim.replica.seats import Seat
from clustersim.workload.request import NO_REMOTE_KV, Request

if TYPE_CHECKING:  # the core holds one; it only reads and changes the core's seats and KV cache
    from clustersim.replica.core import Core

Handoff = Callable[[Request, int, float], None]  # (request, this replica's index, now)


class RemoteKV:
    """The KV caches one replica holds for transfers: sending (prefill) or pulled (decode).

    Invariant: ``in_flight_blocks`` is the blocks of ``sending`` plus those taken for pulls whose
    requests have not taken a seat yet; they are in use in the replica's block pool.
    """

    __slots__ = ("_core", "in_flight_blocks", "num_pulling", "on_prefilled", "pull", "sending")

    def __init__(self, core: Core) -> None:
        self._core = core
        self.on_prefilled: Handoff | None = None  # a prompt is done here (set on prefill replicas)
        self.pull: Handoff | None = None  # pull a KV cache here (set on decode replicas)
        self.sending: dict[int, tuple[Seat, int]] = {}  # request id -> (its seat, the blocks it holds)
        self.num_pulling = 0  # requests whose KV cache is on its way here
        self.in_flight_blocks = 0

    @property
    def waited_on(self) -> bool:
        """Whether blocks (or pinned prefixes) here will come free when a transfer moves on."""
        return bool(self.sending or self.in_flight_blocks)

    def hand_off(self, seat: Seat, now_s: float) -> None:
        """A prefill replica's prompt is done: the seat goes, its blocks stay until the decode replica
        has pulled them (:meth:`release_sent`)."""
        core = self._core
        core.seats.remove(seat)
        request = seat.request
        self.sending[request.request_id] = (seat, seat.reserved_blocks)
        self.in_flight_blocks += seat.reserved_blocks
        assert self.on_prefilled is not None
        self.on_prefilled(request, core.spec.index, now_s)

    def release_sent(self, request: Request) -> None:
        """The decode replica has ``request``'s KV cache (or never will): free the blocks it held here."""
        core = self._core
        seat, blocks = self.sending.pop(request.request_id)
        self.in_flight_blocks -= blocks
        core.kv.vacate(seat, core.seats.decode_index - 1, seat.cached_tokens + seat.done_tokens)

    def take_for_pull(self, request: Request, num_blocks: int, now_s: float) -> None:
        """A decode replica takes the blocks for ``request``'s KV cache and pulls it from its prefill
        replica; it comes back to the queue's head when it has landed."""
        self._core.kv.hold(num_blocks)
        request.remote_kv_blocks = num_blocks
        self.in_flight_blocks += num_blocks
        self.num_pulling += 1
        assert self.pull is not None
        self.pull(request, self._core.spec.index, now_s)

    def cancel_pull(self, request: Request) -> None:
        """A pull under way will not land (its KV cache is gone): give back the blocks held for it."""
        blocks = request.remote_kv_blocks
        self._core.kv.unhold(blocks)
        self.in_flight_blocks -= blocks
        self.num_pulling -= 1
        request.remote_kv_blocks = 0

    def land(self, request: Request) -> None:
        """``request``'s KV cache has landed: it joins the queue's head (``Core.enqueue`` with ``front``)."""
        self.num_pulling -= 1

    def seat_landed(self, request: Request, now_s: float) -> Seat:
        """A request whose KV cache has landed takes a seat with the blocks held for it; all its prompt
        but the last token counts as computed (vLLM V1 recomputes the last one to sample the first
        token: ``Scheduler._update_waiting_for_remote_kv``)."""
        core = self._core
        blocks = request.remote_kv_blocks
        core.kv.unhold(blocks)
        self.in_flight_blocks -= blocks
        request.remote_kv, request.remote_kv_blocks = NO_REMOTE_KV, 0
        seat = core.seat(request, [], 0, now_s, blocks)
        core.seats.advance_prefill(seat, seat.prefill_tokens - 1)
        return seat
