"""One pass over ``requests.parquet``, a record batch at a time: what the invariant checks and the
summary need of the requests log.

Per request, only the latencies of completed requests are kept (five float64 and two integers
each, for the percentiles); everything else is a count, a sum or a flag. A run's end therefore
holds about 60 bytes per completed request instead of the whole table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.typing import NDArray

from clustersim.logstats import BATCH_ROWS, batches_of
from clustersim.records import MEASURED, RequestRecord

STATUSES = ("completed", "rejected", "unfinished", "lost")
# every column but the text no check or figure needs (read a batch at a time, the rest stays on disk)
COLUMNS = tuple(name for name in RequestRecord._fields if name not in ("reject_reason", "session_id"))
LATENCIES = ("ttft_s", "tpot_s", "max_itl_s", "e2e_s", "queue_s")


def _ints(batch: pa.RecordBatch, name: str) -> NDArray[np.int64]:
    return np.asarray(batch.column(name).to_numpy(zero_copy_only=False), dtype=np.int64)


def _times(batch: pa.RecordBatch, name: str) -> NDArray[np.float64]:
    column = pc.fill_null(batch.column(name), np.nan)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


def _grown(counts: NDArray[np.int64], more: NDArray[np.int64]) -> NDArray[np.int64]:
    size = max(counts.size, more.size)
    total = np.zeros(size, dtype=np.int64)
    total[: counts.size] += counts
    total[: more.size] += more
    return total


@dataclass
class RequestGroup:
    """The requests of the whole run or of one tenant: counts by status, emitted tokens and the
    latencies of the completed ones (in log order)."""

    num_arrived: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    emitted_tokens: int = 0
    latencies: dict[str, NDArray[np.float64]] = field(default_factory=dict)


class RequestTotals:
    """Totals of a requests log, accumulated batch by batch (:meth:`of` reads a table or a file).

    ``num_rows``: the log's requests (ids ``0..num_rows - 1``); ``num_arrived``: those added (all of
    them, or the measured ones only).
    """

    def __init__(self, num_rows: int, tenants: Sequence[str] = ()) -> None:
        self.num_rows = num_rows
        self.num_arrived = 0
        self.earliest_arrival_s: float | None = None  # of the requests added
        self.latest_arrival_s: float | None = None
        self._seen = np.zeros(num_rows, dtype=bool)
        self.bad_ids = False
        self.num_other_status = 0
        self.causality_ids: list[int] = []
        self.completed_wrong_length = False
        self.unfinished_all_emitted = False
        self.rejected_emitted_unpreempted = False
        self.counts = dict.fromkeys(STATUSES, 0)
        self.emitted_tokens = 0
        self.num_gaps = 0  # gaps between consecutive tokens of every request: emitted tokens - 1 each
        self.max_itl_s = -np.inf
        self.num_preemptions = 0
        self.num_retries = 0  # hand-overs from failed replicas, over all requests
        self.num_retried = 0  # requests handed over at least once
        self.admitted_prompt_tokens = 0
        self.cached_prompt_tokens = 0
        self.any_unfinished = False
        self.latest_end_s: float | None = None
        self.routed = np.zeros(0, dtype=np.int64)
        self.completed_at = np.zeros(0, dtype=np.int64)
        self.tenants: list[str] = list(tenants)  # in order of first appearance (after those given)
        self._tenant_rows = np.zeros(0, dtype=np.int64)
        self._tenant_counts: dict[str, NDArray[np.int64]] = {s: np.zeros(0, dtype=np.int64) for s in STATUSES}
        self._tenant_emitted = np.zeros(0, dtype=np.int64)
        self._chunks: dict[str, list[NDArray[np.float64]]] = {name: [] for name in LATENCIES}
        self._outputs: list[NDArray[np.int64]] = []
        self._tenant_codes: list[NDArray[np.int32]] = []

    @classmethod
    def of(cls, source: pa.Table | Path, measured_only: bool = False, tenants: Sequence[str] = ()) -> RequestTotals:
        """Totals of a requests table, or of a ``requests.parquet`` read a batch at a time.

        ``measured_only``: of the rows whose ``measured`` flag is set (a log written with a
        measurement window). ``tenants``: listed first in :attr:`tenants` (those of the whole log,
        so that a tenant without a measured request still has its entry).
        """
        columns = [*COLUMNS, MEASURED.name] if measured_only else list(COLUMNS)
        if isinstance(source, pa.Table):
            num_rows, batches = source.num_rows, batches_of(source.select(columns))
        else:
            file = pq.ParquetFile(source)
            num_rows = file.metadata.num_rows
            batches = file.iter_batches(batch_size=BATCH_ROWS, columns=columns)
        totals = cls(num_rows, tenants)
        for batch in batches:
            totals.add(batch.filter(batch.column(MEASURED.name)) if measured_only else batch)
        totals.finish()
        return totals

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.num_arrived += batch.num_rows
        earliest, latest = pc.min_max(batch.column("arrival_at_s")).values()
        if self.earliest_arrival_s is None or earliest.as_py() < self.earliest_arrival_s:
            self.earliest_arrival_s = earliest.as_py()
        if self.latest_arrival_s is None or latest.as_py() > self.latest_arrival_s:
            self.latest_arrival_s = latest.as_py()
        status = self._statuses(batch)
        done = status["completed"]
        self._check_ids(_ints(batch, "request_id"))
        self._check_times(batch, done)
        emitted, outputs = _ints(batch, "num_emitted_tokens"), _ints(batch, "output_tokens")
        preemptions, retries = _ints(batch, "num_preemptions"), _ints(batch, "num_retries")
        self.completed_wrong_length |= bool(np.any(done & (emitted != outputs)))
        self.unfinished_all_emitted |= bool(np.any(~done & (emitted >= outputs)))
        interrupted = (preemptions != 0) | (retries != 0)  # recomputed after a preemption or a failure
        self.rejected_emitted_unpreempted |= bool(np.any(status["rejected"] & (emitted != 0) & ~interrupted))
        self.num_retries += int(retries.sum())
        self.num_retried += int(np.count_nonzero(retries))
        self.emitted_tokens += int(emitted.sum())
        self.num_gaps += int(np.maximum(emitted - 1, 0).sum())
        greatest = pc.max(batch.column("max_itl_s")).as_py()
        if greatest is not None and greatest > self.max_itl_s:
            self.max_itl_s = greatest
        self.num_preemptions += int(preemptions.sum())
        self._add_prefix_and_span(batch, status)
        replica = _ints(batch, "replica")
        routed = replica >= 0
        self.routed = _grown(self.routed, np.bincount(replica[routed]))
        self.completed_at = _grown(self.completed_at, np.bincount(replica[done & routed]))
        codes = self._tenant_codes_of(batch.column("tenant"))
        self._add_by_tenant(codes, status, emitted)
        self._keep_latencies(batch, done, outputs, codes)

    def _statuses(self, batch: pa.RecordBatch) -> dict[str, NDArray[np.bool_]]:
        column = batch.column("status")
        status = {s: np.asarray(pc.equal(column, s).to_numpy(zero_copy_only=False), dtype=bool) for s in STATUSES}
        counted = 0
        for name, mask in status.items():
            count = int(np.count_nonzero(mask))
            self.counts[name] += count
            counted += count
        self.num_other_status += batch.num_rows - counted
        return status

    def _check_ids(self, ids: NDArray[np.int64]) -> None:
        inside = (ids >= 0) & (ids < self.num_rows)
        if not np.all(inside):
            self.bad_ids = True
            ids = ids[inside]
        if np.any(self._seen[ids]) or np.unique(ids).size != ids.size:
            self.bad_ids = True
        self._seen[ids] = True

    def _check_times(self, batch: pa.RecordBatch, done: NDArray[np.bool_]) -> None:
        arrival, scheduled = _times(batch, "arrival_at_s"), _times(batch, "first_scheduled_at_s")
        first_token, finished = _times(batch, "first_token_at_s"), _times(batch, "finished_at_s")
        with np.errstate(invalid="ignore"):
            ordered = (arrival <= scheduled) & (scheduled <= first_token) & (first_token <= finished)
        if len(self.causality_ids) < 3 and np.any(done & ~ordered):
            bad = _ints(batch, "request_id")[done & ~ordered][: 3 - len(self.causality_ids)]
            self.causality_ids.extend(int(i) for i in bad)

    def _add_prefix_and_span(self, batch: pa.RecordBatch, status: dict[str, NDArray[np.bool_]]) -> None:
        admitted = np.asarray(pc.is_valid(batch.column("first_scheduled_at_s")).to_numpy(zero_copy_only=False))
        self.admitted_prompt_tokens += int(_ints(batch, "prompt_tokens")[admitted].sum())
        self.cached_prompt_tokens += int(_ints(batch, "num_cached_prompt_tokens")[admitted].sum())
        self.any_unfinished |= bool(np.any(status["unfinished"]))
        ends = pc.if_else(pa.array(status["completed"]), batch.column("finished_at_s"), batch.column("arrival_at_s"))
        latest = pc.max(ends).as_py()
        if latest is not None:
            self.latest_end_s = latest if self.latest_end_s is None else max(self.latest_end_s, latest)

    def _tenant_codes_of(self, column: pa.Array) -> NDArray[np.int32]:
        encoded = pc.dictionary_encode(column)
        local = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        mapping = np.empty(len(encoded.dictionary), dtype=np.int32)
        for index, name in enumerate(encoded.dictionary.to_pylist()):
            if name not in self.tenants:
                self.tenants.append(name)
            mapping[index] = self.tenants.index(name)
        return mapping[local] if local.size else np.zeros(0, dtype=np.int32)

    def _add_by_tenant(
        self, codes: NDArray[np.int32], status: dict[str, NDArray[np.bool_]], emitted: NDArray[np.int64]
    ) -> None:
        self._tenant_rows = _grown(self._tenant_rows, np.bincount(codes))
        for name, mask in status.items():
            self._tenant_counts[name] = _grown(self._tenant_counts[name], np.bincount(codes[mask]))
        by_tenant = np.zeros(len(self.tenants), dtype=np.int64)
        np.add.at(by_tenant, codes, emitted)
        self._tenant_emitted = _grown(self._tenant_emitted, by_tenant)

    def _keep_latencies(
        self, batch: pa.RecordBatch, done: NDArray[np.bool_], outputs: NDArray[np.int64], codes: NDArray[np.int32]
    ) -> None:
        arrival = _times(batch, "arrival_at_s")[done]
        first_token = _times(batch, "first_token_at_s")[done]
        finished = _times(batch, "finished_at_s")[done]
        output_floats = outputs[done].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(output_floats > 1, (finished - first_token) / (output_floats - 1), np.nan)
        self._chunks["ttft_s"].append(first_token - arrival)
        self._chunks["tpot_s"].append(tpot)
        self._chunks["max_itl_s"].append(_times(batch, "max_itl_s")[done])  # NaN: a single token
        self._chunks["e2e_s"].append(finished - arrival)
        self._chunks["queue_s"].append(_times(batch, "first_scheduled_at_s")[done] - arrival)
        self._outputs.append(outputs[done])
        self._tenant_codes.append(codes[done])

    def finish(self) -> None:
        """Join the kept chunks (called once, after the last batch)."""
        self.latencies = {name: _joined(chunks, np.float64) for name, chunks in self._chunks.items()}
        self.completed_outputs = _joined(self._outputs, np.int64)
        self.completed_tenants = _joined(self._tenant_codes, np.int32)
        self._chunks, self._outputs, self._tenant_codes = {}, [], []
        self.missing_ids = bool(self.num_rows and not np.all(self._seen))
        del self._seen

    def overall(self) -> RequestGroup:
        return RequestGroup(self.num_arrived, dict(self.counts), self.emitted_tokens, self.latencies)

    def of_tenant(self, tenant: str) -> RequestGroup:
        code = self.tenants.index(tenant)
        mask = self.completed_tenants == code
        counts = {s: int(self._tenant_counts[s][code]) if code < self._tenant_counts[s].size else 0 for s in STATUSES}
        return RequestGroup(
            int(self._tenant_rows[code]) if code < self._tenant_rows.size else 0,
            counts,
            int(self._tenant_emitted[code]) if code < self._tenant_emitted.size else 0,
            {name: values[mask] for name, values in self.latencies.items()},
        )

    def tenant_mask(self, tenant: str) -> NDArray[np.bool_]:
        """Which completed requests (in the order of :attr:`latencies`) are the tenant's."""
        if tenant not in self.tenants:
            return np.zeros(self.completed_tenants.size, dtype=bool)
        return np.asarray(self.completed_tenants == self.tenants.index(tenant))

    def makespan_s(self, horizon_s: float | None) -> float:
        """From time 0 to the last request's end (completion, or arrival if rejected), or to the
        horizon if requests were still in flight there."""
        if horizon_s is not None and self.any_unfinished:
            return float(horizon_s)
        return max(0.0, float(self.latest_end_s)) if self.latest_end_s is not None else 0.0

    def prefix_hit_rate(self) -> float | None:
        """Prompt tokens the prefix cache supplied, over the prompt tokens of every admitted request."""
        looked_up = self.admitted_prompt_tokens
        return self.cached_prompt_tokens / looked_up if looked_up else None


def _joined(chunks: list[NDArray[Any]], dtype: type) -> NDArray[Any]:
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype)
