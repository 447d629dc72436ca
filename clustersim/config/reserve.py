"""The scheduler's reserve for the running requests' future tokens (SGLang's ``new_token_ratio``)."""

from __future__ import annotations

from pydantic import Field, PositiveInt, model_validator

from clustersim.config.base import StrictModel


class DecodeReserve(StrictModel):
    """Admission holds back KV for the tokens the running requests have yet to make.

    SGLang's ``PrefillAdder`` (``python/sglang/srt/managers/schedule_policy.py``) admits a waiting
    request only if its prompt plus ``min(max_new_tokens, clip_tokens)`` fits in the free (and
    evictable) KV tokens less ``ratio`` x each running request's ``min(max_new_tokens - made,
    clip_tokens)``. The ratio starts at ``init_ratio``, falls by ``(init_ratio - min_ratio) /
    decay_steps`` at each decode step down to ``min_ratio``, returns to ``init_ratio`` when the
    replica is idle, and when a decode step finds no room the newest requests are retracted until
    ``retract_steps`` tokens per remaining request are free and the ratio is set to ``(tokens made +
    retract_steps x requests) / max_new_tokens`` of those remaining (at most 1).
    """

    init_ratio: float = Field(gt=0.0, le=1.0)
    min_ratio: float = Field(ge=0.0, le=1.0)
    decay_steps: PositiveInt
    clip_tokens: PositiveInt
    retract_steps: int = Field(ge=0, le=2**20)

    @model_validator(mode="after")
    def _floor_below_start(self) -> DecodeReserve:
        if self.min_ratio > self.init_ratio:
            raise ValueError(f"min_ratio ({self.min_ratio}) must be at most init_ratio ({self.init_ratio})")
        return self

    @property
    def decay_per_step(self) -> float:
        return (self.init_ratio - self.min_ratio) / self.decay_steps
