"""Figures across runs, and the report, drawn from small real sweeps and plans: the plotted data is the
tables' data (means, intervals, knees, CDFs, verdicts, answers), not only a file on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import tiny_yaml
from matplotlib.collections import PathCollection
from matplotlib.container import ErrorbarContainer

from clustersim.analysis.htmlreport import write_report
from clustersim.analysis.latencycurves import knee_rate, plot_latency_throughput
from clustersim.analysis.planfigs import plot_cost_frontier
from clustersim.analysis.sweepdata import load_plan_dir, load_sweep_dir
from clustersim.analysis.sweepfigs import plot_cdf_by_variant, plot_slo_heatmap
from clustersim.cli import main
from clustersim.plans import load_plan, run_plan_spec
from clustersim.sweeps import load_sweep, run_sweep

TINY = tiny_yaml(
    "tiny-figures", seed=1, rate_per_s=10.0, max_requests=60, extra="scheduler: {policy: continuous, max_num_seqs: 2}\n"
)

SWEEP = """\
name: figs
base: tiny.yaml
axes:
  - {path: workload.tenants.0.arrival.rate_per_s, name: rate_per_s, values: [5, 20, 40]}
  - {path: scheduler.max_num_seqs, name: seats, values: [2, 4]}
seeds: 2
slo: {ttft_s: 0.1, percentile: 90}
"""

PLAN = """\
name: figs-plan
base: tiny.yaml
traffic: {rate_per_s: 40}
slo: {ttft_s: 0.1, percentile: 90}
seeds: 1
replicas: {min: 1, max: 8}
options:
  - {name: two-seats}
  - {name: four-seats, set: {scheduler.max_num_seqs: 4}}
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("figs")
    for name, text in (("tiny.yaml", TINY), ("sweep.yaml", SWEEP), ("plan.yaml", PLAN)):
        (root / name).write_text(text, encoding="utf-8")
    run_sweep(load_sweep(root / "sweep.yaml"), root / "tiny.yaml", root / "sweep", jobs=2)
    run_plan_spec(load_plan(root / "plan.yaml"), root / "tiny.yaml", root / "plan", jobs=2)
    return root


def test_latency_throughput_draws_the_means_intervals_and_knees(folder: Path) -> None:
    data = load_sweep_dir(folder / "sweep")
    figure = plot_latency_throughput(data)
    ttft_p99 = figure.axes[1]
    assert ttft_p99.get_title() == "TTFT p99 (ms)"
    containers = [c for c in ttft_p99.containers if isinstance(c, ErrorbarContainer)]
    assert len(containers) == 2  # one line per number of seats
    stats = pq.read_table(folder / "sweep" / "stats.parquet").to_pandas()
    for container, seats in zip(containers, (2, 4), strict=True):
        line = stats[stats["seats"] == seats].sort_values("rate_per_s")
        x, y = container.lines[0].get_data()
        assert list(x) == [5.0, 20.0, 40.0]
        assert np.allclose(y, line["ttft_p99_s_mean"] * 1e3)
        segments = container.lines[2][0].get_segments()  # the error bars: (x, low) to (x, high)
        assert np.allclose([s[1][1] for s in segments], line["ttft_p99_s_ci_high"] * 1e3)
        low = np.maximum(line["ttft_p99_s_ci_low"] * 1e3, 0.0)  # a latency interval is drawn from 0 at most
        assert np.allclose([s[0][1] for s in segments], low)
    knees = sorted(float(v.get_xdata()[0]) for v in ttft_p99.get_lines() if v.get_linestyle() == ":")
    expected = []
    for seats in (2, 4):
        line = stats[stats["seats"] == seats].sort_values("rate_per_s")
        missed = line[~line["slo_met_all_seeds"].astype(bool)]["rate_per_s"]
        if len(missed):
            expected.append(float(missed.iloc[0]))
    assert knees == sorted(expected) and expected  # the tiny cluster misses the SLO at some rate


def test_the_knee_without_an_slo_is_where_p99_ttft_doubles() -> None:
    import pandas as pd

    line = pd.DataFrame({"rate_per_s": [1.0, 2.0, 3.0, 4.0], "ttft_p99_s_mean": [0.1, 0.15, 0.25, 0.9],
                         "slo_met_all_seeds": [None, None, None, None]})  # fmt: skip
    assert knee_rate(line, "rate_per_s") == (3.0, "p99 TTFT over 2x its lowest")


def test_cdf_lines_are_each_variants_sorted_latencies(folder: Path) -> None:
    data = load_sweep_dir(folder / "sweep")
    requests = data.requests(["status", "arrival_at_s", "first_token_at_s", "max_itl_s"])
    figure = plot_cdf_by_variant(data, requests)
    ttft_ax = figure.axes[0]
    lines = ttft_ax.get_lines()
    assert [line.get_label() for line in lines][:2] == ["rate_per_s=5, seats=2", "rate_per_s=5, seats=4"]
    assert len({tuple(line.get_color()) for line in lines}) == len(lines) == 6
    done = requests[(requests["status"] == "completed") & (requests["rate_per_s"] == "20") & (requests["seats"] == "4")]
    expected = np.sort((done["first_token_at_s"] - done["arrival_at_s"]).to_numpy() * 1e3)
    line = next(line for line in lines if line.get_label() == "rate_per_s=20, seats=4")
    assert np.allclose(line.get_xdata(), expected)
    assert line.get_ydata()[-1] == 1.0 and len(line.get_ydata()) == 120  # two seeds of 60 requests


def test_the_heatmap_cells_are_the_share_of_seeds_meeting_the_slo(folder: Path) -> None:
    data = load_sweep_dir(folder / "sweep")
    figure = plot_slo_heatmap(data)
    grid = figure.axes[0].get_images()[0].get_array()
    stats = data.stats
    for i, rate in enumerate((5, 20, 40)):
        for j, seats in enumerate((2, 4)):
            row = stats[(stats["rate_per_s"] == rate) & (stats["seats"] == seats)].iloc[0]
            assert grid[i, j] == pytest.approx(row["slo_met_seeds_frac"])


def test_the_frontier_circles_exactly_the_plans_answers(folder: Path) -> None:
    data = load_plan_dir(folder / "plan")
    figure = plot_cost_frontier(data)
    circles = [c for c in figure.axes[0].collections if isinstance(c, PathCollection) and c.get_sizes()[0] == 220]
    circled = sorted(tuple(c.get_offsets()[0]) for c in circles)
    plan = pq.read_table(folder / "plan" / "plan.parquet").to_pandas()
    answers = plan[plan["num_replicas"].notna()]
    assert circled == sorted(zip(answers["num_gpus"].astype(float), answers["cost_usd_per_hour"], strict=True))
    assert "figs-plan" in figure.get_suptitle()


def test_report_pages_embed_every_figure_and_name_the_skipped(folder: Path) -> None:
    page, figures, skipped = write_report(folder / "sweep")
    text = page.read_text()
    assert {p.name for p in figures} == {"latency_throughput.png", "latency_vs_achieved.png",
                                         "latency_cdf_by_variant.png", "slo_heatmap.png"}  # fmt: skip
    assert text.count('<img src="data:image/png;base64,') == 4 and not skipped
    assert "<h2>sweep.yaml</h2>" in text and "rate_per_s" in text and "seeds ok" in text
    page, figures, skipped = write_report(folder / "plan")
    assert [p.name for p in figures] == ["cost_frontier.png"]
    assert "<h2>the options, ranked</h2>" in page.read_text()
    one = folder / "sweep" / "runs" / "rate_per_s=20" / "seats=4" / "seed=2"
    page, figures, skipped = write_report(one)
    assert "requests_gantt.png" in {p.name for p in figures} and not skipped  # 60 requests: one bar each
    assert "run tiny-figures [rate_per_s=20, seats=4, seed=2]" in page.read_text()  # the variant in the title


def test_report_on_a_sweep_without_a_rate_or_slo_says_why(folder: Path) -> None:
    result = CliRunner().invoke(
        main, ["compare", str(folder / "tiny.yaml"), "--vary", "scheduler.max_num_seqs=2,4", "--out", str(folder / "c")]
    )
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["report", str(folder / "c")])
    assert result.exit_code == 0, result.output
    assert "skipped latency_throughput.png: no axis is an offered rate" in result.stdout
    assert "skipped slo_heatmap.png: the sweep judges no SLO at a percentile" in result.stdout
    result = CliRunner().invoke(main, ["report", str(folder / "empty")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "no such folder" in result.stderr
