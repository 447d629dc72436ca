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


class SeqsRule(StrictModel):
    """An engine that sizes its running-request cap by its KV pool (SGLang, where ``--max-running-requests``
    is unset): ``min(kv_tokens // kv_tokens_per_seq, clamp(int(kv_tokens / context_len x
    pool_seqs_per_context_len), pool_min_seqs, pool_max_seqs))``, ``kv_tokens`` the replica's KV pool and
    ``context_len`` the model's longest context (``python/sglang/srt/model_executor/model_runner.py``
    ``init_memory_pool``: the request pool's ``max_num_reqs``; ``scheduler.py``: ``max_running_requests``,
    the lesser of ``max_total_num_tokens // 2`` and that pool)."""

    kv_tokens_per_seq: PositiveInt
    pool_seqs_per_context_len: PositiveInt
    pool_min_seqs: PositiveInt
    pool_max_seqs: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> SeqsRule:
        if self.pool_min_seqs > self.pool_max_seqs:
            least, most = self.pool_min_seqs, self.pool_max_seqs
            raise ValueError(f"pool_min_seqs ({least}) must be at most pool_max_seqs ({most})")
        return self

    def max_seqs(self, kv_tokens: int, context_len_tokens: int) -> int:
        """The running-request cap of a replica whose KV pool holds ``kv_tokens`` (at least 1)."""
        pool = int(kv_tokens / context_len_tokens * self.pool_seqs_per_context_len)
        pool = min(max(pool, self.pool_min_seqs), self.pool_max_seqs)
        return max(1, min(kv_tokens // self.kv_tokens_per_seq, pool))
