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
    format_comparisons,
    load_published_rows,
    run_published,
    scenario_path,
    tokens_emitted_between,
    within_bound,
)

CSV = SHARED / "published" / "serving_results.csv"
needs_data = pytest.mark.skipif(not CSV.is_file(), reason=f"{CSV} is absent (shared ground truth not mounted)")
ROW_IDS = [row.row_id for row in load_published_rows(CSV)] if CSV.is_file() else []


@pytest.fixture(scope="module")
def comparisons() -> dict[str, Comparison]:
    return {c.row.row_id: c for c in run_published(SHARED)}


def steps_table(rows: list[tuple[float, float, int, int, int]]) -> pa.Table:
    """(started_at_s, duration_s, num_steps, num_decode_tokens, num_prefill_seqs) rows of one replica."""
    columns = list(zip(*rows, strict=True))
    return pa.table(
        {
            "started_at_s": list(columns[0]),
            "duration_s": list(columns[1]),
            "num_steps": list(columns[2]),
            "num_decode_tokens": list(columns[3]),
            "num_prefill_seqs": list(columns[4]),
        }
    )


@pytest.mark.parametrize(
    ("start_s", "end_s", "expected"),
    [
        (0.0, 10.0, 4 + 15 + 20),  # every token: 4 at t=1; 5 at each of t=2, 3, 4; 20 at t=10
        (1.5, 3.0, 10.0),  # two of the 3-step row's steps end inside (t=2, t=3): 2 x 15 / 3
        (4.5, 9.0, 0.0),  # nothing ends inside
        (1.0, 1.0, 4.0),  # window edges are inclusive
    ],
)
def test_tokens_emitted_between_counts_each_step_at_its_end(start_s: float, end_s: float, expected: float) -> None:
    steps = steps_table([(0.0, 1.0, 1, 3, 1), (1.0, 3.0, 3, 12, 3), (8.0, 2.0, 1, 20, 0)])
    assert tokens_emitted_between(steps, start_s, end_s) == pytest.approx(expected)


def test_known_gaps_are_real_rows_with_larger_bounds() -> None:
    for row_id, (bound, reason) in KNOWN_GAPS.items():
        assert bound > TARGET_PCT and reason
        if ROW_IDS:
            assert row_id in ROW_IDS


def test_within_bound_uses_the_documented_gap() -> None:
    row = PublishedRow("mlperf41_b200x1_off", "s", "e", "m", "g", 1, "tokens_per_s", 100.0, "tok/s")
    assert within_bound(Comparison(row, 130.0))
    assert not within_bound(Comparison(row, 150.0))
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
