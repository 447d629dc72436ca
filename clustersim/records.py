"""The rows a run writes: one typed record per Parquet file, from which the schemas are derived.

``requests.parquet`` has one :class:`RequestRecord` per request (written when it completes, is
rejected, or the run ends); ``steps.parquet`` one :class:`StepRecord` per scheduler iteration, or
per run of identical decode steps (``num_steps`` > 1); ``memory.parquet`` one :class:`MemoryRecord`
per step or run: where the replica's KV capacity went (the ledger categories add up to
``capacity_bytes``); ``itl.parquet`` one :class:`GapRecord` per tenant and bin of inter-token
gaps. Column names carry units. The simulator builds records in field order (hot
paths: a comment names the field where the value does not), the writers store them as they are,
and the analysis layer reads columns by these names. With a measurement window (the scenario's
``metrics``), ``requests.parquet`` and ``itl.parquet`` end with one more column, :data:`MEASURED`.
"""

from __future__ import annotations

import math
import types
from typing import Annotated, Any, NamedTuple, get_args, get_type_hints

import numpy as np
import pyarrow as pa

from clustersim.workload.request import Request

I32, I64, F64, STR = pa.int32(), pa.int64(), pa.float64(), pa.string()
# the last column of requests.parquet and itl.parquet with a measurement window: whether the request
# (the request whose gaps the row counts) is measured by the summary; absent without a window
MEASURED = pa.field("measured", pa.bool_())


class RequestRecord(NamedTuple):
    """One request's life. Times are absolute seconds; null for what never happened."""

    request_id: Annotated[int, I64]
    tenant: Annotated[str, STR]
    replica: Annotated[int, I32]  # -1: never routed
    prompt_tokens: Annotated[int, I64]
    output_tokens: Annotated[int, I64]
    arrival_at_s: Annotated[float, F64]
    first_scheduled_at_s: Annotated[float | None, F64]
    first_token_at_s: Annotated[float | None, F64]
    finished_at_s: Annotated[float | None, F64]
    status: Annotated[str, STR]  # completed | rejected | unfinished | lost (held by a failed replica)
    num_preemptions: Annotated[int, I32]
    num_emitted_tokens: Annotated[int, I64]
    reject_reason: Annotated[str, STR]
    session_id: Annotated[int, I64]  # -1: none
    num_cached_prompt_tokens: Annotated[int, I64]  # found in the prefix cache at first admission
    max_itl_s: Annotated[float | None, F64]  # its greatest gap between consecutive tokens; null before a second
    num_retries: Annotated[int, I32]  # times a failed replica handed it on to another

    @classmethod
    def of(cls, request: Request) -> RequestRecord:
        # x == x is False only for NaN: times that never happened are written as nulls
        return cls(
            request.request_id,
            request.tenant,
            request.replica,
            request.prompt_tokens,
            request.output_tokens,
            request.arrival_at_s,
            scheduled if (scheduled := request.first_scheduled_at_s) == scheduled else None,  # first_scheduled_at_s
            first if (first := request.first_token_at_s) == first else None,  # first_token_at_s
            finished if (finished := request.finished_at_s) == finished else None,  # finished_at_s
            request.status,
            request.num_preemptions,
            request.num_emitted_tokens,
            request.reject_reason,
            request.session_id,
            request.num_cached_prompt_tokens,
            gap if (gap := request.max_itl_s) > -math.inf else None,  # max_itl_s
            request.num_retries,
        )


class StepRecord(NamedTuple):
    """One iteration, or ``num_steps`` identical decode iterations; counts are per iteration."""

    replica: Annotated[int, I32]
    started_at_s: Annotated[float, F64]
    duration_s: Annotated[float, F64]
    num_steps: Annotated[int, I32]
    num_seqs: Annotated[int, I32]
    num_prefill_seqs: Annotated[int, I32]
    num_prefill_tokens: Annotated[int, I64]
    num_decode_tokens: Annotated[int, I64]
    num_emitted_tokens: Annotated[int, I64]
    kv_used_blocks: Annotated[int, I64]  # at the end of the last iteration
    kv_peak_used_blocks: Annotated[int, I64]  # the most at the end of any of its iterations
    kv_total_blocks: Annotated[int, I64]
    num_preemptions: Annotated[int, I32]
    num_waiting: Annotated[int, I32]  # queued at the end
    num_swaps: Annotated[int, I32]  # sequences swapped out to host memory by this step


class MemoryRecord(NamedTuple):
    """The KV ledger of one step or run: time-weighted means over its iterations, in bytes."""

    replica: Annotated[int, I32]
    started_at_s: Annotated[float, F64]
    duration_s: Annotated[float, F64]
    capacity_bytes: Annotated[float, F64]
    stored_bytes: Annotated[float, F64]
    internal_frag_bytes: Annotated[float, F64]
    reserved_unused_bytes: Annotated[float, F64]
    external_frag_bytes: Annotated[float, F64]
    cached_prefix_bytes: Annotated[float, F64]
    in_flight_bytes: Annotated[float, F64]  # KV caches moving between replicas (disaggregation)
    free_bytes: Annotated[float, F64]
    min_free_bytes: Annotated[float, F64]  # the least free headroom of any of its iterations


class GapRecord(NamedTuple):
    """One bin of one tenant's inter-token gaps (all gaps between consecutive tokens of its requests)."""

    tenant: Annotated[str, STR]
    bin: Annotated[int, I32]  # clustersim.itl.bin_of
    lower_s: Annotated[float, F64]  # the bin holds gaps in [lower_s, upper_s)
    upper_s: Annotated[float, F64]
    num_gaps: Annotated[int, I64]
    sum_s: Annotated[float, F64]
    min_s: Annotated[float, F64]
    max_s: Annotated[float, F64]


class LifecycleRecord(NamedTuple):
    """A replica's change of state (``lifecycle.parquet``, written when the scenario has ``faults`` or
    an ``autoscaler``): ``failed`` (with the requests it held, how many were routed again and how many
    lost), ``starting`` (reading its weights and starting the engine), ``up`` (routed to),
    ``draining`` (routed nothing new) and ``stopped`` (its GPUs released); ``cause``: ``fault`` (a
    failure and the restart after its repair) or ``autoscaler``."""

    replica: Annotated[int, I32]
    at_s: Annotated[float, F64]
    event: Annotated[str, STR]  # failed | detected | starting | up | draining | stopped
    cause: Annotated[str, STR]  # fault | autoscaler
    num_held: Annotated[int, I32]
    num_retried: Annotated[int, I32]
    num_lost: Annotated[int, I32]


class TransferRecord(NamedTuple):
    """One request's KV cache moved from its prefill replica to its decode replica (``transfers.parquet``,
    written when the scenario disaggregates): its prompt was done at ``prefilled_at_s``, the decode
    replica took the blocks for it and pulled it at ``pulled_at_s`` (the wait in between is the decode
    pool's back-pressure), the link was free for it at ``started_at_s`` and it landed at
    ``landed_at_s``. A transfer not over when the run stopped has NaN for what had not happened. If
    the prefill replica failed before the landing, its KV cache was lost at ``kv_lost_at_s`` and the
    decode replica computes the prompt itself. ``released_at_s``: when the prefill replica stopped holding
    the KV cache (it landed, was lost, or its request ended without it). A request retried after a
    failure may have several rows."""

    request_id: Annotated[int, I64]
    prefill_replica: Annotated[int, I32]
    decode_replica: Annotated[int, I32]
    kv_tokens: Annotated[int, I64]
    kv_bytes: Annotated[float, F64]
    prefilled_at_s: Annotated[float, F64]
    pulled_at_s: Annotated[float, F64]
    started_at_s: Annotated[float, F64]
    landed_at_s: Annotated[float, F64]
    kv_lost_at_s: Annotated[float, F64]
    released_at_s: Annotated[float, F64]


# the ledger's categories: they add up to ``capacity_bytes`` on every row of memory.parquet
LEDGER_CATEGORIES = (
    "stored_bytes",
    "internal_frag_bytes",
    "reserved_unused_bytes",
    "external_frag_bytes",
    "cached_prefix_bytes",
    "in_flight_bytes",
    "free_bytes",
)


def schema_of(record: type[tuple[Any, ...]], measured: bool = False) -> pa.Schema:
    """The Parquet schema of a record type: its fields, in order, with their Arrow types (and
    :data:`MEASURED` last if ``measured``)."""
    hints = get_type_hints(record, include_extras=True)
    schema = pa.schema([(name, hints[name].__metadata__[0]) for name in record._fields])  # type: ignore[attr-defined]
    return schema.append(MEASURED) if measured else schema


def numpy_dtypes_of(record: type[tuple[Any, ...]]) -> tuple[type[np.generic] | None, ...]:
    """Per field, the NumPy type a column of it converts through (the fast way to Arrow), or None
    where the field may be null or is not a number."""
    hints = get_type_hints(record, include_extras=True)
    by_arrow: dict[pa.DataType, type[np.generic]] = {I32: np.int32, I64: np.int64, F64: np.float64}
    dtypes = []
    for name in record._fields:  # type: ignore[attr-defined]
        python_type, arrow_type = get_args(hints[name])
        nullable = isinstance(python_type, types.UnionType) and type(None) in get_args(python_type)
        dtypes.append(None if nullable else by_arrow.get(arrow_type))
    return tuple(dtypes)


REQUEST_SCHEMA = schema_of(RequestRecord)
STEP_SCHEMA = schema_of(StepRecord)
MEMORY_SCHEMA = schema_of(MemoryRecord)
GAP_SCHEMA = schema_of(GapRecord)
LIFECYCLE_SCHEMA = schema_of(LifecycleRecord)
TRANSFER_SCHEMA = schema_of(TransferRecord)
