"""Static (request-level) batching: a batch is formed only when the replica is idle and runs to the end.

Every sequence reserves KV for its prompt and output on admission. With ``batch_wait_s`` > 0 an
idle replica with fewer than ``max_num_seqs`` waiting requests waits until the oldest has waited
that long (or enough arrive) before forming the batch, trading latency for fuller batches.
"""

from __future__ import annotations

from clustersim.replica.batching.base import BatchingPolicy, PolicyBase, StepBuilder, StepLimits, Waiting


class Static(PolicyBase):
    kind = "static"
    whole_sequence_kv = True
    holds = True

    def __init__(self, batch_wait_s: float = 0.0, max_num_seqs: int = 1) -> None:
        self.batch_wait_s = batch_wait_s
        self.max_num_seqs = max_num_seqs

    @classmethod
    def build(cls, limits: StepLimits) -> BatchingPolicy:
        return cls(limits.batch_wait_s, limits.max_num_seqs)

    def plan(self, step: StepBuilder) -> None:
        if step.num_seats == 0:
            step.admit(chunked=False)
        else:
            step.decode()

    def hold_until_s(self, now_s: float, num_seats: int, waiting: Waiting) -> float | None:
        if self.batch_wait_s <= 0 or num_seats or not 0 < len(waiting) < self.max_num_seqs:
            return None
        deadline_s = min(request.arrival_at_s for request in waiting) + self.batch_wait_s
        return deadline_s if now_s < deadline_s else None
