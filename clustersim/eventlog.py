"""Flat record rows streamed to Parquet in record batches (bounded memory), written atomically.

The rows are the records of :mod:`clustersim.records`. Every file carries the resolved scenario, its
hash and the clustersim version in its key-value metadata.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clustersim.itl import GapHistogram, bin_edges_s
from clustersim.kvcache.ledger_batch import ledger_columns
from clustersim.records import (
    GapRecord,
    LifecycleRecord,
    MemoryRecord,
    RequestRecord,
    StepRecord,
    TransferRecord,
    numpy_dtypes_of,
    schema_of,
)
from clustersim.workload.request import Request

ROWS_PER_BATCH = 65_536


class TableWriter:
    """Buffers rows and streams them to ``path`` one record batch at a time.

    The file is written as ``<path>.partial`` and renamed into place by :meth:`close`, so a
    reader never sees a half-written file under the final name. ``measured``: rows end with the
    :data:`~clustersim.records.MEASURED` flag. ``columns_of``: rows are inputs this function turns into
    the record's columns, a batch at a time (else they are the records themselves).
    """

    def __init__(
        self,
        path: Path,
        record: type[tuple[Any, ...]],
        metadata: dict[str, str],
        measured: bool = False,
        columns_of: Callable[[list[tuple[Any, ...]]], list[np.ndarray[Any, Any]]] | None = None,
        rows_per_batch: int = ROWS_PER_BATCH,
    ) -> None:
        self.path = path
        self._columns_of = columns_of
        self._rows_per_batch = rows_per_batch
        self._dtypes = numpy_dtypes_of(record) + ((np.bool_,) if measured else ())
        schema = schema_of(record, measured)
        self.schema = schema.with_metadata({k.encode(): v.encode() for k, v in metadata.items()})
        self._partial = path.with_name(path.name + ".partial")
        self._writer = pq.ParquetWriter(self._partial, self.schema, compression="zstd")
        self._rows: list[tuple[Any, ...]] = []
        self.num_rows = 0

    def append(self, record: tuple[Any, ...]) -> None:
        """Add one row: a record of :mod:`clustersim.records` whose type the schema was derived from."""
        self._rows.append(record)
        if len(self._rows) >= self._rows_per_batch:
            self.flush()

    @property
    def num_appended(self) -> int:
        """Rows appended so far, written or buffered (read by the progress display)."""
        return self.num_rows + len(self._rows)

    def flush(self) -> None:
        if not self._rows:
            return
        if self._columns_of is not None:
            arrays = [pa.array(column) for column in self._columns_of(self._rows)]
        else:
            arrays = []
            for column, field, dtype in zip(zip(*self._rows, strict=True), self.schema, self._dtypes, strict=True):
                # through NumPy where the column can hold no null: converting Python numbers that way is faster
                arrays.append(pa.array(np.array(column, dtype=dtype)) if dtype else pa.array(column, type=field.type))
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


class RunLog:
    """The run's event logs: one row per request, one per scheduler iteration (or run), and its KV ledger.

    ``measured``: the run has a measurement window; the request and gap rows say which are measured.
    """

    def __init__(self, out_dir: Path, metadata: dict[str, str], measured: bool = False) -> None:
        self.measured = measured
        self.requests = TableWriter(out_dir / "requests.parquet", RequestRecord, metadata, measured)
        self.steps = TableWriter(out_dir / "steps.parquet", StepRecord, metadata)
        # rows of ledger inputs (wider than the records: smaller batches), made into columns a batch at a time
        self.memory = TableWriter(
            out_dir / "memory.parquet", MemoryRecord, metadata, columns_of=ledger_columns, rows_per_batch=16_384
        )
        self.gaps = GapHistogram()  # every replica's inter-token gaps, written as itl.parquet at the close
        self._gaps_writer = TableWriter(out_dir / "itl.parquet", GapRecord, metadata, measured)
        # the replicas' changes of state, written as lifecycle.parquet at the close (a scenario with faults)
        self.lifecycle: list[LifecycleRecord] | None = None
        # the KV caches moved between replicas, written as transfers.parquet at the close (disaggregation)
        self.transfers: list[TransferRecord] | None = None
        # the HTTP front ends' summary block, when requests passed one (clustersim.frontend)
        self.frontend: dict[str, float | int] | None = None
        self._out_dir, self._metadata = out_dir, metadata

    def record_request(self, request: Request) -> None:
        """Write a request's final record (called once, when it completes, is rejected, or the run ends)."""
        if self.measured:
            self.requests.append((*RequestRecord.of(request), request.gap_key[1]))
        else:
            self.requests.append(RequestRecord.of(request))

    def close(self) -> None:
        self.requests.close()
        self.steps.close()
        self.memory.close()
        for tenant, measured, index, count, total_s, low_s, high_s in self.gaps.rows():
            lower_s, upper_s = bin_edges_s(index)
            record = GapRecord(tenant, index, lower_s, upper_s, count, total_s, low_s, high_s)
            self._gaps_writer.append((*record, measured) if self.measured else record)
        self._gaps_writer.close()
        tables: list[tuple[str, type[tuple[Any, ...]], Sequence[tuple[Any, ...]] | None]] = [
            ("lifecycle", LifecycleRecord, self.lifecycle),
            ("transfers", TransferRecord, self.transfers),
        ]
        for name, record_type, rows in tables:
            if rows is not None:
                writer = TableWriter(self._out_dir / f"{name}.parquet", record_type, self._metadata)
                for row in rows:
                    writer.append(row)
                writer.close()

    def abort(self) -> None:
        self.requests.abort()
        self.steps.abort()
        self.memory.abort()
        self._gaps_writer.abort()
