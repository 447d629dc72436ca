"""Speculative decoding's price of a token: a verify step and the drafts, shared by the tokens they yield (pure).

A pure-decode step under speculative decoding is one verify cycle per sequence: the proposer drafts
``k`` tokens (``k`` decode steps of the draft model or EAGLE head; nothing on the GPU for n-gram
lookup), then the target computes ``k + 1`` tokens per sequence in one forward pass
(:meth:`~clustersim.cost.roofline.RooflineCostModel.verify_step_shape`), and each sequence keeps ``E``
tokens on average (:func:`clustersim.config.speculative.expected_tokens_per_step`).

The replica's core advances every decoding sequence one token per decode step, so here a decode
step is a token's share of a cycle: ``(verify + k x draft) / E``. Tokens, KV growth and time per
token are then right on average, and every closed form the fast path uses holds (the shape is the
cycle's divided by ``E``: still ``max(floor, fixed + sum of max(affine, affine))`` in the context).
A step that carries prompt chunks runs without speculation (SGLang and vLLM V0 speculate only in
decode batches; vLLM V1 also speculates beside chunks): the target's step, plus the proposer's pass
over the same tokens, which keeps its KV cache whole. What it leaves out: tokens arrive one by one
at the mean pace, not in bursts of accepted drafts (the mean ITL and TPOT are right, the spread of
single gaps is not). With acceptance rates that differ by tenant or request, ``E`` is the fastest
request's and slower ones gain a token at only their share of the steps (:mod:`clustersim.acceptance`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from clustersim.cost.base import CostModel, DecodeStepShape, StepBatch


class VerifyingCostModel(CostModel, Protocol):
    """A cost model that also prices a step of several tokens per sequence."""

    def verify_step_shape(self, num_seqs: int, tokens_per_seq: int) -> DecodeStepShape: ...


def scaled(shape: DecodeStepShape, factor: float) -> DecodeStepShape:
    """``shape`` with every time multiplied by ``factor`` > 0 (max and sum commute with it)."""
    pieces = tuple((a * factor, b * factor, c * factor, d * factor) for a, b, c, d in shape.pieces)
    return DecodeStepShape(shape.fixed_s * factor, pieces, shape.floor_s * factor)


def cycle_shape(verify: DecodeStepShape, draft: DecodeStepShape | None, num_drafts: int) -> DecodeStepShape:
    """One verify cycle: the verify step and ``num_drafts`` draft steps (their host floors do not add:
    the drafts are GPU work inside the engine's step)."""
    if draft is None:
        return verify
    drafts = scaled(draft, float(num_drafts))
    return DecodeStepShape(verify.fixed_s + drafts.fixed_s, verify.pieces + drafts.pieces, verify.floor_s)


@dataclass
class SpeculativeCostModel:
    """``target``'s steps with speculative decoding on its pure-decode steps (a :class:`CostModel`)."""

    target: VerifyingCostModel
    draft: CostModel | None  # the proposer's GPU work per drafted token; None: none (n-gram)
    num_speculative_tokens: int
    tokens_per_step: float  # E (the fastest request's, when rates differ)
    _shapes: dict[int, DecodeStepShape] = field(default_factory=dict, init=False, repr=False)

    def decode_step_shape(self, num_seqs: int) -> DecodeStepShape:
        shape = self._shapes.get(num_seqs)
        if shape is None:
            k = self.num_speculative_tokens
            verify = self.target.verify_step_shape(num_seqs, k + 1)
            draft = self.draft.decode_step_shape(num_seqs) if self.draft is not None else None
            shape = self._shapes[num_seqs] = scaled(cycle_shape(verify, draft, k), 1.0 / self.tokens_per_step)
        return shape

    def step_duration_s(self, batch: StepBatch) -> float:
        """A pure-decode step: a token's share of a verify cycle. A step with prompt chunks: the
        target's, plus the proposer's pass over the same tokens (a draft model or EAGLE head builds
        its own KV cache of every prompt and token it will draft from)."""
        if batch.prefill_new_tokens or not batch.num_decode_seqs:
            draft_s = self.draft.step_duration_s(batch) if self.draft is not None and batch.num_tokens else 0.0
            return self.target.step_duration_s(batch) + draft_s
        return self.decode_step_shape(batch.num_decode_seqs).duration_s(batch.decode_context_tokens)
