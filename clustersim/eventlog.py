"""Flat record rows streamed to Parquet in record batches (bounded memory), written atomically.

Column names carry units. Every file carries the resolved scenario, its hash and the
clustersim version in its key-value metadata.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from clustersim.workload.request import Request

REQUEST_SCHEMA = pa.schema(
    [
        ("request_id", pa.int64()),
        ("tenant", pa.string()),
        ("replica", pa.int32()),
        ("prompt_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("arrival_at_s", pa.float64()),
        ("first_scheduled_at_s", pa.float64()),
        ("first_token_at_s", pa.float64()),
        ("finished_at_s", pa.float64()),
        ("status", pa.string()),
        ("num_preemptions", pa.int32()),
        ("num_emitted_tokens", pa.int64()),
        ("reject_reason", pa.string()),
        ("session_id", pa.int64()),
        ("num_cached_prompt_tokens", pa.int64()),
    ]
)

STEP_SCHEMA = pa.schema(
    [
        ("replica", pa.int32()),
        ("started_at_s", pa.float64()),
        ("duration_s", pa.float64()),
        ("num_steps", pa.int32()),
        ("num_seqs", pa.int32()),
        ("num_prefill_seqs", pa.int32()),
        ("num_prefill_tokens", pa.int64()),
        ("num_decode_tokens", pa.int64()),
        ("num_emitted_tokens", pa.int64()),
        ("kv_used_blocks", pa.int64()),
        ("kv_total_blocks", pa.int64()),
        ("num_preemptions", pa.int32()),
        ("num_waiting", pa.int32()),
    ]
)

MEMORY_SCHEMA = pa.schema(
    [
        ("replica", pa.int32()),
        ("started_at_s", pa.float64()),
        ("duration_s", pa.float64()),
        ("capacity_bytes", pa.float64()),
        ("stored_bytes", pa.float64()),
        ("internal_frag_bytes", pa.float64()),
        ("reserved_unused_bytes", pa.float64()),
        ("external_frag_bytes", pa.float64()),
        ("cached_prefix_bytes", pa.float64()),
        ("free_bytes", pa.float64()),
        ("min_free_bytes", pa.float64()),
    ]
)

# the ledger's categories: they add up to ``capacity_bytes`` on every row of memory.parquet
LEDGER_CATEGORIES = (
    "stored_bytes",
    "internal_frag_bytes",
    "reserved_unused_bytes",
    "external_frag_bytes",
    "cached_prefix_bytes",
    "free_bytes",
)

ROWS_PER_BATCH = 65_536


class TableWriter:
    """Buffers rows and streams them to ``path`` one record batch at a time.

    The file is written as ``<path>.partial`` and renamed into place by :meth:`close`, so a
    reader never sees a half-written file under the final name.
    """

    def __init__(self, path: Path, schema: pa.Schema, metadata: dict[str, str]) -> None:
        self.path = path
        self.schema = schema.with_metadata({k.encode(): v.encode() for k, v in metadata.items()})
        self._partial = path.with_name(path.name + ".partial")
        self._writer = pq.ParquetWriter(self._partial, self.schema, compression="zstd")
        self._rows: list[tuple[Any, ...]] = []
        self.num_rows = 0

    def append(self, *values: Any) -> None:
        """Add one row (values in schema order)."""
        self._rows.append(values)
        if len(self._rows) >= ROWS_PER_BATCH:
            self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        columns = zip(*self._rows, strict=True)
        arrays = [pa.array(col, type=field.type) for col, field in zip(columns, self.schema, strict=True)]
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self.num_rows += len(self._rows)
        self._rows = []

    def close(self) -> Path:
        """Flush, close and move the file into place; returns the final path."""
        self.flush()
        self._writer.close()
        os.replace(self._partial, self.path)
        return self.path

    def abort(self) -> None:
        """Close and leave the ``.partial`` file for inspection (the run did not finish)."""
        self._writer.close()


def _nan_to_none(value: float) -> float | None:
    return None if math.isnan(value) else value


class RunLog:
    """The run's event logs: one row per request, one per scheduler iteration (or run), and its KV ledger."""

    def __init__(self, out_dir: Path, metadata: dict[str, str]) -> None:
        self.requests = TableWriter(out_dir / "requests.parquet", REQUEST_SCHEMA, metadata)
        self.steps = TableWriter(out_dir / "steps.parquet", STEP_SCHEMA, metadata)
        self.memory = TableWriter(out_dir / "memory.parquet", MEMORY_SCHEMA, metadata)

    def record_request(self, request: Request) -> None:
        """Write a request's final record (called once, when it completes, is rejected, or the run ends)."""
        self.requests.append(
            request.request_id,
            request.tenant,
            request.replica,
            request.prompt_tokens,
            request.output_tokens,
            request.arrival_at_s,
            _nan_to_none(request.first_scheduled_at_s),
            _nan_to_none(request.first_token_at_s),
            _nan_to_none(request.finished_at_s),
            request.status,
            request.num_preemptions,
            request.num_emitted_tokens,
            request.reject_reason,
            request.session_id,
            request.num_cached_prompt_tokens,
        )

    def close(self) -> None:
        self.requests.close()
        self.steps.close()
        self.memory.close()

    def abort(self) -> None:
        self.requests.abort()
        self.steps.abort()
        self.memory.abort()
