"""The per-run figures' reported defects stay fixed: the queue is binned, many replicas draw a mean and
a band, a small pool's KV chart is visible, and a sweep point's figures name its variant."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from clustersim.analysis.memory import plot_kv_memory
from clustersim.analysis.rundata import load_run
from clustersim.analysis.throughput import plot_throughput
from clustersim.analysis.timebins import bin_edges
from clustersim.analysis.timeline import NUM_BINS, binned_signal, plot_timeline
from clustersim.config.loader import load_scenario
from clustersim.runner import run_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _run(tmp_path: Path, scenario: str, *overrides: str) -> Path:
    run_scenario(load_scenario(SCENARIOS / scenario, overrides), tmp_path / "run")
    return tmp_path / "run"


def test_the_waiting_queue_is_binned_and_matches_the_steps(tmp_path: Path) -> None:
    run = load_run(_run(tmp_path, "default.yaml", "stop.max_requests=1500", "cluster.num_replicas=2"))
    assert len(run.steps) > NUM_BINS  # enough steps that drawing each 0/1 flip would fill the panel
    figure = plot_timeline(run)
    queue_ax = figure.axes[1]
    assert queue_ax.get_ylabel().startswith("mean waiting queue")
    edges = bin_edges(run.makespan_s, NUM_BINS)
    for line, replica in zip(queue_ax.get_lines(), (0, 1), strict=True):
        rows = run.steps[run.steps["replica"] == replica]
        expected = binned_signal(rows["started_at_s"].to_numpy(), rows["duration_s"].to_numpy(),
                                 rows["num_waiting"].to_numpy(float), edges, 0.0)  # fmt: skip
        assert len(line.get_ydata()) == NUM_BINS
        assert np.allclose(line.get_ydata(), expected)
    # the batch panel still draws every iteration
    assert len(figure.axes[0].get_lines()[0].get_xdata()) > NUM_BINS


def test_many_replicas_draw_their_mean_and_range_with_a_short_legend(tmp_path: Path) -> None:
    path = _run(tmp_path, "default.yaml", "stop.max_requests=1200", "cluster.num_replicas=12",
                "workload.tenants.0.arrival.rate_per_s=120")  # fmt: skip
    run = load_run(path)
    figure = plot_timeline(run)
    batch_ax = figure.axes[0]
    assert [line.get_label() for line in batch_ax.get_lines()] == ["mean of 12 replicas"]
    bands = [c for c in batch_ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1 and bands[0].get_label() == "least to greatest replica"
    assert len(figure.legends[0].get_texts()) == 2
    edges = bin_edges(run.makespan_s, NUM_BINS)
    per_replica = []
    for replica in range(12):
        rows = run.steps[run.steps["replica"] == replica]
        per_replica.append(binned_signal(rows["started_at_s"].to_numpy(), rows["duration_s"].to_numpy(),
                                         rows["num_seqs"].to_numpy(float), edges, 0.0))  # fmt: skip
    assert np.allclose(batch_ax.get_lines()[0].get_ydata(), np.mean(per_replica, axis=0))


def test_a_small_pools_kv_chart_zooms_to_its_peak(tmp_path: Path) -> None:
    run = load_run(_run(tmp_path, "static-vs-continuous.yaml"))
    figure = plot_kv_memory(run)
    ax = figure.axes[0]
    top = ax.get_ylim()[1]
    stacked = [c for c in ax.collections if isinstance(c, PolyCollection)]
    peak = max(float(np.max(c.get_paths()[0].vertices[:, 1])) for c in stacked if c.get_paths())
    assert 0 < peak <= top < 1.0  # a share of a percent, drawn on an axis that ends just above it
    assert top == pytest.approx(peak * 1.25, rel=1e-6)
    assert "axis up to" in ax.get_ylabel()


def test_a_sweep_points_figures_name_the_variant(tmp_path: Path) -> None:
    path = _run(tmp_path, "static-vs-continuous.yaml")
    (path / "point.json").write_text(json.dumps({"label": "policy=static, seed=1"}), encoding="utf-8")
    run = load_run(path)
    assert run.title.startswith("static-vs-continuous [policy=static, seed=1]")
    assert "[policy=static, seed=1]" in plot_timeline(run).get_suptitle()
    assert "[policy=static, seed=1]" in plot_kv_memory(run).axes[0].get_title()


def test_a_windowed_run_raises_no_false_alarm_about_its_logs(tmp_path: Path) -> None:
    path = _run(tmp_path, "default.yaml", "stop.max_requests=400", "workload.tenants.0.arrival.rate_per_s=80",
                "metrics.warmup_requests=50", "metrics.cooldown_requests=50")  # fmt: skip
    run = load_run(path)
    texts = [t.get_text() for t in plot_throughput(run).axes[0].texts]
    assert not any("disagree" in text for text in texts)
    assert "window" in run.summary
