"""The teaching cost model: every step takes the same time, whatever is in it."""

from __future__ import annotations

from dataclasses import dataclass

from clustersim.cost.base import DecodeStepShape, StepBatch


@dataclass(frozen=True, slots=True)
class UnitCostModel:
    """Every step takes ``step_time_s`` seconds (1 s by default): times read as step counts."""

    step_time_s: float = 1.0

    def step_duration_s(self, batch: StepBatch) -> float:
        return self.step_time_s

    def decode_step_shape(self, num_seqs: int) -> DecodeStepShape:
        return DecodeStepShape(self.step_time_s)

    def verify_step_shape(self, num_seqs: int, tokens_per_seq: int) -> DecodeStepShape:
        return DecodeStepShape(self.step_time_s)
