"""End-to-end: every published serving result replayed as a scenario, within 15% or its documented bound.

The bound is 15% (the issue's target): the MLPerf rows mix a kernel model fitted on other shapes and
precisions, an assumed OpenOrca prompt distribution (fitted to a sample, +-3% on the mean) and engine
overheads that are partly assumptions, so a tighter bound would test luck. Rows that miss it are in
``KNOWN_GAPS`` with a larger bound and the reason (README "### Validation"); they guard against regressions.
The whole set runs in ~10 s, so it is in the default run.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from conftest import SHARED

from clustersim.validation.published import (
    KNOWN_GAPS,
    TARGET_PCT,
    Comparison,
    PublishedRow,
    completed_tokens_per_s,
    format_comparisons,
    load_published_rows,
    run_published,
    saturated_tokens_per_s,
    scenario_path,
    within_bound,
)

CSV = SHARED / "published" / "serving_results.csv"
needs_data = pytest.mark.skipif(not CSV.is_file(), reason=f"{CSV} is absent (shared ground truth not mounted)")
ROW_IDS = [row.row_id for row in load_published_rows(CSV)] if CSV.is_file() else []


@pytest.fixture(scope="module")
def comparisons() -> dict[str, Comparison]:
    return {c.row.row_id: c for c in run_published(SHARED)}


def test_saturated_rate_counts_whole_rows_between_two_admissions() -> None:
    # one replica; requests 0-3 arrive at 0 and wait until admitted at 0, 2, 4 and 10 s: it is saturated
    # until 10 s, and the window starts at the first admission at or after 5 s (that is 10 s too): empty;
    # with the last admission at 8 s instead, the window is [4, 8): the rows starting at 4 and 6 count
    requests = pa.table(
        {
            "replica": [0, 0, 0, 0],
            "arrival_at_s": [0.0, 0.0, 0.0, 0.0],
            "first_scheduled_at_s": [0.0, 2.0, 4.0, 8.0],
        }
    )
    steps = pa.table(
        {
            "replica": [0, 0, 0, 0, 0],
            "started_at_s": [0.0, 2.0, 4.0, 6.0, 8.0],
            "num_steps": [1, 1, 2, 1, 1],
            "num_emitted_tokens": [5, 5, 3, 7, 100],
        }
    )
    assert saturated_tokens_per_s(requests, steps, 1) == pytest.approx((2 * 3 + 7) / 4.0)


def test_completed_tokens_count_requests_finishing_in_the_window() -> None:
    requests = pa.table(
        {
            "status": ["completed", "completed", "rejected", "completed"],
            "finished_at_s": [1.0, 5.0, None, 10.0],
            "output_tokens": [10, 20, 40, 80],
        }
    )
    assert completed_tokens_per_s(requests, 5.0, 10.0) == pytest.approx((20 + 80) / 5.0)


def test_known_gaps_are_real_rows_with_larger_bounds() -> None:
    for row_id, (bound, reason) in KNOWN_GAPS.items():
        assert bound > TARGET_PCT and reason
        if ROW_IDS:
            assert row_id in ROW_IDS


def test_within_bound_uses_the_documented_gap() -> None:
    row = PublishedRow("mlperf41_h100nvlx4_off", "s", "e", "m", "g", 1, "tokens_per_s", 100.0, "tok/s")
    assert within_bound(Comparison(row, 139.0))
    assert not within_bound(Comparison(row, 141.0))
    plain = PublishedRow("x", "s", "e", "m", "g", 1, "tokens_per_s", 100.0, "tok/s")
    assert within_bound(Comparison(plain, 85.0)) and not within_bound(Comparison(plain, 84.0))


@needs_data
@pytest.mark.parametrize("row_id", ROW_IDS)
def test_every_row_has_a_scenario_citing_it(row_id: str) -> None:
    path = scenario_path(row_id)
    assert path.is_file(), f"missing {path}"
    text = path.read_text(encoding="utf-8")
    assert f"# {row_id}:" in text and f"serving_results.csv {row_id}" in text


@needs_data
@pytest.mark.parametrize("row_id", ROW_IDS)
def test_row_within_target_or_documented_bound(row_id: str, comparisons: dict[str, Comparison]) -> None:
    c = comparisons[row_id]
    bound = KNOWN_GAPS.get(row_id, (TARGET_PCT, ""))[0]
    assert within_bound(c), (
        f"{row_id}: predicted {c.predicted:.4g} vs {c.row.value:.4g} ({c.error_pct:+.1f}%, bound {bound}%)"
    )


@needs_data
def test_table_lists_every_row_and_the_server_log_extras(comparisons: dict[str, Comparison]) -> None:
    table = format_comparisons(list(comparisons.values()))
    for row_id in ROW_IDS:
        assert row_id in table
    assert "mlperf41_h100x8_srv/mean_tpot" in comparisons
    assert comparisons["mlperf41_h100x8_srv/mean_tpot"].row.value == pytest.approx(154.960329)
