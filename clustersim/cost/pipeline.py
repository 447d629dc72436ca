"""Pipeline parallelism with a micro-batch per stage in flight (pure).

Serving engines keep one batch in flight per pipeline stage: vLLM V1's engine core queues up to
``pipeline_parallel_size`` scheduled batches (``EngineCore.step_with_batch_queue``,
``max_concurrent_batches``) and the scheduler skips requests already in flight; TensorRT-LLM's batch
manager schedules ``mNumMicroBatches = pp`` micro-batches (``TrtGptModelInflightBatching``); SGLang's
``event_loop_pp`` runs ``pp_size`` micro-batches of at most ``max_running_requests // pp_size``
requests; vLLM V0 ran one scheduler (a virtual engine) per stage. Each micro-batch has its own token
budget; a request is in one micro-batch at a time, so its next token comes a full trip through the
pipeline after its last.

The replica's core still schedules one batch per step (every running sequence, with ``pp`` times the
token budget: :attr:`~clustersim.replica.batching.StepLimits.num_micro_batches`). Here that batch is
split into ``m = min(pp, sequences)`` micro-batches (even shares of the decodes; prompt chunks whole,
largest first, each to the lightest micro-batch), and the step costs the
largest micro-batch's trip through every stage (the wrapped model's price of it, all layers and the
``pp - 1`` hand-offs). That is the cycle in which every sequence gains its token: each stage works
on the ``m`` micro-batches in turn, ``m x`` a stage's share of a micro-batch's trip at most, which is
never longer than the trip itself; and no sequence's token comes sooner than its micro-batch's trip.
With ``m = pp`` equal micro-batches the pipeline is full. Compute-bound work (prompts) then runs on
every GPU at once: ``pp`` times the throughput of one batch in flight. Memory-bound work (decode)
reads a stage's weights once per micro-batch, so the same sequences cost about what they cost as one
batch; it gains where the micro-batches hold more sequences than one batch could (TensorRT-LLM's
``max_batch_size`` is per micro-batch: :attr:`~clustersim.replica.batching.BatchingPolicy.seqs_per_micro_batch`).
What it leaves out: the bubble while micro-batches of unequal cost wait on each other at a stage
(the step takes the largest's trip, an upper bound), and the per-micro-batch cap on sequences when
an even share of the decodes would exceed it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from clustersim.cost.base import CostModel, DecodeStepShape, StepBatch
from clustersim.cost.speculative import VerifyingCostModel


def largest_micro_batch(batch: StepBatch, num_stages: int) -> StepBatch:
    """The micro-batch with the most tokens when ``batch`` is split over ``min(num_stages, sequences)``
    micro-batches: prompt chunks kept whole, largest first, each to the micro-batch with the fewest
    tokens; the decodes spread evenly, the lightest micro-batches taking one more (a running request
    stays in its micro-batch from step to step, so the engines' micro-batches hold even shares of
    them). Its decodes attend to their share of the batch's decode context."""
    m = min(num_stages, batch.num_seqs)
    if m <= 1:
        return batch
    new = batch.prefill_new_tokens
    members: list[list[int]] = [[] for _ in range(m)]  # the chunks of each micro-batch
    heap = [(0, i) for i in range(m)]  # (tokens, micro-batch)
    for j in sorted(range(len(new)), key=lambda j: (-new[j], j)):
        tokens, i = heapq.heappop(heap)
        members[i].append(j)
        heapq.heappush(heap, (tokens + new[j], i))
    ranked = sorted(heap)  # lightest first
    each, extra = divmod(batch.num_decode_seqs, m)
    decodes = [each + (k < extra) for k in range(m)]  # the lightest take one more
    top = max(range(m), key=lambda k: (ranked[k][0] + decodes[k], decodes[k]))
    chunks = sorted(members[ranked[top][1]])
    num_decode = decodes[top]
    context = batch.decode_context_tokens * num_decode / batch.num_decode_seqs if num_decode else 0
    return StepBatch(
        tuple(new[j] for j in chunks),
        tuple(batch.prefill_context_tokens[j] for j in chunks),
        num_decode,
        context,  # type: ignore[arg-type]  # a share of the context: fractional in general
    )


def _share(shape: DecodeStepShape, fraction: float) -> DecodeStepShape:
    """``shape`` of a micro-batch whose context is ``fraction`` of the whole batch's: slopes scaled."""
    pieces = tuple((a, b * fraction, c, d * fraction) for a, b, c, d in shape.pieces)
    return DecodeStepShape(shape.fixed_s, pieces, shape.floor_s)


@dataclass
class PipelinedCostModel:
    """``inner``'s price of the largest of ``num_stages`` micro-batches in flight (a :class:`CostModel`)."""

    inner: CostModel
    num_stages: int
    _shapes: dict[tuple[int, int], DecodeStepShape] = field(default_factory=dict, init=False, repr=False)

    def step_duration_s(self, batch: StepBatch) -> float:
        return self.inner.step_duration_s(largest_micro_batch(batch, self.num_stages))

    def decode_step_shape(self, num_seqs: int) -> DecodeStepShape:
        return self._shape(num_seqs, 1)

    def verify_step_shape(self, num_seqs: int, tokens_per_seq: int) -> DecodeStepShape:
        return self._shape(num_seqs, tokens_per_seq)

    def _shape(self, num_seqs: int, tokens_per_seq: int) -> DecodeStepShape:
        key = (num_seqs, tokens_per_seq)
        shape = self._shapes.get(key)
        if shape is None:
            m = min(self.num_stages, num_seqs)
            largest = -(-num_seqs // m) if m > 1 else num_seqs
            if tokens_per_seq == 1:
                inner = self.inner.decode_step_shape(largest)
            else:
                inner = _verifying(self.inner).verify_step_shape(largest, tokens_per_seq)
            shape = self._shapes[key] = _share(inner, largest / num_seqs) if largest != num_seqs else inner
        return shape


def _verifying(model: CostModel) -> VerifyingCostModel:
    if not hasattr(model, "verify_step_shape"):
        raise TypeError(f"{type(model).__name__} cannot price a verify step")
    return model  # type: ignore[return-value]
