"""The KV ledger's rows computed a batch at a time in NumPy, bit for bit what :func:`ledger_row` gives (pure).

A replica gathers each row's inputs as one flat tuple of numbers (:func:`pending_row`), cheap to
make at the end of a step; the writer turns a batch of them into the columns of ``memory.parquet``
(:func:`ledger_columns`) when it flushes. The float arithmetic is the scalar path's, operation by
operation and in the same order, elementwise over the rows (IEEE 754 rounds each ``+ - * /`` the
same way in both), so the file is byte-identical to writing :func:`ledger_row` rows one by one.

A run of decode steps short enough for :func:`clustersim.cost.runs.run_integrals` to sum step by
step (at most the block size + 1 steps, one roofline piece) has those sums done here too, one
NumPy pass per step position over every such row of the batch; other runs bring their integrals
computed by :func:`run_integrals`.

Every integer the rows hold (tokens, blocks, steps) is far below 2**53, so holding it as a float64
is exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from clustersim.cost.base import DecodeStepShape
from clustersim.kvcache.ledger import RunSpan, ledger_bytes

MAX_BATCHED_STEPS = 17  # runs of at most this many steps (block boundaries: one fewer) are summed here
NO_SPAN = 0  # one step (or a run without a span): the row's values are those at its end
SPAN = 1  # a run whose integrals came with it
SHORT_RUN = 2  # a run whose integrals are summed here, step by step

# the row's fields, in order
(REPLICA, STARTED, DURATION, TOTAL, STORED, FILLED, USED, CACHED, EXTERNAL, BLOCK, BYTES,
 KIND, STEPS, PER_STEP, GROWN, GROWING, EXT_BEFORE, CHANGED_AFTER, RUN_S, INDEX_S, GROWTH_S,
 FIXED, A, B, C, D, FLOOR, CONTEXT) = range(28)  # fmt: skip
BLOCKS = 28  # then MAX_BATCHED_STEPS - 1 block counts (boundaries 1, 2, ...), zero-padded
WIDTH = BLOCKS + MAX_BATCHED_STEPS - 1
# a row ends with its blocks in flight between replicas (disaggregation) and how many more its steps held
# on average and at worst before a pull cancelled during the run gave them back (ledger_row's last three)
IN_FLIGHT, RELEASED_MEAN, RELEASED_WORST = WIDTH, WIDTH + 1, WIDTH + 2
_NO_RUN = (NO_SPAN,) + (0,) * (WIDTH - KIND - 1)
_NO_BLOCKS = (0,) * (MAX_BATCHED_STEPS - 1)
_NO_SHORT_RUN = (0,) * (WIDTH - GROWTH_S - 1)

Row = tuple[Any, ...]


def pending_row(head: tuple[Any, ...], span: RunSpan | None = None) -> Row:
    """A row whose ``head`` holds :func:`ledger_row`'s first eleven arguments and whose run has ``span``."""
    if span is None:
        return head + _NO_RUN
    run = (SPAN, span.num_steps, span.tokens_per_step, span.grown_blocks, span.growing, span.external_before_tokens,
           span.external_changed_after_s, span.duration_s, span.index_integral_s, span.growth_integral_s)  # fmt: skip
    return head + run + _NO_SHORT_RUN


def short_run_row(
    head: tuple[Any, ...],
    num_steps: int,
    num_seqs: int,
    grown: int,
    growing: bool,
    external_before_tokens: int,
    changed_after_s: float,
    shape: DecodeStepShape,
    first_context_tokens: int,
    blocks: list[int],
) -> Row:
    """A row of a run of ``num_steps`` <= :data:`MAX_BATCHED_STEPS` decode steps of one-piece ``shape``
    (context growing by ``num_seqs`` a step; ``blocks``: taken at boundaries 1..num_steps-1), whose
    integrals are summed when the batch is written."""
    ((a, b, c, d),) = shape.pieces
    run = (SHORT_RUN, num_steps, num_seqs, grown, growing, external_before_tokens, changed_after_s, 0.0, 0.0, 0.0,
           shape.fixed_s, a, b, c, d, shape.floor_s, first_context_tokens)  # fmt: skip
    return head + run + tuple(blocks) + _NO_BLOCKS[len(blocks) :]


def batches_short_run(shape: DecodeStepShape, num_steps: int, block_size_tokens: int) -> bool:
    """Whether a run's integrals are summed here (else :func:`run_integrals` gives them with the row)."""
    return len(shape.pieces) == 1 and num_steps <= min(block_size_tokens + 1, MAX_BATCHED_STEPS)


def _short_run_integrals(x: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], ...]:
    """``run_integrals``' step-by-step sums for rows of short runs, step position by step position."""
    steps, per_step, context = x[:, STEPS], x[:, PER_STEP], x[:, CONTEXT]
    fixed, a, b, c, d, floor = x[:, FIXED], x[:, A], x[:, B], x[:, C], x[:, D], x[:, FLOOR]
    time_s = np.zeros(len(x))
    index_sum = np.zeros(len(x))
    weighted_s = np.zeros(len(x))
    grown = np.zeros(len(x))
    for j in range(int(steps.max(initial=0))):
        active = j < steps
        at = context + per_step * j
        first, second = a + b * at, c + d * at
        duration_s = fixed + np.where(first >= second, first, second)
        duration_s = np.where(duration_s < floor, floor, duration_s)
        time_s = np.where(active, time_s + duration_s, time_s)
        index_sum = np.where(active, index_sum + j * duration_s, index_sum)
        if j:
            grown = np.where(active, grown + x[:, BLOCKS + j - 1], grown)
            weighted_s = np.where(active, weighted_s + grown * duration_s, weighted_s)
    return time_s, index_sum, weighted_s


def ledger_columns(rows: list[Row]) -> list[np.ndarray[Any, Any]]:
    """The columns of :class:`~clustersim.records.MemoryRecord` for a batch of pending rows."""
    x = np.array(rows, dtype=np.float64)
    kind = x[:, KIND]
    duration_s, index_s, growth_s = x[:, RUN_S].copy(), x[:, INDEX_S].copy(), x[:, GROWTH_S].copy()
    short = kind == SHORT_RUN
    if short.any():
        sums = _short_run_integrals(x[short])
        duration_s[short], index_s[short], growth_s[short] = sums
    bs, b, total, cached = x[:, BLOCK], x[:, BYTES], x[:, TOTAL], x[:, CACHED]
    stored_tokens, filled_blocks, used_blocks, external_tokens = x[:, STORED], x[:, FILLED], x[:, USED], x[:, EXTERNAL]
    num_steps, per_step, grown = x[:, STEPS], x[:, PER_STEP], x[:, GROWN]
    last_free = (total - used_blocks - cached) * bs - x[:, RELEASED_WORST] * bs
    spanned = (kind != NO_SPAN) & (num_steps > 1) & (duration_s > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_index = index_s / duration_s
        mean_growth = growth_s / duration_s
        stored = np.where(spanned, stored_tokens - per_step * (num_steps - 1) + per_step * mean_index, stored_tokens)
        filled = np.where(spanned, filled_blocks - grown + mean_growth, filled_blocks)
        used = np.where(spanned & (x[:, GROWING] != 0), used_blocks - grown + mean_growth, used_blocks)
        before_s, external_before = x[:, CHANGED_AFTER], x[:, EXT_BEFORE]
        changed = spanned & (before_s > 0)
        weighted = (external_before * before_s + external_tokens * (duration_s - before_s)) / duration_s
        external = np.where(changed, weighted, external_tokens)
    worst_external = np.where(changed, np.maximum(external_tokens, external_before), external_tokens)
    released = x[:, RELEASED_MEAN]
    used = used + released
    in_flight = x[:, IN_FLIGHT] + released
    bytes_columns = ledger_bytes(
        total, bs, b, stored, filled, used, external, cached, last_free, worst_external, in_flight
    )
    return [x[:, REPLICA].astype(np.int32), x[:, STARTED], x[:, DURATION], *bytes_columns]
