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
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from clustersim.config.base import StrictModel

ProposerKind = Literal["draft_model", "eagle", "ngram"]
MAX_SPECULATIVE_TOKENS = 16  # vLLM's examples and EAGLE's trees use 1-8; more only costs verify work


class Speculative(StrictModel):
    """Speculative decoding: the proposer, how many tokens it drafts, how often each is accepted."""

    kind: ProposerKind
    num_speculative_tokens: int = Field(ge=1, le=MAX_SPECULATIVE_TOKENS)
    acceptance_rate: float = Field(ge=0.0, le=1.0)
    draft_model: str | None = None

    @model_validator(mode="after")
    def _draft(self) -> Speculative:
        if self.kind == "draft_model" and self.draft_model is None:
            raise ValueError("draft_model: kind draft_model needs the draft model's name (a catalogue model)")
        if self.kind != "draft_model" and self.draft_model is not None:
            raise ValueError(f"draft_model: only kind draft_model runs a draft model (this is {self.kind})")
        return self

    def tokens_per_step(self) -> float:
        """E: tokens a sequence gains per verify step on average."""
        return expected_tokens_per_step(self.acceptance_rate, self.num_speculative_tokens)


def expected_tokens_per_step(acceptance_rate: float, num_speculative_tokens: int) -> float:
    """``(1 - alpha^(k+1)) / (1 - alpha)``: the accepted drafts (a geometric run cut at k) plus the
    target's own token; ``k + 1`` when every draft is accepted."""
    alpha, k = acceptance_rate, num_speculative_tokens
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)
