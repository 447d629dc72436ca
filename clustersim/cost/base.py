"""What every cost model takes and gives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StepBatch:
    """The shape of one iteration, as the cost model needs it.

    Attributes:
        prefill_new_tokens: prompt tokens each prefilling sequence processes this step.
        prefill_context_tokens: tokens each of those sequences already has in the KV cache
            (0 for a whole prompt; > 0 for a later chunk of a chunked prefill).
        num_decode_seqs: sequences generating one token each.
        decode_context_tokens: sum over decode sequences of the tokens each attends to,
            the token being processed included.
    """

    prefill_new_tokens: tuple[int, ...] = ()
    prefill_context_tokens: tuple[int, ...] = ()
    num_decode_seqs: int = 0
    decode_context_tokens: int = 0

    @property
    def num_prefill_tokens(self) -> int:
        return sum(self.prefill_new_tokens)

    @property
    def num_tokens(self) -> int:
        """Tokens that pass through the linear layers this step."""
        return self.num_prefill_tokens + self.num_decode_seqs

    @property
    def num_seqs(self) -> int:
        return len(self.prefill_new_tokens) + self.num_decode_seqs


class CostModel(Protocol):
    """Anything that prices a step."""

    def step_duration_s(self, batch: StepBatch) -> float:
        """Wall-clock seconds one iteration of ``batch`` takes on one replica."""
        ...
