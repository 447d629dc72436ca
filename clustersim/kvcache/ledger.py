"""The KV ledger: where a replica's KV capacity went during a step or a run of steps (pure).

Categories add up to the capacity: tokens stored; internal fragmentation (unused slots of partly
filled blocks); reserved but unused (blocks reserved beyond what is filled: contiguous or static
reservations, and prompts still being prefilled); external fragmentation (free memory that cannot
take the waiting head because no hole is large enough); cached prefixes; KV caches in flight
between replicas (disaggregation: a prefill replica's blocks kept until the decode replica has
them, a decode replica's blocks taken for a KV cache on its way); free headroom.

A row covers one step, or a run of identical decode steps; its values are time-weighted means over
the steps it covers (each step's values are those at its end, before finished sequences retire),
and ``min_free_bytes`` is the least free headroom any of its steps had. Within a run the stored
tokens grow by the batch size each step and blocks are taken at block boundaries, so the means
come from the closed-form integrals of :func:`clustersim.cost.runs.run_integrals`, never from a
loop over steps: a run's row equals the time-weighted mean of the rows its steps would have.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from clustersim.records import MemoryRecord


class RunSpan(NamedTuple):
    """How the values moved over the steps a row covers.

    ``tokens_per_step``: stored tokens added per step; ``grown_blocks``: blocks taken at steps
    1..K-1 (by growing sequences, which also fill them); ``duration_s``, ``index_integral_s`` and
    ``growth_integral_s``: the run's ``T``, ``sum dur_j * j`` and ``sum dur_j * G_j``.
    ``external_before_tokens`` applied to the steps ending in the first ``external_changed_after_s``
    seconds (the waiting head changed during the run; 0: it did not).
    """

    num_steps: int
    tokens_per_step: int
    grown_blocks: int
    growing: bool
    duration_s: float
    index_integral_s: float
    growth_integral_s: float
    external_before_tokens: int = 0
    external_changed_after_s: float = 0.0


def ledger_row(
    replica: int,
    started_at_s: float,
    duration_s: float,
    total_blocks: int,
    stored_tokens: int,
    filled_blocks: int,
    used_blocks: int,
    cached_blocks: int,
    external_tokens: int,
    block_size_tokens: int,
    bytes_per_token: float,
    span: RunSpan | None = None,
    in_flight_blocks: int = 0,
    released_mean_blocks: float = 0.0,
    released_worst_blocks: float = 0.0,
) -> MemoryRecord:
    """The ledger row of the step (or run of steps) of ``replica`` that started at ``started_at_s``.

    The arguments are the replica's KV at the end of the last step the row covers: blocks the stored
    tokens fill (prefilling sequences included), blocks the sequences hold (cached prefix blocks
    excluded, blocks in flight included), cached prefix blocks, and free tokens the waiting head cannot
    use. ``span``: how they moved over a run of steps (None: one step). ``in_flight_blocks``: blocks
    held for KV caches moving between replicas at the end; ``released_mean_blocks``: how many more were
    held on average over the steps (a pull cancelled during a run gives its blocks back: the steps that
    ended before held them, in flight and in use), ``released_worst_blocks``: the most more in use at the
    end of any step than at the last one, for the least free headroom.
    """
    bs, b, total, cached = block_size_tokens, bytes_per_token, total_blocks, cached_blocks
    stored: float = stored_tokens
    filled: float = filled_blocks
    used: float = used_blocks
    external: float = external_tokens
    worst_external = external_tokens
    last_free = (total - used_blocks - cached) * bs - released_worst_blocks * bs
    if span is not None and span.num_steps > 1 and span.duration_s > 0:
        mean_index = span.index_integral_s / span.duration_s
        mean_growth = span.growth_integral_s / span.duration_s
        stored = stored_tokens - span.tokens_per_step * (span.num_steps - 1) + span.tokens_per_step * mean_index
        filled = filled_blocks - span.grown_blocks + mean_growth
        if span.growing:
            used = used_blocks - span.grown_blocks + mean_growth
        if span.external_changed_after_s > 0:
            before_s = span.external_changed_after_s
            external = (
                span.external_before_tokens * before_s + external_tokens * (span.duration_s - before_s)
            ) / span.duration_s
            worst_external = max(worst_external, span.external_before_tokens)
    used = used + released_mean_blocks
    in_flight = in_flight_blocks + released_mean_blocks
    return MemoryRecord(
        replica,
        started_at_s,
        duration_s,
        *ledger_bytes(total, bs, b, stored, filled, used, external, cached, last_free, worst_external, in_flight),
    )


def ledger_bytes(
    total: Any, bs: Any, b: Any, stored: Any, filled: Any, used: Any, external: Any, cached: Any, last_free: Any,
    worst_external: Any, in_flight: Any = 0,
) -> tuple[Any, ...]:  # fmt: skip
    """The row's byte columns from its means (numbers, or NumPy arrays of a batch of rows: the same
    operations, in the same order): capacity, then the categories in the order of
    :data:`~clustersim.records.LEDGER_CATEGORIES`, then the least free headroom."""
    free = (total - used - cached) * bs
    return (
        total * bs * b,  # capacity_bytes
        stored * b,  # stored_bytes
        (filled * bs - stored) * b,  # internal_frag_bytes
        (used - in_flight - filled) * bs * b,  # reserved_unused_bytes
        external * b,  # external_frag_bytes
        cached * bs * b,  # cached_prefix_bytes
        in_flight * bs * b,  # in_flight_bytes
        (free - external) * b,  # free_bytes
        (last_free - worst_external) * b,  # min_free_bytes
    )
