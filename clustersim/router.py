"""Routing policies: decide which replica gets each request (the caller applies the decision)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from clustersim.workload.request import Request


class ReplicaView(Protocol):
    """What a router may look at on a replica."""

    @property
    def num_outstanding(self) -> int: ...


class RoundRobin:
    """Request i goes to replica i mod N, in arrival order."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, request: Request, replicas: Sequence[ReplicaView]) -> int:
        index = self._next % len(replicas)
        self._next = index + 1
        return index
