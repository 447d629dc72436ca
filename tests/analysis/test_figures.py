"""Figures for real (small) runs: the right files appear, are valid PNGs, and edge cases do not crash."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from clustersim.analysis.__main__ import main
from clustersim.analysis.figures import write_figures
from clustersim.analysis.gantt import MAX_GANTT_REQUESTS
from clustersim.analysis.memory import CATEGORIES, ledger_shares
from clustersim.analysis.rundata import load_run
from clustersim.analysis.throughput import tokens_per_s
from clustersim.analysis.timebins import bin_edges, binned_amount, step_path, time_weighted_mean
from clustersim.analysis.timeline import plot_timeline
from clustersim.config.loader import LoadedScenario, load_scenario, read_yaml_mapping, scenario_from_mapping
from clustersim.runner import run_scenario

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"
ALWAYS = {"latency_cdf.png", "timeline.png", "throughput.png", "kv_memory.png"}
WITH_GANTT = ALWAYS | {"requests_gantt.png"}


def _run(tmp_path_factory: pytest.TempPathFactory, scenario: str, *overrides: str) -> Path:
    out_dir = tmp_path_factory.mktemp("run")
    run_scenario(load_scenario(SCENARIOS / scenario, overrides), out_dir)
    return out_dir


@pytest.fixture(scope="module", params=["continuous", "static"])
def small_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The six-request teaching example, under each batching policy."""
    return _run(tmp_path_factory, "static-vs-continuous.yaml", f"scheduler.policy={request.param}")


@pytest.fixture(scope="module")
def large_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Chat traffic on two replicas, just over the Gantt chart's request limit."""
    return _run(
        tmp_path_factory,
        "default.yaml",
        f"stop.max_requests={MAX_GANTT_REQUESTS + 20}",
        "cluster.num_replicas=2",
    )


@pytest.fixture(scope="module")
def messy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tenants, one with prompts too long to serve (rejections), cut off mid-run (unfinished)."""
    raw: dict[str, Any] = copy.deepcopy(read_yaml_mapping(SCENARIOS / "default.yaml"))
    raw["workload"]["tenants"].append(
        {
            "name": "long-docs",
            "arrival": {"kind": "poisson", "rate_per_s": 10},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 6000, "max_tokens": 12000},
            "output_tokens": {"kind": "fixed", "tokens": 50},
        }
    )
    raw["stop"] = {"max_requests": 40, "horizon_s": 0.8}
    # whole prompts (no chunking): prompts over the 8192-token budget are rejected
    raw["scheduler"] = {"policy": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 8192}
    loaded = load_scenario(SCENARIOS / "default.yaml")
    out_dir = tmp_path_factory.mktemp("messy")
    run_scenario(LoadedScenario(scenario_from_mapping(raw, "messy"), "messy", loaded.base_dir), out_dir)
    return out_dir


def _assert_png(path: Path) -> None:
    assert path.is_file(), path
    assert path.stat().st_size > 10_000, f"{path} is suspiciously small"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG"
        width_px, height_px = image.size
    assert 600 <= width_px <= 3000
    assert 300 <= height_px <= 3000


def test_small_run_gets_all_figures_including_gantt(small_run: Path) -> None:
    paths = write_figures(small_run)
    assert {p.name for p in paths} == WITH_GANTT
    assert all(p.parent == small_run / "figures" for p in paths)
    for path in paths:
        _assert_png(path)


def test_large_run_has_no_gantt(large_run: Path, tmp_path: Path) -> None:
    paths = write_figures(large_run, tmp_path / "figs")
    assert {p.name for p in paths} == ALWAYS
    assert not (tmp_path / "figs" / "requests_gantt.png").exists()
    for path in paths:
        _assert_png(path)


def test_tenants_rejections_and_unfinished_requests(messy_run: Path, tmp_path: Path) -> None:
    run = load_run(messy_run)
    assert len(run.tenants) == 2
    assert {"rejected", "unfinished"} <= set(run.requests["status"])
    paths = write_figures(messy_run, tmp_path)
    assert {p.name for p in paths} == WITH_GANTT
    for path in paths:
        _assert_png(path)


def test_run_with_no_completed_requests_and_no_steps(tmp_path_factory: pytest.TempPathFactory) -> None:
    run_dir = _run(tmp_path_factory, "static-vs-continuous.yaml", "stop.horizon_s=0.5")
    run = load_run(run_dir)
    assert run.completed().empty and run.steps.empty
    paths = write_figures(run_dir)
    assert {p.name for p in paths} == WITH_GANTT
    for path in paths:
        if path.name != "kv_memory.png":  # an empty ledger is one short annotated panel
            _assert_png(path)


def test_binned_timeline_is_drawn_for_long_runs(large_run: Path) -> None:
    figure = plot_timeline(load_run(large_run), max_raw_rows=10, num_bins=50)
    assert "bin" in figure.get_suptitle()
    assert all(len(line.get_xdata()) == 50 for ax in figure.axes for line in ax.get_lines())


def test_throughput_integrates_to_the_tokens_emitted(large_run: Path) -> None:
    run = load_run(large_run)
    edges_s = bin_edges(run.makespan_s, 37)
    total_tokens = float((tokens_per_s(run, edges_s) * np.diff(edges_s)).sum())
    assert total_tokens == pytest.approx(run.summary["output_tokens"], rel=1e-9)
    assert total_tokens == pytest.approx(run.requests["num_emitted_tokens"].sum(), rel=1e-9)


@pytest.mark.parametrize(
    ("start_s", "duration_s", "amount", "edges_s", "expected"),
    [
        ([0.0], [1.0], [4.0], [0.0, 1.0], [4.0]),  # one row, one bin
        ([0.0], [10.0], [10.0], [0.0, 2.5, 5.0, 10.0], [2.5, 2.5, 5.0]),  # spread by overlap
        ([0.0, 1.0], [1.0, 1.0], [4.0, 2.0], [0.0, 0.5, 1.0, 2.0], [2.0, 2.0, 2.0]),
        ([2.0], [0.0], [3.0], [0.0, 2.0, 4.0], [0.0, 3.0]),  # zero length: all at its start
        ([4.0], [0.0], [3.0], [0.0, 2.0, 4.0], [0.0, 3.0]),  # last bin is closed on the right
        ([5.0], [1.0], [3.0], [0.0, 2.0, 4.0], [0.0, 0.0]),  # outside the edges: dropped
    ],
)
def test_binned_amount_by_hand(start_s, duration_s, amount, edges_s, expected) -> None:
    assert binned_amount(start_s, duration_s, amount, edges_s) == pytest.approx(expected)


def test_time_weighted_mean_leaves_uncovered_bins_nan() -> None:
    mean, covered_s = time_weighted_mean([0.0, 1.0], [1.0, 0.5], [4.0, 1.0], [0.0, 2.0, 4.0])
    assert mean[0] == pytest.approx((4.0 * 1.0 + 1.0 * 0.5) / 1.5)
    assert np.isnan(mean[1])
    assert covered_s == pytest.approx([1.5, 0.0])


def test_step_path_breaks_at_gaps() -> None:
    x, y = step_path([0.0, 1.0, 3.0], [1.0, 2.0, 4.0], [1.0, 2.0, 3.0], gap_value=0.0)
    assert x.tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0]
    assert y.tolist() == [1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 3.0, 3.0]


def test_module_error_is_one_line_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "not-a-run"
    result = subprocess.run(
        [sys.executable, "-m", "clustersim.analysis", str(missing)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"python -m clustersim.analysis: error: {missing}: no such directory"]


def test_main_rejects_a_directory_without_requests_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"python -m clustersim.analysis: error: {tmp_path}: ")
    assert "requests.parquet" in lines[0]


def test_main_writes_figures_and_prints_paths(
    small_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(small_run), "--out", str(tmp_path / "out")]) == 0
    printed = [Path(line) for line in capsys.readouterr().out.splitlines()]
    assert {p.name for p in printed} == WITH_GANTT
    assert all(p.parent == tmp_path / "out" and p.is_file() for p in printed)


def test_kv_ledger_shares_match_the_summary(tmp_path: Path) -> None:

    out_dir = tmp_path / "kv"
    run_scenario(
        load_scenario(SCENARIOS / "kv-contiguous.yaml", ["stop.max_requests=300"]),
        out_dir,
    )
    run = load_run(out_dir)
    _, shares = ledger_shares(run, num_samples=2000)
    total = sum(shares[c] for c, _ in CATEGORIES)
    assert np.all(total <= 1.0 + 1e-9)
    busy = total > 0
    # sampled over busy time, the stored share approaches the summary's time-weighted one
    assert shares["stored_bytes"][busy].mean() == pytest.approx(run.summary["kv"]["stored_frac"], rel=0.05)
