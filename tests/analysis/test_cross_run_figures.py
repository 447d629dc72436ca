"""The cross-run figures beyond the basics, drawn from small real sweeps and a real plan: latency
against achieved throughput, lines drawn apart without moving their data, the SLO's targets, the log
scale rule, more than twelve variants, the heatmap's legible cells, a plan's frontier with a max-rate
search and two options on one hardware, and the report page's tables, captions and escaping."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import tiny_yaml
from matplotlib.collections import PathCollection
from matplotlib.colors import to_rgb
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

from clustersim.analysis.htmlreport import write_report
from clustersim.analysis.latencycurves import (
    DODGE_PT,
    MAX_LINES,
    log_if_wide,
    plot_latency_throughput,
    plot_latency_vs_achieved,
)
from clustersim.analysis.planfigs import ANSWER_SIZE, at_target, plot_cost_frontier
from clustersim.analysis.sweepdata import load_plan_dir, load_sweep_dir
from clustersim.analysis.sweepfigs import plot_cdf_by_variant, plot_slo_heatmap, spread_by_median_ttft
from clustersim.cli import main
from clustersim.plans import load_plan, run_plan_spec
from clustersim.sweeps import load_sweep, run_sweep

TINY = tiny_yaml("tiny-cross", max_requests=40, extra="scheduler: {policy: continuous, max_num_seqs: 2}\n")

TWO_SEEDS = """\
name: knees <&> co
base: tiny.yaml
axes:
  - {path: workload.tenants.0.arrival.rate_per_s, name: rate_per_s, values: [5, 40]}
  - {path: scheduler.max_num_seqs, name: seats, values: [2, 4]}
seeds: 2
slo: {ttft_s: 0.1, percentile: 99}
"""

FOURTEEN = """\
name: fourteen
base: tiny.yaml
axes:
  - {path: workload.tenants.0.arrival.rate_per_s, name: rate_per_s, values: [5, 10, 15, 20, 30, 40, 60]}
  - {path: scheduler.max_num_seqs, name: seats, values: [1, 4]}
seeds: 1
"""

PLAN = """\
name: cross-plan
base: tiny.yaml
traffic: {rate_per_s: 30}
slo: {ttft_s: 0.1, percentile: 90}
seeds: 1
replicas: {min: 1, max: 4}
options:
  - {name: two-seats}
  - {name: four-seats, set: {scheduler.max_num_seqs: 4}}
max_rate: {tolerance_frac: 0.2}
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cross")
    files = {"tiny.yaml": TINY, "two.yaml": TWO_SEEDS, "fourteen.yaml": FOURTEEN, "plan.yaml": PLAN}
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    run_sweep(load_sweep(root / "two.yaml"), root / "tiny.yaml", root / "two", jobs=2)
    run_sweep(load_sweep(root / "fourteen.yaml"), root / "tiny.yaml", root / "fourteen", jobs=2)
    run_plan_spec(load_plan(root / "plan.yaml"), root / "tiny.yaml", root / "plan", jobs=2)
    return root


def _bars(figure: Figure, panel: int) -> list[ErrorbarContainer]:
    return [c for c in figure.axes[panel].containers if isinstance(c, ErrorbarContainer)]


def test_latency_against_achieved_throughput_plots_the_achieved_means(root: Path) -> None:
    data = load_sweep_dir(root / "two")
    figure = plot_latency_vs_achieved(data)
    stats = pq.read_table(root / "two" / "stats.parquet").to_pandas()
    for container, seats in zip(_bars(figure, 1), (2, 4), strict=True):
        line = stats[stats["seats"] == seats].sort_values("rate_per_s")
        x, y = container.lines[0].get_data()
        assert np.allclose(x, line["output_tokens_per_s_mean"])
        assert np.allclose(y, line["ttft_p99_s_mean"] * 1e3)
        assert container.has_yerr and not container.has_xerr
    labels = sorted(text.get_text() for text in figure.axes[0].texts)
    assert labels == ["40", "40", "5", "5"]  # each point named by its rate
    assert "achieved throughput (points along rate_per_s)" in figure.get_suptitle()


def test_lines_sharing_a_rate_are_drawn_apart_without_moving_their_data(root: Path) -> None:
    figure = plot_latency_throughput(load_sweep_dir(root / "two"))
    figure.canvas.draw()
    first, second = (c.lines[0] for c in _bars(figure, 0))
    assert list(first.get_xdata()) == list(second.get_xdata()) == [5.0, 40.0]
    apart = second.get_transform().transform((5.0, 1.0))[0] - first.get_transform().transform((5.0, 1.0))[0]
    assert apart == pytest.approx(DODGE_PT * figure.dpi / 72)
    ymin, ymax = figure.axes[0].get_ylim()  # the shifted lines still set the limits
    assert ymin <= float(np.min(first.get_ydata())) and ymax >= float(np.max(first.get_ydata()))


def test_the_slo_target_is_dashed_on_the_panels_of_its_percentile(root: Path) -> None:
    figure = plot_latency_throughput(load_sweep_dir(root / "two"))
    targets = {ax.get_title(): [line.get_ydata()[0] for line in ax.get_lines() if line.get_label() == "SLO target"]
               for ax in figure.axes}  # fmt: skip
    assert targets == {"TTFT p50 (ms)": [], "TTFT p99 (ms)": [100.0], "ITL p99 (ms)": [], "TPOT p99 (ms)": []}
    assert "SLO target" in [text.get_text() for text in figure.legends[0].get_texts()]


@pytest.mark.parametrize(("values", "log"), [([10.0, 99.0], False), ([10.0, 100.0], True), ([0.0, 5.0, 40.0], False)])
def test_a_latency_axis_is_logarithmic_from_one_decade(values: list[float], log: bool) -> None:
    ax = Figure().subplots()
    ax.plot([1, 2, 3][: len(values)], values)
    log_if_wide(ax, np.array(values))
    assert (ax.get_yscale() == "log") is log
    bottom, top = ax.get_ylim()
    assert bottom >= min(values) / 3 if log else bottom == 0.0  # a linear latency axis starts at 0
    assert top >= max(values)


def test_the_spread_keeps_the_lowest_and_highest_median_ttft_in_the_given_order() -> None:
    def group(ttft_s: float) -> pd.DataFrame:
        return pd.DataFrame({"arrival_at_s": [0.0], "first_token_at_s": [ttft_s]})

    groups = [(name, group(t)) for name, t in (("a", 0.5), ("b", 0.1), ("c", 0.3), ("d", 0.9), ("e", 0.2))]
    assert [name for name, _ in spread_by_median_ttft(groups, 3)] == ["b", "c", "d"]  # medians 0.1, 0.3, 0.9
    assert spread_by_median_ttft(groups, 5) == groups


def test_more_than_twelve_variants_draw_twelve_spread_over_median_ttft(root: Path) -> None:
    data = load_sweep_dir(root / "fourteen")
    requests = data.requests(["status", "arrival_at_s", "first_token_at_s", "max_itl_s"])
    figure = plot_cdf_by_variant(data, requests)
    lines = figure.axes[0].get_lines()
    assert len(lines) == MAX_LINES
    assert figure.legends[0].get_title().get_text() == "variant (12 of 14, spread over median TTFT)"
    done = requests[requests["status"] == "completed"]
    medians = (done["first_token_at_s"] - done["arrival_at_s"]).groupby([done["rate_per_s"], done["seats"]]).median()
    drawn = {line.get_label() for line in lines}
    for rate, seats in (medians.idxmin(), medians.idxmax()):
        assert f"rate_per_s={rate}, seats={seats}" in drawn
    styles = {(to_rgb(line.get_color()), line.get_linestyle()) for line in lines}
    assert len(styles) == MAX_LINES  # no two lines look alike
    for line in lines:
        assert line.get_ydata()[-1] == 1.0


def test_heatmap_text_stays_legible_on_dark_cells(root: Path) -> None:
    data = load_sweep_dir(root / "two")
    ax = plot_slo_heatmap(data).axes[0]
    for text in ax.texts:
        value = float(text.get_text().rstrip("%")) / 100
        assert to_rgb(text.get_color()) == (to_rgb("white") if value < 0.2 or value > 0.8 else (0.0, 0.0, 0.0))
    assert "by rate_per_s and seats" in ax.figure.get_suptitle() and "p99 TTFT <= 100 ms" in ax.figure.get_suptitle()


def test_the_frontier_draws_the_replica_search_and_circles_the_answers(root: Path) -> None:
    data = load_plan_dir(root / "plan")
    figure = plot_cost_frontier(data)
    ax = figure.axes[0]
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    circles = [c for c in scatters if c.get_sizes()[0] == ANSWER_SIZE]
    points = [c for c in scatters if c.get_sizes()[0] != ANSWER_SIZE]
    searched = at_target(data)
    assert sum(len(c.get_offsets()) for c in points) == len(searched) > 0
    assert (searched["rate_per_s"] == 30.0).all()
    answers = data.plan[data.plan["num_replicas"].notna()]
    circled = sorted(tuple(c.get_offsets()[0]) for c in circles)
    assert circled == sorted(zip(answers["num_gpus"].astype(float), answers["cost_usd_per_hour"], strict=True))
    not_drawn = len(data.evaluations) - len(searched)
    assert not_drawn > 0 and f"{not_drawn} max-rate evaluations not drawn" in figure.get_suptitle()
    # the two options (one GPU model) are drawn apart
    shifts = {tuple(np.round(c.get_offset_transform().transform((1.0, 1.0)), 3)) for c in points}
    assert len(shifts) == 2


def test_the_report_page_holds_the_tables_captions_and_escaped_text(root: Path) -> None:
    page, figures, skipped = write_report(root / "two")
    text = page.read_text(encoding="utf-8")
    assert text.count('<img src="data:image/png;base64,') == len(figures) == 4 and not skipped
    assert "knees &lt;&amp;&gt; co" in text and "knees <&> co" not in text
    assert "the lowest rate at which the SLO is missed in some seed" in text  # the knee, in words
    stats = load_sweep_dir(root / "two").stats
    rows = re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td><td>[^<]*</td><td>[^<]*</td><td>([\d.]+) ±", text)
    assert len(rows) == len(stats)
    for rate, seats, ttft_ms in rows:
        row = stats[(stats["rate_per_s"] == int(rate)) & (stats["seats"] == int(seats))].iloc[0]
        assert float(ttft_ms) == pytest.approx(row["ttft_p99_s_mean"] * 1e3, rel=5e-3)
    page, figures, skipped = write_report(root / "plan")
    text = page.read_text(encoding="utf-8")
    plan = load_plan_dir(root / "plan").plan
    ranked = re.findall(r"<tr><td>(\d+)</td><td>([\w-]+)</td>", text)
    assert ranked[: len(plan)] == [(str(r), o) for r, o in zip(plan["rank"], plan["option"], strict=True)]


def test_report_names_what_it_skips_and_refuses_a_folder_of_nothing(root: Path) -> None:
    result = CliRunner().invoke(main, ["report", str(root / "fourteen")])
    assert result.exit_code == 0, result.output
    assert "skipped slo_heatmap.png: the sweep judges no SLO at a percentile" in result.stdout
    page = (root / "fourteen" / "report.html").read_text(encoding="utf-8")
    assert "<h2>figures not drawn</h2>" in page and "the sweep judges no SLO at a percentile" in page
    (root / "nothing").mkdir()
    result = CliRunner().invoke(main, ["report", str(root / "nothing")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "not a run, sweep or plan folder" in result.stderr
    (root / "nothing" / "INCOMPLETE").write_text("interrupted", encoding="utf-8")  # a run that stopped says so
    result = CliRunner().invoke(main, ["report", str(root / "nothing")])
    assert result.exit_code == 2 and "the run did not finish (INCOMPLETE is present)" in result.stderr
