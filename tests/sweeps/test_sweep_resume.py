"""A sweep stopped midway and run again computes only what is missing; a failing point stops nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import tiny_yaml

from clustersim.sweeps import Point, load_sweep, run_sweep

TINY = tiny_yaml("tiny-sweep", seed=3, rate_per_s=40.0, max_requests=40)

SWEEP = """\
name: resume
base: tiny.yaml
axes:
  - {path: workload.tenants.0.arrival.rate_per_s, name: rate_per_s, values: [10, 20, 40]}
seeds: 2
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "tiny.yaml").write_text(TINY, encoding="utf-8")
    (tmp_path / "sweep.yaml").write_text(SWEEP, encoding="utf-8")
    return tmp_path


def _mtimes(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in (out / "runs").rglob("requests.parquet")}


def test_a_sweep_interrupted_midway_computes_only_the_missing_points_when_run_again(folder: Path) -> None:
    spec = load_sweep(folder / "sweep.yaml")
    settled: list[str] = []

    def stop_after_two(point: Point, row: dict[str, Any]) -> None:
        settled.append(point.key)
        if len(settled) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, folder / "tiny.yaml", folder / "out", jobs=1, on_point=stop_after_two)
    table = pq.read_table(folder / "out" / "points.parquet").to_pylist()
    assert [row["status"] for row in table] == ["ok", "ok", "not run", "not run", "not run", "not run"]
    assert [row["point"] for row in table[:2]] == settled == ["rate_per_s=10/seed=3", "rate_per_s=10/seed=4"]
    before = _mtimes(folder / "out")

    ran: list[str] = []
    result = run_sweep(spec, folder / "tiny.yaml", folder / "out", jobs=1,
                       on_point=lambda p, r: ran.append(p.key) if not r.get("reused") else None)  # fmt: skip
    assert ran == [p.key for p in result.points[2:]]  # only the four missing points ran
    assert [row["reused"] for row in result.rows] == [True, True, False, False, False, False]
    assert all(row["status"] == "ok" for row in result.rows)
    after = _mtimes(folder / "out")
    assert {k: after[k] for k in before} == before  # the finished runs were not touched
    assert len(pq.read_table(folder / "out" / "requests")) == 6 * 40


def test_a_deleted_or_changed_point_runs_again(folder: Path) -> None:
    spec = load_sweep(folder / "sweep.yaml")
    run_sweep(spec, folder / "tiny.yaml", folder / "out", jobs=2)
    (folder / "out" / "runs" / "rate_per_s=20" / "seed=4" / "summary.json").unlink()
    again = run_sweep(spec, folder / "tiny.yaml", folder / "out", jobs=2)
    assert [row["reused"] for row in again.rows] == [True, True, True, False, True, True]
    # an edit to what every point shares changes every point's scenario
    (folder / "sweep.yaml").write_text(SWEEP + "set: {stop.max_requests: 30}\n", encoding="utf-8")
    edited = run_sweep(load_sweep(folder / "sweep.yaml"), folder / "tiny.yaml", folder / "out", jobs=2)
    assert not any(row["reused"] for row in edited.rows)
    assert len(pq.read_table(folder / "out" / "requests")) == 6 * 30


def test_ctrl_c_keeps_the_settled_points_and_exits_130(folder: Path) -> None:
    slow = SWEEP.replace("values: [10, 20, 40]", "values: [10, 20, 40, 50, 60, 70]")
    (folder / "sweep.yaml").write_text(slow + "set: {stop.max_requests: 2500}\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    command = [sys.executable, "-m", "clustersim", "sweep", "sweep.yaml", "--out", "out", "--jobs", "1"]
    # a shell's background job ignores SIGINT, and a child inherits that: give the sweep a terminal's Ctrl-C
    process = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.monotonic() + 60
    while not list((folder / "out" / "runs").rglob("point.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("clustersim: interrupted; the ")
    table = pq.read_table(folder / "out" / "points.parquet").to_pylist()
    done = [row["point"] for row in table if row["status"] == "ok"]
    assert 1 <= len(done) < 12 and {row["status"] for row in table} <= {"ok", "not run"}

    finished = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    rows = pq.read_table(folder / "out" / "points.parquet").to_pylist()
    assert all(row["status"] == "ok" for row in rows)
    assert sorted(row["point"] for row in rows if row["reused"]) == sorted(done)


def test_a_failing_point_does_not_stop_the_others(folder: Path) -> None:
    poisson = "{name: t, arrival: {kind: poisson, rate_per_s: 5.0}, prompt_tokens: {kind: fixed, tokens: 64}, output_tokens: {kind: fixed, tokens: 8}}"
    trace = "{name: t, arrival: {kind: trace, path: missing.csv, format: csv}}"
    (folder / "sweep.yaml").write_text(
        "name: mixed\nbase: tiny.yaml\naxes:\n"
        "  - {path: cluster.model, name: model, values: [Llama-3.1-8B, Llama-3.1-70B]}\n"
        f"  - {{path: workload.tenants, name: traffic, values: [[{poisson}], [{trace}]], labels: [poisson, trace]}}\n",
        encoding="utf-8",
    )
    result = run_sweep(load_sweep(folder / "sweep.yaml"), folder / "tiny.yaml", folder / "out", jobs=2)
    rows = {p.key: r for p, r in zip(result.points, result.rows, strict=True)}
    assert result.num_failed == 3
    assert rows["model=Llama-3.1-8B/traffic=poisson/seed=3"]["status"] == "ok"
    assert "missing.csv" in rows["model=Llama-3.1-8B/traffic=trace/seed=3"]["error"]
    for traffic in ("poisson", "trace"):
        assert "does not fit on H100-SXM" in rows[f"model=Llama-3.1-70B/traffic={traffic}/seed=3"]["error"]
    table = pq.read_table(folder / "out" / "points.parquet").to_pylist()
    assert [row["status"] for row in table] == ["ok", "failed", "failed", "failed"]
    record = (folder / "out" / "runs" / "model=Llama-3.1-8B" / "traffic=trace" / "seed=3" / "point.json").read_text()
    assert "missing.csv" in record
    assert len(pq.read_table(folder / "out" / "requests")) == 40  # only the point that ran
