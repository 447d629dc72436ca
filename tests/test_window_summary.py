"""A measurement window in the summary: hand-computed runs where the measured requests, their latencies,
inter-token gaps and throughput are known exactly; the logs keep every request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import explicit_scenario, read_requests

from clustersim.cli import main
from clustersim.compare import compare

# Unit cost (every step 1 s), one replica, vLLM V0 (a step prefills newly admitted prompts, pausing the
# decodes, or decodes). r0 is prefilled in [0, 1]; r1 (0.5 s) in [1, 2]; r2 (1.5 s) and r3 (2.0 s, at the
# step end: it is planned with r2) in [2, 3]; then everybody decodes in [3, 4], [4, 5], [5, 6].
#   r0: tokens at 1, 4, 5, 6  gaps 3, 1, 1  TTFT 1.0  E2E 6.0
#   r1: tokens at 2, 4, 5     gaps 2, 1     TTFT 1.5  E2E 4.5
#   r2: tokens at 3, 4, 5     gaps 1, 1     TTFT 1.5  E2E 3.5
#   r3: tokens at 3, 4        gap  1        TTFT 1.0  E2E 2.0
REQUESTS = [(0.0, 10, 4), (0.5, 10, 3), (1.5, 10, 3), (2.0, 10, 2)]
# each leaves out r0 and r3: by arrival order, and by time (both ends of [0.5, 1.5] are inside)
WINDOWS = [{"warmup_requests": 1, "cooldown_requests": 1}, {"warmup_s": 0.5, "cooldown_s": 0.5}]


def windowed(metrics: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return explicit_scenario(REQUESTS, policy="vllm_v0", metrics=metrics, **overrides)


@pytest.mark.parametrize("metrics", WINDOWS)
def test_hand_computed_window(run_mapping, metrics: dict[str, Any]):
    summary = run_mapping(windowed(metrics)).summary
    window = summary["window"]
    assert (window["num_measured"], window["num_excluded"]) == (2, 2)
    assert (window["first_measured_arrival_s"], window["last_measured_arrival_s"], window["span_s"]) == (0.5, 1.5, 1.0)
    assert summary["makespan_s"] == 6.0  # the whole run's
    assert summary["num_requests"] == {"arrived": 2, "completed": 2, "rejected": 0, "unfinished": 0, "lost": 0}
    assert summary["ttft_s"] == {"mean": 1.5, "p50": 1.5, "p90": 1.5, "p99": 1.5}
    assert summary["e2e_s"]["mean"] == 4.0 and summary["e2e_s"]["p50"] == 4.0
    # the gaps of r1 and r2 only: 2, 1 and 1, 1 (r0's 3 s gap is left out)
    assert summary["itl_s"] == pytest.approx(
        {"mean": 1.25, "p50": 1.0, "p90": 1.7, "p99": 1.97, "max": 2.0, "num_gaps": 4}
    )
    assert summary["max_itl_s"]["mean"] == 1.5
    # 6 tokens and 2 requests over the measured arrivals' 1 s
    assert (summary["output_tokens"], summary["output_tokens_per_s"], summary["requests_per_s"]) == (6, 6.0, 2.0)
    assert summary["replicas"]["num_steps"] == 6  # the machines' figures are the whole run's


def test_bounds_in_the_window_block(run_mapping):
    by_count, by_time = (run_mapping(windowed(m)).summary["window"] for m in WINDOWS)
    assert by_count["from_request"] == 1 and by_count["to_request"] == 2
    assert by_count["from_arrival_s"] == 0.0 and by_count["to_arrival_s"] is None
    assert by_time["from_arrival_s"] == 0.5 and by_time["to_arrival_s"] == 1.5  # last arrival 2.0 - 0.5
    assert by_time["from_request"] == 0 and by_time["to_request"] is None
    assert by_time["warmup_s"] == 0.5 and by_time["cooldown_requests"] == 0


def test_logs_keep_every_request_and_mark_the_measured(run_mapping):
    result = run_mapping(windowed(WINDOWS[0]))
    rows = read_requests(result)
    assert [r["measured"] for r in rows] == [False, True, True, False]
    assert [r["max_itl_s"] for r in rows] == [3.0, 2.0, 1.0, 1.0]
    gaps = pq.read_table(result.out_dir / "itl.parquet").to_pylist()
    by_flag = {(g["measured"], g["lower_s"]): g["num_gaps"] for g in gaps}
    assert by_flag == {(False, 1.0): 3, (False, 3.0): 1, (True, 1.0): 3, (True, 2.0): 1}


def test_without_a_window_nothing_changes(run_mapping):
    result = run_mapping(explicit_scenario(REQUESTS, policy="vllm_v0"))
    assert "window" not in result.summary and result.summary["itl_s"]["num_gaps"] == 8
    assert "measured" not in pq.read_table(result.out_dir / "requests.parquet").column_names
    assert "measured" not in pq.read_table(result.out_dir / "itl.parquet").column_names
    assert result.summary["output_tokens_per_s"] == 2.0  # 12 tokens over the 6 s makespan


def test_window_per_tenant_and_a_tenant_without_measured_requests(run_mapping):
    raw = windowed({"warmup_requests": 1, "cooldown_requests": 1})
    late = {
        "name": "late",
        "arrival": {"kind": "explicit", "requests": [{"arrival_at_s": 3.0, "prompt_tokens": 5, "output_tokens": 2}]},
    }
    raw["workload"] = {"tenants": [*raw["workload"]["tenants"], late]}
    summary = run_mapping(raw).summary
    assert summary["window"]["num_measured"] == 3 and summary["window"]["to_request"] == 3  # r1, r2, r3
    tenants = summary["tenants"]
    assert tenants["t"]["num_requests"]["arrived"] == 3 and tenants["late"]["num_requests"]["arrived"] == 0
    assert tenants["late"]["itl_s"]["num_gaps"] == 0 and tenants["late"]["ttft_s"]["mean"] is None


def test_slo_verdicts_are_over_the_measured_requests(run_mapping):
    slo = {"ttft_s": 1.2, "itl_s": 2.5, "percentile": 99}
    whole = run_mapping(explicit_scenario(REQUESTS, policy="vllm_v0", slo=slo)).summary["slo"]
    measured = run_mapping(windowed(WINDOWS[0], slo=slo)).summary["slo"]
    assert whole["num_met"] == 1 and whole["attainment_frac"] == 0.25  # r3 (r0's 3 s gap misses the ITL target)
    assert measured["num_met"] == 0 and measured["attainment_frac"] == 0.0  # r1 and r2 miss the TTFT target
    assert measured["percentile_values"] == pytest.approx({"ttft_s": 1.5, "itl_s": 1.97})
    assert not measured["percentile_met"]
    assert measured["goodput_requests_per_s"] == 0.0


def test_cli_printout_says_the_window(tmp_path: Path):
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps(windowed(WINDOWS[0])), encoding="utf-8")
    result = CliRunner().invoke(main, ["run", str(path), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert (
        lines[1]
        == "window (warmup 1 requests, cooldown 1 requests): 2 requests measured (arriving 0.500-1.500 s), 2 left out"
    )
    assert lines[2] == "measured requests: 2 arrived, 2 completed, 0 rejected, 0 unfinished"
    throughput = next(line for line in lines if line.startswith("throughput:"))
    assert throughput.startswith(
        "throughput: 6.0 output tok/s, 2.00 req/s (measured, over their 1.000 s of arrivals); whole run: busy"
    )


def test_compare_shows_how_many_requests_each_variant_measured(tmp_path: Path):
    path = tmp_path / "w.yaml"
    path.write_text(json.dumps(explicit_scenario(REQUESTS, policy="vllm_v0")), encoding="utf-8")
    rows, _ = compare(path, ["metrics.warmup_requests=0,1"], [], tmp_path / "c", jobs=1)
    assert "measured" not in rows[0] and rows[1]["measured"] == 3
    result = CliRunner().invoke(
        main,
        ["compare", str(path), "--vary", "metrics.warmup_requests=0,1", "--jobs", "1", "--out", str(tmp_path / "d")],
    )
    assert result.exit_code == 0, result.output
    header, _, plain, windowed_row = result.output.splitlines()[:4]
    assert header.startswith("| variant | measured | completed |")
    assert plain.startswith("| 0 | - | 4 |") and windowed_row.startswith("| 1 | 3 | 3 |")
    points = (tmp_path / "d" / "points.csv").read_text().splitlines()
    assert points[0].startswith('"warmup_requests","seed","variant"') and "window_num_measured" in points[0]
