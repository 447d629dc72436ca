"""Each request's share of the decode steps under speculative decoding (see :mod:`clustersim.shares`).

Decode steps are priced as ``1 / E_max`` of a verify cycle, ``E_max`` the most tokens per verify
cycle any request may gain (:meth:`~clustersim.config.speculative.Speculative.max_tokens_per_step`).
A request whose acceptance rate gives ``E`` tokens per cycle then gains a token at ``E / E_max`` of
the steps: its share, rounded to ``1 / FULL_SHARE``. Its tokens per second, KV growth and time per
output token follow its own rate, while every sequence in the batch is verified every cycle (the
verify step's work is the batch's, whatever each sequence accepts). With one fixed rate for every
request all shares are full and nothing changes.

A request's rate is fixed, or drawn from its tenant's beta distribution when it arrives, from a
random stream of its own tenant (so adding a tenant reshuffles no other's draws).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

import numpy as np

from clustersim.config.speculative import BetaAcceptance, Speculative, expected_tokens_per_step
from clustersim.shares import FULL_SHARE
from clustersim.workload.request import Request

ACCEPTANCE_STREAM_KEY = zlib.crc32(b"speculative acceptance")


def share_of(tokens_per_step: float, max_tokens_per_step: float) -> int:
    """The share of a request gaining ``tokens_per_step`` per verify cycle when the fastest gains the max."""
    return max(1, min(FULL_SHARE, round(FULL_SHARE * tokens_per_step / max_tokens_per_step)))


class AcceptanceDraws:
    """Gives each arriving request its share of the decode steps."""

    def __init__(self, config: Speculative, tenants: Iterable[str], seed: int) -> None:
        names = list(tenants)
        self.num_speculative_tokens = config.num_speculative_tokens
        self.max_tokens_per_step = config.max_tokens_per_step(names)
        self._fixed: dict[str, int] = {}
        self._beta: dict[str, tuple[float, float, np.random.Generator]] = {}
        for name in names:
            rate = config.rate_of(name)
            if isinstance(rate, BetaAcceptance):
                key = zlib.crc32(name.encode("utf-8"))
                seq = np.random.SeedSequence(entropy=seed, spawn_key=(ACCEPTANCE_STREAM_KEY, key))
                rng = np.random.default_rng(seq)
                a = rate.mean * rate.concentration
                self._beta[name] = (a, rate.concentration - a, rng)
            else:
                k = self.num_speculative_tokens
                self._fixed[name] = share_of(expected_tokens_per_step(rate, k), self.max_tokens_per_step)

    @property
    def all_full(self) -> bool:
        """Whether every request decodes at the full share (one fixed rate for all)."""
        return not self._beta and all(share == FULL_SHARE for share in self._fixed.values())

    def assign(self, request: Request) -> None:
        """Set ``request.decode_share`` from its tenant's rate (a draw, for a distribution)."""
        fixed = self._fixed.get(request.tenant)
        if fixed is not None:
            request.decode_share = fixed
            return
        a, b, rng = self._beta[request.tenant]
        alpha = float(rng.beta(a, b))
        tokens = expected_tokens_per_step(alpha, self.num_speculative_tokens)
        request.decode_share = share_of(tokens, self.max_tokens_per_step)
