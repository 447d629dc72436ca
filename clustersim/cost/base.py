"""What every cost model takes and gives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol


class StepBatch(NamedTuple):
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


@dataclass(frozen=True, slots=True)
class DecodeStepShape:
    """A pure-decode step's duration as a function of the total context ``C`` its sequences attend to.

    ``duration_s(C) = max(floor_s, fixed_s + sum over pieces (a, b, c, d) of max(a + b*C, c + d*C))``

    Each piece is one roofline op whose compute and memory times are both affine in ``C`` (for a
    fixed number of sequences), with slopes ``b, d >= 0``, so the sum never decreases in ``C``.
    ``floor_s`` is the host time of an engine that overlaps it with the GPU (0: none): a step never
    takes less. Runs of decode steps whose context grows by the batch size each step can then be
    summed in closed form (:mod:`clustersim.cost.runs`): the leading steps below the floor take
    the floor, the rest the sum.
    """

    fixed_s: float
    pieces: tuple[tuple[float, float, float, float], ...] = ()
    floor_s: float = 0.0

    def kernels_s(self, context_tokens: float) -> float:
        """The duration without the floor."""
        total = self.fixed_s
        for a, b, c, d in self.pieces:
            total += max(a + b * context_tokens, c + d * context_tokens)
        return total

    def duration_s(self, context_tokens: float) -> float:
        total = self.fixed_s
        for a, b, c, d in self.pieces:
            total += max(a + b * context_tokens, c + d * context_tokens)
        floor_s = self.floor_s
        return total if total >= floor_s else floor_s


class CostModel(Protocol):
    """Anything that prices a step.

    Invariant: for every ``n`` and ``C``, ``step_duration_s(StepBatch(num_decode_seqs=n,
    decode_context_tokens=C)) == decode_step_shape(n).duration_s(C)`` (to float rounding).
    """

    def step_duration_s(self, batch: StepBatch) -> float:
        """Wall-clock seconds one iteration of ``batch`` takes on one replica."""
        ...

    def decode_step_shape(self, num_seqs: int) -> DecodeStepShape:
        """The duration of a pure-decode step of ``num_seqs`` sequences, as a function of total context."""
        ...
