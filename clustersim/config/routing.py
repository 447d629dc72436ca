"""The ``router`` of a scenario: which replica an arriving request goes to (one ``kind`` each;
the implementations are in :mod:`clustersim.router`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from clustersim.config.base import StrictModel


class RoundRobinRouter(StrictModel):
    """Send request i to replica i mod N."""

    kind: Literal["round_robin"] = "round_robin"


class RandomRouter(StrictModel):
    """A uniformly random replica (the router's own seeded stream)."""

    kind: Literal["random"]


class LeastOutstandingRouter(StrictModel):
    """The replica with the fewest requests queued or running (lowest index on ties)."""

    kind: Literal["least_outstanding"]


class VllmDPRouter(StrictModel):
    """vLLM's data-parallel load balancer: the replica with the lowest 4 x waiting + running requests
    (lowest index on ties); vllm/v1/engine/core_client.py, ``DPLBAsyncMPClient``."""

    kind: Literal["vllm_dp"]


class LeastKVRouter(StrictModel):
    """The replica with the smallest fraction of KV blocks in use (then fewest outstanding, lowest index)."""

    kind: Literal["least_kv"]


class PowerOfTwoRouter(StrictModel):
    """Two distinct replicas drawn at random; the one with fewer outstanding requests (the first on ties)."""

    kind: Literal["power_of_two"]


class AffinityRouter(StrictModel):
    """Requests of one session, or with the same leading prefix, go to the same replica unless it is overloaded.

    The key is the session id when the request has one, else its first ``prefix_blocks`` prefix hash
    ids (Mooncake's ``hash_ids``; the first block of that trace is a system prompt every request shares);
    requests without either go to the least-outstanding replica. A new key goes to the least-outstanding
    replica and stays there. Its replica is overloaded when its outstanding requests exceed the least
    loaded replica's by more than ``overload_abs_requests`` and are above ``overload_rel`` times that;
    then the request goes to the least loaded replica and the key moves there with it.
    """

    kind: Literal["affinity"]
    prefix_blocks: PositiveInt = 2
    overload_abs_requests: NonNegativeInt = 8
    overload_rel: float = Field(default=1.5, ge=1.0)


RouterConfig = Annotated[
    RoundRobinRouter
    | RandomRouter
    | LeastOutstandingRouter
    | VllmDPRouter
    | LeastKVRouter
    | PowerOfTwoRouter
    | AffinityRouter,
    Field(discriminator="kind"),
]
