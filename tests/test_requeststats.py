"""The requests log read a batch at a time gives the same totals as read whole, and its checks
catch ids that are missing or repeated across batches."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import explicit_scenario

from clustersim.invariants import check_requests
from clustersim.logstats import StepTotals
from clustersim.metrics import summarize
from clustersim.requeststats import RequestTotals

ARRIVALS = [(0.01 * i, 8 + 40 * (i % 5), 2 + i % 7) for i in range(40)]


@pytest.fixture
def requests(run_mapping) -> pa.Table:
    mapping = explicit_scenario(ARRIVALS)
    mapping["stop"] = {"horizon_s": 25.0}  # 1 s steps: the horizon leaves some requests unfinished
    result = run_mapping(mapping)
    return pq.read_table(result.out_dir / "requests.parquet")


def totals_in_batches(table: pa.Table, rows: int) -> RequestTotals:
    totals = RequestTotals(table.num_rows)
    for batch in table.to_batches(max_chunksize=rows):
        totals.add(batch)
    totals.finish()
    return totals


def with_tenants(table: pa.Table) -> pa.Table:
    names = [("chat", "code", "batch")[i % 3] for i in range(table.num_rows)]
    return table.set_column(table.schema.get_field_index("tenant"), "tenant", [names])


@pytest.mark.parametrize("rows", [1, 3, 7, 1000])
def test_batched_totals_equal_whole(requests, rows):
    table = with_tenants(requests)
    whole, batched = RequestTotals.of(table), totals_in_batches(table, rows)
    assert whole.counts == batched.counts and whole.emitted_tokens == batched.emitted_tokens
    assert sorted(whole.tenants) == sorted(batched.tenants)
    for name in whole.latencies:
        np.testing.assert_array_equal(whole.latencies[name], batched.latencies[name])
    for tenant in whole.tenants:
        assert whole.of_tenant(tenant).counts == batched.of_tenant(tenant).counts
        assert whole.of_tenant(tenant).emitted_tokens == batched.of_tenant(tenant).emitted_tokens
    assert whole.makespan_s(None) == batched.makespan_s(None)
    assert check_requests(batched) == []


def test_latencies_are_those_of_completed_requests(requests):
    totals = RequestTotals.of(requests)
    done = requests.filter(pa.compute.equal(requests.column("status"), "completed")).to_pydict()
    expected = np.subtract(done["finished_at_s"], done["arrival_at_s"])
    np.testing.assert_array_equal(totals.latencies["e2e_s"], expected)
    assert totals.counts["completed"] == len(expected) > 0
    assert totals.counts["unfinished"] > 0  # the horizon cut some off


def test_summary_by_tenant_counts_every_request(requests):
    table = with_tenants(requests)
    totals = totals_in_batches(table, 5)
    per_tenant = [totals.of_tenant(t) for t in totals.tenants]
    assert sum(g.num_arrived for g in per_tenant) == table.num_rows
    assert sum(g.counts["completed"] for g in per_tenant) == totals.counts["completed"]
    assert sum(g.latencies["ttft_s"].size for g in per_tenant) == totals.latencies["ttft_s"].size


@pytest.mark.parametrize(
    "ids",
    [
        [1, 0, 2, 3, 5, *list(range(5, 40))],  # 4 missing, 5 twice (in different batches)
        list(range(1, 41)),  # shifted: 40 is outside 0..39
        [*list(range(39)), 0],  # 0 twice, 39 missing
    ],
)
def test_ids_checked_across_batches(requests, ids):
    table = requests.set_column(0, "request_id", [ids])
    problems = check_requests(totals_in_batches(table, 4))
    assert problems == ["request ids are not exactly 0..39 once each"]


def test_summary_from_table_equals_summary_from_totals(requests):
    steps = StepTotals(1)
    table = with_tenants(requests)
    assert summarize(table, steps, 1.0, 1, None) == summarize(totals_in_batches(table, 3), steps, 1.0, 1, None)
