"""The KV ledger row of a step or a run of steps, gathered from the replica's state (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from clustersim.architecture import blocks_for_tokens
from clustersim.cost.runs import run_duration_s, run_integrals
from clustersim.kvcache.ledger import RunSpan
from clustersim.kvcache.ledger_batch import Row, batches_short_run, pending_row, short_run_row
from clustersim.kvcache.manager import KVManager
from clustersim.replica.step import Step

if TYPE_CHECKING:  # the core calls these; they only read it
    from clustersim.replica.core import Core


NOT_RELEASED = (0.0, 0.0)  # no pull cancelled during the run: no blocks held beyond the last step's


def memory_record(
    core: Core, step: Step, num_steps: int, now_s: float, last_index: int, grown: int, released: tuple[float, float]
) -> Row:
    """The ledger row of the steps of ``step`` just ended (before finished sequences retire), as the
    inputs :func:`~clustersim.kvcache.ledger_batch.ledger_columns` turns into the row when it is written;
    ``released``: :func:`released_blocks` of the run."""
    kv, seats = core.kv, core.seats
    bs = kv.block_size_tokens
    filled = kv.filled_blocks
    if seats.prefilling:
        filled += sum(blocks_for_tokens(s.done_tokens, bs) for s in seats.prefilling.values())
    cached = kv.prefix.num_blocks if kv.prefix is not None else 0
    external = kv.external_frag_tokens(core.head()) if kv.has_external_fragmentation else 0
    changed = step.external_changed_at_step
    if changed >= num_steps:  # every step it covers ended before the waiting head changed
        external = step.external_before_tokens
    head = (
        core.spec.index,
        step.started_at_s,
        now_s - step.started_at_s,
        kv.pool.num_total_blocks,
        seats.stored_tokens(last_index),
        filled,
        kv.pool.num_used_blocks - cached,
        cached,
        external,
        bs,
        kv.spec.bytes_per_token,
    )
    in_flight = (core.remote.in_flight_blocks, *released)  # the row's last fields
    anchor = step.anchor
    if num_steps <= 1 or anchor is None:
        return pending_row(head) + in_flight
    shape = anchor.shape
    if not batches_short_run(shape, num_steps, bs):
        return pending_row(head, run_span(kv, step, num_steps, grown, changed)) + in_flight
    n, context = step.batch.num_decode_seqs, step.batch.decode_context_tokens
    changed_after_s = run_duration_s(shape, context, n, changed) if 0 < changed < num_steps else 0.0
    blocks = kv.growth_counts(step.first_index + 1, num_steps - 1)
    row = short_run_row(
        head, num_steps, n, grown, kv.growing, step.external_before_tokens, changed_after_s, shape, context, blocks
    )
    return row + in_flight


def released_blocks(core: Core, step: Step, num_steps: int, now_s: float) -> tuple[float, float]:
    """How many more blocks the steps of a run held on average, and at most at any step's end, than at
    its last, for pulls cancelled during it (:meth:`Core.cancel_pull`): each step's values are those
    at its end, as the step-by-step mode records them."""
    released = step.released_in_flight
    if not released or num_steps <= 1 or step.anchor is None:
        return 0.0, 0.0
    kv, first = core.kv, step.first_index
    shape, n, context = step.anchor.shape, step.batch.num_decode_seqs, step.batch.decode_context_tokens
    held_block_s, worst = 0.0, 0.0
    for ended, blocks in released:
        held_block_s += blocks * run_duration_s(shape, context, n, min(ended, num_steps))
    for ended, _ in released:  # the last step before each release held every block released after it
        held = sum(blocks for later, blocks in released if later >= ended)
        grown_after = kv.growth(first + ended, first + num_steps - 1) if kv.growing and ended < num_steps else 0
        worst = max(worst, float(held - grown_after))
    duration_s = now_s - step.started_at_s
    return (held_block_s / duration_s if duration_s > 0 else 0.0), worst


def run_span(kv: KVManager, step: Step, num_steps: int, grown: int, changed: int) -> RunSpan:
    """How the ledger's values moved over the run's steps (closed-form time integrals)."""
    n, context = step.batch.num_decode_seqs, step.batch.decode_context_tokens
    assert step.anchor is not None
    shape, first = step.anchor.shape, step.first_index
    blocks = kv.growth_counts(first + 1, min(num_steps - 1, kv.block_size_tokens))
    duration_s, index_integral_s, growth_integral_s = run_integrals(shape, context, n, num_steps, blocks)
    changed_after_s = run_duration_s(shape, context, n, changed) if 0 < changed < num_steps else 0.0
    return RunSpan(
        num_steps,
        n,
        grown,
        kv.growing,
        duration_s,
        index_integral_s,
        growth_integral_s,
        step.external_before_tokens,
        changed_after_s,
    )
