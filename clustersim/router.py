"""Routing policies: decide which replica gets each request (the caller applies the decision).

A router sees replicas only through :class:`ReplicaView` and returns an index into the sequence
it was given. Per request, a policy does O(1) work (round robin, random, power of two) or one
pass over the replicas (least outstanding, vLLM's data-parallel balancer, least KV, affinity);
random draws come from the router's own stream, in chunks.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

import numpy as np

from clustersim.config.routing import (
    AffinityRouter,
    LeastKVRouter,
    LeastOutstandingRouter,
    PowerOfTwoRouter,
    RandomRouter,
    RoundRobinRouter,
    RouterConfig,
    VllmDPRouter,
)
from clustersim.registry import Registry
from clustersim.workload.request import Request

ROUTER_STREAM_KEY = zlib.crc32(b"router")  # the router's random stream: spawn key (ROUTER_STREAM_KEY,)
_DRAW_CHUNK = 4096


class ReplicaView(Protocol):
    """What a router may look at on a replica."""

    @property
    def num_outstanding(self) -> int:
        """Requests queued or running on the replica."""
        ...

    @property
    def num_waiting(self) -> int:
        """Requests queued on the replica, not holding a seat."""
        ...

    @property
    def num_used_kv_blocks(self) -> int:
        """KV blocks in use at this instant."""
        ...

    @property
    def num_kv_blocks(self) -> int: ...


class Router(Protocol):
    """A routing policy: ``choose`` returns the index of the replica that gets ``request``."""

    def choose(self, request: Request, replicas: Sequence[ReplicaView]) -> int: ...


def router_rng(seed: int, stream: int = ROUTER_STREAM_KEY) -> np.random.Generator:
    """A router's random stream under scenario ``seed`` (independent of every tenant's streams);
    ``stream``: its spawn key (the decode router of a disaggregated cluster has its own)."""
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(stream,)))


def least_outstanding(replicas: Sequence[ReplicaView]) -> int:
    """The index of the replica with the fewest outstanding requests (lowest index on ties)."""
    best, best_load = 0, replicas[0].num_outstanding
    for index in range(1, len(replicas)):
        load = replicas[index].num_outstanding
        if load < best_load:
            best, best_load = index, load
    return best


class RoundRobin:
    """Request i goes to replica i mod N, in arrival order."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, request: Request, replicas: Sequence[ReplicaView]) -> int:
        index = self._next % len(replicas)
        self._next = index + 1
        return index


class _Draws:
    """Uniform integers in ``[0, high)`` from ``rng``, drawn ``_DRAW_CHUNK`` at a time."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._high = 0
        self._values: list[int] = []

    def next(self, high: int) -> int:
        if high != self._high or not self._values:
            self._high = high
            self._values = self._rng.integers(0, high, size=_DRAW_CHUNK).tolist()[::-1]
        return self._values.pop()


class RandomChoice:
    """A uniformly random replica."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._draws = _Draws(rng)

    def choose(self, request: Request, replicas: Sequence[ReplicaView]) -> int:
        return self._draws.next(len(replicas))


class LeastOutstanding:
    """The replica with the fewest requests queued or running (lowest index on ties)."""

    def choose(self, request: Request, replicas: Sequence[ReplicaView]) -> int:
        return least_outstanding(replicas)


def _vllm_dp_score(replica: ReplicaView) -> int:
    """``4 x waiting + running``, with running = outstanding - waiting."""
    return 3 * replica.num_waiting + replica.num_outstanding


class VllmDP:
    """vLLM's data-parallel load balancer (vllm/v1/engine/core_client.py, ``DPLBAsyncMPClient.
    get_core_engine_for_request``): the replica with the lowest ``4 x waiting + running``, the first
    from index 0 on ties. vLLM reads the counts from a snapshot its coordinator publishes every 100 ms
    plus the requests it sent since; the counts here are the replicas' own at the arrival."""

    def choose(self, request: Request, replicas: Sequence[ReplicaView]) -> int:
        best, best_score = 0, _vllm_dp_score(replicas[0])
        for index in range(1, len(replicas)):
            score = _vllm_dp_score(replicas[index])
            if score < best_score:
                best, best_score = index, score
        return best


class LeastKV:
    """The replica with the smallest fraction of its KV blocks in use; ties by outstanding requests, then index."""

    def choose(self, request: Request, replicas: Sequence[ReplicaView]) -> int:
        best, best_key = 0, (2.0, 0)
        for index, replica in enumerate(replicas):
            key = (replica.num_used_kv_blocks / replica.num_kv_blocks, replica.num_outstanding)
            if key < best_key:
                best, best_key = index, key
        return best


class PowerOfTwo:
    """Two distinct random replicas; the one with fewer outstanding requests (the first drawn on ties)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._num_replicas = 0
        self._pairs: list[tuple[int, int]] = []

    def _refill(self, n: int) -> None:
        first = self._rng.integers(0, n, size=_DRAW_CHUNK)
        second = self._rng.integers(0, n - 1, size=_DRAW_CHUNK)
        second += second >= first  # distinct from the first, uniform over the other n - 1
        self._pairs = list(zip(first.tolist(), second.tolist(), strict=True))[::-1]
        self._num_replicas = n

    def choose(self, request: Request, replicas: Sequence[ReplicaView]) -> int:
        n = len(replicas)
        if n == 1:
            return 0
        if n != self._num_replicas or not self._pairs:
            self._refill(n)
        a, b = self._pairs.pop()
        return b if replicas[b].num_outstanding < replicas[a].num_outstanding else a


class Affinity:
    """Same session, or same leading prefix, to the same replica, unless that replica is overloaded.

    The rule (also in :class:`clustersim.config.scenario.AffinityRouter`): the key is
    ``(tenant, session_id)`` if the request has a session, else its first ``prefix_blocks`` prefix
    hash ids; without either, the least-outstanding replica. A key seen for the first time goes to
    the least-outstanding replica. A key's replica ``h`` is overloaded when
    ``load(h) > min_load + overload_abs_requests`` and ``load(h) > overload_rel * min_load``
    (load: outstanding requests); then the request goes to the least-outstanding replica and the
    key moves there.
    """

    def __init__(self, config: AffinityRouter) -> None:
        self.config = config
        self._home: dict[Hashable, int] = {}

    def key(self, request: Request) -> Hashable | None:
        if request.session_id >= 0:
            return (request.tenant, request.session_id)
        if request.prefix_hash_ids:
            return request.prefix_hash_ids[: self.config.prefix_blocks]
        return None

    def choose(self, request: Request, replicas: Sequence[ReplicaView]) -> int:
        key = self.key(request)
        fallback = least_outstanding(replicas)
        if key is None:
            return fallback
        home = self._home.get(key)
        if home is not None and home < len(replicas):
            load = replicas[home].num_outstanding
            min_load = replicas[fallback].num_outstanding
            config = self.config
            if load <= min_load + config.overload_abs_requests or load <= config.overload_rel * min_load:
                return home
        self._home[key] = fallback
        return fallback


RouterFactory = Callable[[RouterConfig, int, int], Router]  # (config, scenario seed, stream key) -> router


def make_round_robin(config: RouterConfig, seed: int, stream: int = ROUTER_STREAM_KEY) -> Router:
    assert isinstance(config, RoundRobinRouter)
    return RoundRobin()


def make_random(config: RouterConfig, seed: int, stream: int = ROUTER_STREAM_KEY) -> Router:
    assert isinstance(config, RandomRouter)
    return RandomChoice(router_rng(seed, stream))


def make_least_outstanding(config: RouterConfig, seed: int, stream: int = ROUTER_STREAM_KEY) -> Router:
    assert isinstance(config, LeastOutstandingRouter)
    return LeastOutstanding()


def make_vllm_dp(config: RouterConfig, seed: int, stream: int = ROUTER_STREAM_KEY) -> Router:
    assert isinstance(config, VllmDPRouter)
    return VllmDP()


def make_least_kv(config: RouterConfig, seed: int, stream: int = ROUTER_STREAM_KEY) -> Router:
    assert isinstance(config, LeastKVRouter)
    return LeastKV()


def make_power_of_two(config: RouterConfig, seed: int, stream: int = ROUTER_STREAM_KEY) -> Router:
    assert isinstance(config, PowerOfTwoRouter)
    return PowerOfTwo(router_rng(seed, stream))


def make_affinity(config: RouterConfig, seed: int, stream: int = ROUTER_STREAM_KEY) -> Router:
    assert isinstance(config, AffinityRouter)
    return Affinity(config)


ROUTERS: Registry[RouterFactory] = Registry(
    "router",
    [
        ("round_robin", make_round_robin),
        ("random", make_random),
        ("least_outstanding", make_least_outstanding),
        ("vllm_dp", make_vllm_dp),
        ("least_kv", make_least_kv),
        ("power_of_two", make_power_of_two),
        ("affinity", make_affinity),
    ],
)
