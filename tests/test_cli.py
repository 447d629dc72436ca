"""The command line: the README's main job, summaries, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import SCENARIOS

from clustersim.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_run_worked_example_prints_summary(tmp_path: Path):
    result = invoke("run", str(SCENARIOS / "static-vs-continuous.yaml"), "--out", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    assert "makespan 10.000 s" in result.output
    assert "6 arrived, 6 completed, 0 rejected, 0 unfinished" in result.output
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["makespan_s"] == 10.0


def test_summary_shows_inter_token_latency_and_the_missed_target(tmp_path: Path):
    result = invoke("run", "streaming-smoothness", "--out", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("ITL ms") for line in lines) and any(line.startswith("max ITL ms") for line in lines)
    verdict = next(line for line in lines if line.startswith("p99 targets"))
    assert "MISSED" in verdict and "itl_s" in verdict and verdict.count("(missed)") == 1  # TPOT's p99 is within
    assert (tmp_path / "r" / "itl.parquet").is_file()


def test_builtin_scenario_by_name_and_set(tmp_path: Path):
    result = invoke(
        "run", "static-vs-continuous", "--set", "scheduler.policy=static", "--out", str(tmp_path), "--quiet"
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["makespan_s"] == 14.0


def test_default_scenario_runs(tmp_path: Path):
    result = invoke("run", "--out", str(tmp_path), "--set", "stop.max_requests=200")
    assert result.exit_code == 0, result.output
    assert "scenario default-chat" in result.output
    assert (tmp_path / "requests.parquet").exists() and (tmp_path / "steps.parquet").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "missing.yaml"], "clustersim: error: missing.yaml: no such file"),
        (
            ["run", "--set", "cluster.hardware=H100X"],
            "cluster.hardware: unknown hardware 'H100X' (did you mean 'H100'?); known: ",
        ),
        (
            ["run", "--set", "workload.tenants.0.arrival.rate_per_s=-2"],
            "workload.tenants[0].arrival.rate_per_s: input should be greater than 0 (got -2)",
        ),
        (
            ["run", "--set", "kv.block_sise_tokens=8"],
            "kv.block_sise_tokens: unknown field (did you mean 'block_size_tokens'?)",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, tmp_path: Path):
    result = invoke(*args, "--out", str(tmp_path / "never"))
    assert result.exit_code == 2
    assert message in result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert not (tmp_path / "never").exists()


def test_console_entry_point_exit_code(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: {tenants: []}\ncluster: {hardware: H100-SXM, model: Llama-3.1-8B}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "clustersim", "run", str(bad)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert proc.stderr == f"clustersim: error: {bad}: workload.tenants: needs at least 1 item(s), got 0\n"


def test_report_works_from_a_folder_with_an_analysis_subfolder(tmp_path: Path):
    run_dir = tmp_path / "run"
    assert invoke("run", "static-vs-continuous", "--out", str(run_dir), "--quiet").exit_code == 0
    shadow = tmp_path / "analysis"  # a user's own analysis/ package must not shadow the figures
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the user project, not clustersim')\n")
    result = subprocess.run(
        [sys.executable, "-m", "clustersim", "report", str(run_dir)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (run_dir / "figures" / "latency_cdf.png").exists()


def test_report_without_the_plots_extra_says_what_to_install(tmp_path: Path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "seaborn" else real(name, *a))
    result = invoke("report", str(tmp_path))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "clustersim: error: clustersim report needs seaborn (the plots extra): "
        "python -m pip install 'clustersim[plots]' (or '.[plots]' from a source tree)"
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "--sizes", "10k"],
        ["compare", "default", "--vary", "seed=1,2"],
        ["validate-cost", "."],
    ],
)
def test_a_malformed_doc_target_fails_before_any_work(tmp_path: Path, args: list[str]):
    results = tmp_path / "results.csv"
    extra = ["--results", str(results)] if args[0] == "bench" else []
    result = CliRunner().invoke(main, [*args, *extra, "--doc", "docs/speed.md"])
    assert result.exit_code == 2
    assert "--doc: expected FILE.md#name" in result.output
    assert not results.exists()  # the benchmark did not run
