"""The ``speculative`` section of a scenario: speculative decoding on every replica.

Each decode step, a proposer drafts ``num_speculative_tokens`` (k) tokens per sequence and the
target model verifies them in one forward pass of k + 1 tokens per sequence; a sequence keeps the
drafted tokens up to the first rejected one, plus one token of the target's own. With each drafted
token accepted with probability ``acceptance_rate`` (alpha), independently, a step yields
``E = (1 - alpha^(k+1)) / (1 - alpha)`` tokens per sequence on average (Leviathan, Kalman and
Matias, "Fast Inference from Transformers via Speculative Decoding", ICML'23, eq. 1; Chen et al.,
"Accelerating LLM Decoding with Speculative Sampling", 2023).

Proposers (``kind``): ``draft_model``, a smaller model of the catalogue (``draft_model``) run k
times per step; ``eagle``, one decoder layer of the target's width and the LM head run k times (Li
et al., "EAGLE", ICML'24: the draft head is a single transformer layer); ``ngram``, prompt lookup on
the host (vLLM's ``ngram`` method), with no GPU work. The acceptance rate is the user's measured
figure (published ones: docs/speculative.md); there is no default, because it depends on the
proposer, the model pair, the task and the temperature.

The rate is one number for every request, or a beta distribution each request draws its own rate
from (``{kind: beta, mean, concentration}``), and tenants may have their own
(``tenant_acceptance_rates``): acceptance differs by task (EAGLE's acceptance length is higher on
code than on chat: Li et al., Table 1; vLLM's n-gram lookup pays off on summarisation and code
editing, where outputs repeat the prompt). A request keeps its rate wherever it runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from clustersim.config.base import StrictModel

ProposerKind = Literal["draft_model", "eagle", "ngram"]
MAX_SPECULATIVE_TOKENS = 16  # vLLM's examples and EAGLE's trees use 1-8; more only costs verify work


class BetaAcceptance(StrictModel):
    """Each request draws its acceptance rate from a beta distribution of this ``mean`` and
    ``concentration`` (alpha + beta of the distribution: larger is narrower; the standard deviation
    is ``sqrt(mean (1 - mean) / (concentration + 1))``)."""

    kind: Literal["beta"]
    mean: float = Field(gt=0.0, lt=1.0)
    concentration: float = Field(gt=0.0, le=1e4)

    def tokens_per_step(self, num_speculative_tokens: int) -> float:
        """E averaged over the distribution (midpoint rule on 2,000 cells of the density)."""
        a, b = self.mean * self.concentration, (1.0 - self.mean) * self.concentration
        cells = 2000
        logs = [_beta_log_density((i + 0.5) / cells, a, b) for i in range(cells)]
        top = max(logs)
        weights = [math.exp(v - top) for v in logs]
        values = [expected_tokens_per_step((i + 0.5) / cells, num_speculative_tokens) for i in range(cells)]
        return sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights)


def _rate_form(value: Any) -> str:
    """A mapping is a distribution (its errors are its own), anything else a number."""
    return "distribution" if isinstance(value, dict | BetaAcceptance) else "number"


AcceptanceRate = Annotated[
    Annotated[float, Field(ge=0.0, le=1.0), Tag("number")] | Annotated[BetaAcceptance, Tag("distribution")],
    Discriminator(_rate_form),
]


class Speculative(StrictModel):
    """Speculative decoding: the proposer, how many tokens it drafts, how often each is accepted."""

    kind: ProposerKind
    num_speculative_tokens: int = Field(ge=1, le=MAX_SPECULATIVE_TOKENS)
    acceptance_rate: AcceptanceRate
    tenant_acceptance_rates: dict[str, AcceptanceRate] = Field(default_factory=dict)
    draft_model: str | None = None

    @model_validator(mode="after")
    def _draft(self) -> Speculative:
        if self.kind == "draft_model" and self.draft_model is None:
            raise ValueError("draft_model: kind draft_model needs the draft model's name (a catalogue model)")
        if self.kind != "draft_model" and self.draft_model is not None:
            raise ValueError(f"draft_model: only kind draft_model runs a draft model (this is {self.kind})")
        return self

    def rate_of(self, tenant: str) -> float | BetaAcceptance:
        """The acceptance rate (or its distribution) of ``tenant``'s requests."""
        return self.tenant_acceptance_rates.get(tenant, self.acceptance_rate)

    def tokens_per_step(self, tenant: str | None = None) -> float:
        """E: tokens a sequence (of ``tenant``, else of the default rate) gains per verify step on average."""
        rate = self.acceptance_rate if tenant is None else self.rate_of(tenant)
        if isinstance(rate, BetaAcceptance):
            return rate.tokens_per_step(self.num_speculative_tokens)
        return expected_tokens_per_step(rate, self.num_speculative_tokens)

    def uniform(self, tenants: Iterable[str]) -> bool:
        """Whether every request of these tenants has one and the same fixed rate."""
        rates = [self.rate_of(t) for t in tenants]
        return not any(isinstance(r, BetaAcceptance) for r in rates) and len(set(rates)) <= 1

    def max_tokens_per_step(self, tenants: Iterable[str]) -> float:
        """The most tokens per verify step any request of these tenants may gain (a drawn rate may
        approach 1: ``k + 1``). Decode steps are priced as this share of a verify cycle, and slower
        requests gain a token at only some of them (:mod:`clustersim.shares`)."""
        k = self.num_speculative_tokens
        best = 0.0
        for tenant in tenants:
            rate = self.rate_of(tenant)
            best = max(best, k + 1.0 if isinstance(rate, BetaAcceptance) else expected_tokens_per_step(rate, k))
        return best


def expected_tokens_per_step(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """``(1 - alpha^(k+1)) / (1 - alpha)``: the accepted drafts (a geometric run cut at k) plus the
    target's own token; ``k + 1`` when every draft is accepted."""
    alpha, k = acceptance_rate, num_speculative_tokens
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def _beta_log_density(x: float, a: float, b: float) -> float:
    """The log of the beta(a, b) density at ``x`` in (0, 1), up to its constant."""
    return (a - 1.0) * math.log(x) + (b - 1.0) * math.log1p(-x)
