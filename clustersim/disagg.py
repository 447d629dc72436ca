"""Disaggregated prefill and decode: each request's KV cache moves from a prefill to a decode replica.

The scenario's router sends an arrival to a prefill replica, which computes its prompt and keeps the
prompt's blocks (:meth:`~clustersim.replica.remote.RemoteKV.release_sent`). At the transfer priority of
that instant (after every step end, before the arrivals; :mod:`clustersim.clock`) the decode router
picks a decode replica and the request joins its queue. The decode replica takes the blocks for the
KV cache when its scheduler reaches the request and they are free (the pull: DistServe's online scheduling;
vLLM V1's ``WAITING_FOR_REMOTE_KVS``); until then the prefill replica holds them, which is how a busy
decode pool pushes back on the prefill pool. The transfer starts when both ends' links are free (each
replica sends one KV cache at a time and receives one at a time over each kind of link, at its full
rate) and lands ``latency_s`` after its last byte (with ``nodes``, two replicas on one node use the
node's link, and the decode router may prefer the prompt's node); then the prefill replica frees its
blocks and the request goes back to the decode replica's queue head, where it takes a seat and
computes its last prompt token,
which samples its first token (vLLM V1 ``Scheduler._update_waiting_for_remote_kv``). TTFT therefore
includes the prefill, the wait for the decode replica, the transfer and that first decode-side step.

Failures (:mod:`clustersim.lifecycle`): a prefill replica that fails loses the KV caches it held for
transfers; each such request is computed again, prompt and all, by its decode replica (vLLM's
``recompute`` policy for a failed KV load), or by the one the decode router picks if it had none yet.
A decode replica that fails hands back the requests whose KV cache was still at their prefill replica
(waiting for their pull, or on the wire to it: that transfer is dropped) to be sent to another decode
replica; those whose KV cache had landed there lost it and start again from the prefill pool.

Nothing here decides what a replica does; it only moves requests between them at explicit instants,
so the fast path and the step-by-step mode see the same moves.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clustersim.clock import TRANSFER_PRIORITY, Clock
from clustersim.config.disagg import Disaggregation, node_of
from clustersim.kvcache.sequence import prefill_tokens_of
from clustersim.records import TransferRecord
from clustersim.replica.core import Core
from clustersim.replica.replica import Replica
from clustersim.router import ROUTERS
from clustersim.workload.request import AWAITING_PULL, LANDED, NO_REMOTE_KV, Request

DECODE_ROUTER_STREAM_KEY = zlib.crc32(b"decode router")  # the decode router's own random stream


@dataclass(slots=True)
class OpenTransfer:
    """A transfer's :class:`~clustersim.records.TransferRecord` fields while it is under way (NaN: not yet)."""

    request_id: int
    prefill_replica: int
    decode_replica: int  # -1 until the decode router has picked one
    kv_tokens: int
    kv_bytes: float
    prefilled_at_s: float
    pulled_at_s: float = math.nan
    started_at_s: float = math.nan
    landed_at_s: float = math.nan
    kv_lost_at_s: float = math.nan
    released_at_s: float = math.nan


@dataclass(frozen=True)
class Endpoint:
    """What a transfer needs to know of one replica: its GPUs (each moves its shard over its own link)
    and the KV bytes of one token over all of them."""

    num_gpus: int
    kv_bytes_per_token: float


def transfer_times_s(
    now_s: float, send_free_s: float, receive_free_s: float, kv_bytes: float, bytes_per_s: float, latency_s: float
) -> tuple[float, float, float]:
    """(start, last byte sent, landed) of a transfer asked for at ``now_s`` over a link whose sender
    and receiver are free from ``send_free_s`` and ``receive_free_s`` (pure)."""
    start_s = max(now_s, send_free_s, receive_free_s)
    sent_s = start_s + kv_bytes / bytes_per_s
    return start_s, sent_s, sent_s + latency_s


class KVTransfers:
    """Hands prompts from the prefill pool to the decode pool and moves their KV caches (a SimPy shell).

    ``rows``: one :class:`~clustersim.records.TransferRecord` per transfer, in the order they ended
    (landed, or the request was rejected by its decode replica); :meth:`close` adds those in flight.
    """

    def __init__(
        self,
        clock: Clock,
        replicas: Sequence[Replica],
        endpoints: Sequence[Endpoint],
        config: Disaggregation,
        seed: int,
    ) -> None:
        self.clock = clock
        self.replicas = replicas
        self.endpoints = endpoints
        self.prefill_pool = [r for r in replicas if r.core.spec.role == "prefill"]
        self.decode_pool = [r for r in replicas if r.core.spec.role == "decode"]
        nodes = config.nodes
        links = [config.link] if nodes is None else [config.link, nodes.link]  # [between nodes, within one]
        self.links = [(link.latency_s, link.per_gpu_bytes_per_s()) for link in links]
        self.node = node_of([e.num_gpus for e in endpoints], nodes.gpus_per_node) if nodes else [0] * len(replicas)
        self.prefer_local = nodes is not None and nodes.prefer_local
        self.router = ROUTERS.get(config.decode_router.kind)(config.decode_router, seed, DECODE_ROUTER_STREAM_KEY)
        # when each replica's link of each kind (between nodes, within its node) is free to send, to receive
        self.send_free_s = [[0.0] * len(replicas) for _ in links]
        self.receive_free_s = [[0.0] * len(replicas) for _ in links]
        self.rows: list[TransferRecord] = []
        self._open: dict[int, OpenTransfer] = {}  # request id -> its row so far
        self._requests: dict[int, Request] = {}  # request id -> the request of an open row
        self._moving: dict[int, Request] = {}  # handed on but not yet queued, or pulled but not landed
        self._pulls: dict[int, object] = {}  # request id -> a token of the pull under way (a landing checks it)
        # the decode replicas the decode router may choose now (with failures: those up) and how a
        # request that cannot be served ends (rejected); both set by the run
        self.up_decode: Callable[[], Sequence[Replica]] = lambda: self.decode_pool
        self.reject: Callable[[Request, str], None] = lambda request, reason: None
        # hears that a prefill replica let go of a KV cache (a draining one may stop); set by the run
        self.released: Callable[[int], None] = lambda index: None
        for replica in replicas:
            self.wire(replica.core)

    def wire(self, core: Core) -> None:
        """Connect a replica's core (a new one too, after a failure) to the hand-overs of its role."""
        if core.spec.role == "prefill":
            core.remote.on_prefilled = self._prefilled
        elif core.spec.role == "decode":
            core.remote.pull = self._pull

    # ------------------------------------------------------------------ the prefill side
    def _prefilled(self, request: Request, prefill_index: int, now_s: float) -> None:
        tokens = prefill_tokens_of(request)  # a retried request recomputes the tokens it had made too
        kv_bytes = tokens * self.endpoints[prefill_index].kv_bytes_per_token
        self._open[request.request_id] = OpenTransfer(request.request_id, prefill_index, -1, tokens, kv_bytes, now_s)
        self._requests[request.request_id] = request
        self._moving[request.request_id] = request
        request.remote_kv = AWAITING_PULL
        timer = self.clock.timer_at(now_s, TRANSFER_PRIORITY)
        timer.callbacks.append(lambda _: self._hand_on(request))

    def _hand_on(self, request: Request) -> None:
        del self._moving[request.request_id]
        self._to_decode(request)

    def _to_decode(self, request: Request) -> None:
        """The decode router picks a decode replica among those up and the request joins its queue."""
        row = self._open[request.request_id]
        pool = self.up_decode()
        if not pool:
            if math.isnan(row.kv_lost_at_s):
                self._release(request)
            self._close(request.request_id)
            self.reject(request, "no decode replica was up")
            return
        if self.prefer_local:
            node = self.node[row.prefill_replica]
            pool = [r for r in pool if self.node[r.index] == node] or pool
        decode = pool[self.router.choose(request, pool)]
        row.decode_replica = decode.index
        decode.enqueue(request)
        if not math.isnan(row.kv_lost_at_s):  # its KV cache was lost on the way: the decode replica computes it
            self._close(request.request_id)
        elif request.status == "rejected":  # it can never fit there: the prefill replica lets its blocks go
            self._release(request)
            self._close(request.request_id)

    # ------------------------------------------------------------------ the decode side
    def _pull(self, request: Request, decode_index: int, now_s: float) -> None:
        row = self._open[request.request_id]
        source = row.prefill_replica
        gpus = min(self.endpoints[source].num_gpus, self.endpoints[decode_index].num_gpus)
        kind = int(len(self.links) > 1 and self.node[source] == self.node[decode_index])  # 1: within a node
        latency_s, per_gpu_bytes_per_s = self.links[kind]
        send_free_s, receive_free_s = self.send_free_s[kind], self.receive_free_s[kind]
        start_s, sent_s, landed_s = transfer_times_s(
            now_s,
            send_free_s[source],
            receive_free_s[decode_index],
            row.kv_bytes,
            per_gpu_bytes_per_s * gpus,
            latency_s,
        )
        send_free_s[source] = receive_free_s[decode_index] = sent_s
        row.pulled_at_s, row.started_at_s = now_s, start_s
        self._moving[request.request_id] = request
        token = self._pulls[request.request_id] = object()
        timer = self.clock.timer_at(landed_s, TRANSFER_PRIORITY)
        timer.callbacks.append(lambda _: self._land(request, decode_index, token))

    def _land(self, request: Request, decode_index: int, token: object) -> None:
        if self._pulls.get(request.request_id) is not token:  # dropped meanwhile (a replica failed)
            return
        del self._pulls[request.request_id]
        del self._moving[request.request_id]
        self._open[request.request_id].landed_at_s = self.clock.now
        self._release(request)
        request.remote_kv = LANDED
        decode = self.replicas[decode_index]
        decode.core.remote.land(request)
        decode.enqueue(request, front=True)
        self._close(request.request_id)

    # ------------------------------------------------------------------ books
    def _release(self, request: Request) -> None:
        row = self._open[request.request_id]
        row.released_at_s = self.clock.now
        prefill = self.replicas[row.prefill_replica]
        prefill.core.remote.release_sent(request)
        prefill.wake()
        self.released(prefill.index)

    def _close(self, request_id: int) -> None:
        del self._requests[request_id]
        self.rows.append(TransferRecord(*dataclasses.astuple(self._open.pop(request_id))))

    # ------------------------------------------------------------------ failures
    def failed(self, index: int) -> list[Request]:
        """Replica ``index`` failed now. A prefill replica's KV caches not yet landed are lost: each of
        those requests is computed again by its decode replica. A decode replica's pulls on the wire
        are dropped: returns those requests (their KV caches still at the prefill replicas), which it
        held as much as the ones in its queue."""
        if self.replicas[index].core.spec.role == "prefill":
            self._prefill_failed(index)
            return []
        dropped = []
        for request_id, row in list(self._open.items()):
            if row.decode_replica == index and request_id in self._pulls:
                request = self._requests[request_id]
                del self._pulls[request_id], self._moving[request_id]
                row.pulled_at_s = row.started_at_s = math.nan
                request.remote_kv_blocks = 0  # the blocks were the failed replica's
                dropped.append(request)
        return dropped

    def _prefill_failed(self, index: int) -> None:
        now_s = self.clock.now
        for request_id, row in list(self._open.items()):
            if row.prefill_replica != index:
                continue
            request = self._requests[request_id]
            row.kv_lost_at_s = row.released_at_s = now_s
            request.remote_kv = NO_REMOTE_KV
            if row.decode_replica < 0:  # not handed on yet: the decode router still picks one at its instant
                continue
            decode = self.replicas[row.decode_replica]
            if request_id in self._pulls:  # on the wire: its landing will not come
                del self._pulls[request_id], self._moving[request_id]
                decode.cancel_pull(request)
                self._close(request_id)
                decode.enqueue(request, front=True)  # it had been admitted: first in line to compute it
                decode.wake()  # the blocks held for it are free
            else:  # waiting for its pull
                self._close(request_id)
                decode.withdraw(request)
                decode.enqueue(request)

    def hand_on_again(self, request: Request) -> None:
        """A request whose KV cache waits at its prefill replica, held by a decode replica that failed:
        the decode router sends it to another."""
        self._to_decode(request)

    def drop(self, request: Request) -> None:
        """A request whose KV cache waits at its prefill replica is lost: the prefill replica lets it go."""
        self._release(request)
        self._close(request.request_id)

    def close(self) -> list[Request]:
        """The clock stopped: write the transfers still open; returns the requests in flight (in no
        replica's queue), which are unfinished."""
        for request_id in list(self._open):
            self._close(request_id)
        return list(self._moving.values())
