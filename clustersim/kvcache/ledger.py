"""The KV ledger: where a replica's KV capacity went during a step or a run of steps (pure).

Categories add up to the capacity: tokens stored; internal fragmentation (unused slots of partly
filled blocks); reserved but unused (blocks reserved beyond what is filled: contiguous or static
reservations, and prompts still being prefilled); external fragmentation (free memory that cannot
take the waiting head because no hole is large enough); cached prefixes; free headroom.

A row covers one step, or a run of identical decode steps; its values are time-weighted means over
the steps it covers (each step's values are those at its end, before finished sequences retire),
and ``min_free_bytes`` is the least free headroom any of its steps had. Within a run the stored
tokens grow by the batch size each step and blocks are taken at block boundaries, so the means
come from the closed-form integrals of :func:`clustersim.cost.runs.run_integrals`, never from a
loop over steps: a run's row equals the time-weighted mean of the rows its steps would have.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LedgerEnd:
    """A replica's KV state at the end of the last step a row covers (blocks, or tokens where named)."""

    total_blocks: int
    stored_tokens: int
    filled_blocks: int  # blocks the stored tokens fill (sequences' own blocks, prefilling ones included)
    used_blocks: int  # blocks the sequences hold (cached prefix blocks excluded)
    cached_blocks: int
    external_tokens: int  # free tokens the waiting head cannot use


@dataclass(frozen=True, slots=True)
class RunSpan:
    """How the values moved over the steps a row covers (a single step: the defaults).

    ``tokens_per_step``: stored tokens added per step; ``grown_blocks``: blocks taken at steps
    1..K-1 (by growing sequences, which also fill them); ``duration_s``, ``index_integral_s`` and
    ``growth_integral_s``: the run's ``T``, ``sum dur_j * j`` and ``sum dur_j * G_j``.
    ``external_before_tokens`` applied to the steps ending in the first ``external_changed_after_s``
    seconds (the waiting head changed during the run).
    """

    num_steps: int = 1
    tokens_per_step: int = 0
    grown_blocks: int = 0
    growing: bool = True
    duration_s: float = 0.0
    index_integral_s: float = 0.0
    growth_integral_s: float = 0.0
    external_before_tokens: int = 0
    external_changed_after_s: float = 0.0


SINGLE_STEP = RunSpan()

LedgerRow = tuple[float, float, float, float, float, float, float, float]


def ledger_row(end: LedgerEnd, span: RunSpan, block_size_tokens: int, bytes_per_token: float) -> LedgerRow:
    """``(capacity, stored, internal_frag, reserved_unused, external_frag, cached_prefix, free, min_free)`` bytes."""
    bs, b = block_size_tokens, bytes_per_token
    total, cached = end.total_blocks, end.cached_blocks
    stored: float = end.stored_tokens
    filled: float = end.filled_blocks
    used: float = end.used_blocks
    external: float = end.external_tokens
    worst_external = end.external_tokens
    last_free = (total - end.used_blocks - cached) * bs
    if span.num_steps > 1 and span.duration_s > 0:
        mean_index = span.index_integral_s / span.duration_s
        mean_growth = span.growth_integral_s / span.duration_s
        stored = end.stored_tokens - span.tokens_per_step * (span.num_steps - 1) + span.tokens_per_step * mean_index
        filled = end.filled_blocks - span.grown_blocks + mean_growth
        if span.growing:
            used = end.used_blocks - span.grown_blocks + mean_growth
        if span.external_changed_after_s > 0:
            before_s = span.external_changed_after_s
            external = (
                span.external_before_tokens * before_s + end.external_tokens * (span.duration_s - before_s)
            ) / span.duration_s
            worst_external = max(worst_external, span.external_before_tokens)
    free = (total - used - cached) * bs
    return (
        total * bs * b,
        stored * b,
        (filled * bs - stored) * b,
        (used - filled) * bs * b,
        external * b,
        cached * bs * b,
        (free - external) * b,
        (last_free - worst_external) * b,
    )
