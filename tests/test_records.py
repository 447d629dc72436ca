"""The typed records: built in field order on the hot paths, written through NumPy where no null fits."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from clustersim.eventlog import TableWriter
from clustersim.kvcache.ledger import RunSpan, ledger_row
from clustersim.records import MemoryRecord, RequestRecord, StepRecord, numpy_dtypes_of
from clustersim.workload.request import Request


def test_request_record_fields_match_the_request_by_name() -> None:
    request = Request(7, "chat", 1.5, 11, 13, session_id=17)
    request.replica, request.first_scheduled_at_s, request.first_token_at_s = 3, 2.5, 4.5
    request.status, request.num_preemptions, request.num_emitted_tokens = "unfinished", 5, 6
    request.reject_reason, request.num_cached_prompt_tokens, request.max_itl_s = "why", 9, 0.25
    record = RequestRecord.of(request)._asdict()
    for name, value in record.items():
        expected = getattr(request, name)
        if isinstance(expected, float) and math.isnan(expected):
            assert value is None, name
        else:
            assert value == expected, name
    request.max_itl_s = -math.inf  # no second token yet
    assert RequestRecord.of(request).max_itl_s is None


def test_ledger_row_fields_by_name() -> None:
    row = ledger_row(2, 10.0, 0.5, 100, 150, 12, 14, 3, 40, 16, 2.0)
    assert row.replica == 2 and row.started_at_s == 10.0 and row.duration_s == 0.5
    assert row.capacity_bytes == 100 * 16 * 2.0
    assert row.stored_bytes == 300.0
    assert row.internal_frag_bytes == (12 * 16 - 150) * 2.0
    assert row.reserved_unused_bytes == (14 - 12) * 16 * 2.0
    assert row.external_frag_bytes == 80.0
    assert row.cached_prefix_bytes == 3 * 16 * 2.0
    assert row.free_bytes == ((100 - 14 - 3) * 16 - 40) * 2.0
    parts = ("stored_bytes", "internal_frag_bytes", "reserved_unused_bytes", "external_frag_bytes")
    parts += ("cached_prefix_bytes", "free_bytes")
    assert sum(getattr(row, name) for name in parts) == row.capacity_bytes
    span = RunSpan(4, 2, 1, True, 2.0, 3.0, 1.0)
    assert ledger_row(2, 10.0, 2.0, 100, 150, 12, 14, 3, 40, 16, 2.0, span).stored_bytes < row.stored_bytes


def test_nullable_and_text_fields_skip_numpy() -> None:
    dtypes = dict(zip(RequestRecord._fields, numpy_dtypes_of(RequestRecord), strict=True))
    assert dtypes["first_token_at_s"] is None and dtypes["tenant"] is None
    assert dtypes["request_id"] is np.int64 and dtypes["replica"] is np.int32
    assert all(dtype is not None for dtype in numpy_dtypes_of(StepRecord) + numpy_dtypes_of(MemoryRecord))


def test_writer_round_trips_nulls_and_numbers(tmp_path: Path) -> None:
    writer = TableWriter(tmp_path / "requests.parquet", RequestRecord, {"k": "v"})
    done, lost = Request(0, "a", 0.0, 4, 2), Request(1, "b", 1.0, 2**40, 3)
    done.first_token_at_s = 0.25
    writer.append(RequestRecord.of(done))
    writer.append(RequestRecord.of(lost))
    table = pq.read_table(writer.close())
    assert table.column("first_token_at_s").to_pylist() == [0.25, None]
    assert table.column("prompt_tokens").to_pylist() == [4, 2**40]
    assert table.schema.metadata[b"k"] == b"v"
