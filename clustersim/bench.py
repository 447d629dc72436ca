"""The speed benchmark: standard scenarios at 10k/100k/1M/10M requests, wall time, events and peak RSS.

Each case runs in its own Python process so that its peak RSS is its own. Results are printed as
a table and appended to a CSV file (``bench/results.csv`` by default) with the machine they ran on.

The traffic is the peer comparison's: chat-like requests with the Azure 2023 conversation trace's
length mix (~1,150 prompt / ~210 output tokens), Llama-2-7B on A100-80GB replicas, each replica
offered 3.9 req/s (about 95% of the ~4.1 req/s it sustains with this mix under the vLLM V1 engine
profile; 4.5 req/s before the profiles were refitted to the public corpus, when it sustained ~4.75).
"""

from __future__ import annotations

import csv
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustersim.bench_replay import NUM_COPIES, REPLAY_CASE, REPLAY_REQUESTS, replay_scenario, write_replay_trace
from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.runner import run_scenario

RATE_PER_REPLICA_PER_S = 3.9


@dataclass(frozen=True)
class BenchCase:
    """One benchmark scenario, scaled by its number of requests."""

    name: str
    num_replicas: int
    description: str


CASES = {
    case.name: case
    for case in (
        BenchCase("1-replica", 1, "one A100 near saturation"),
        BenchCase("8-replicas", 8, "8 A100s behind a round-robin router"),
        BenchCase("64-replicas", 64, "64 A100s behind a round-robin router"),
        BenchCase(REPLAY_CASE, 8, f"the Azure conversation trace x{NUM_COPIES} at ~44 req/s on 8 H100s (one size)"),
    )
}

SIZES = {"10k": 10_000, "100k": 100_000, "1M": 1_000_000, "10M": 10_000_000}  # 10M: about 13 minutes a case

RESULT_COLUMNS = (
    "date",
    "machine",
    "python",
    "case",
    "num_requests",
    "fast_forward",
    "wall_s",
    "sim_requests_per_wall_s",
    "sim_output_tokens_per_wall_s",
    "num_events",
    "steps_rows",
    "num_iterations",
    "peak_rss_mb",
    "makespan_s",
    "us_per_request",
    "events_per_request",
    "process_wall_s",
    "process_requests_per_s",
    "trace",
)


def bench_scenario(case: BenchCase, num_requests: int, fast_forward: bool = True) -> dict[str, Any]:
    """The scenario mapping of one benchmark case."""
    return {
        "name": f"bench-{case.name}-{num_requests}",
        "seed": 1,
        "workload": {
            "tenants": [
                {
                    "name": "chat",
                    "arrival": {"kind": "poisson", "rate_per_s": RATE_PER_REPLICA_PER_S * case.num_replicas},
                    "prompt_tokens": {
                        "kind": "lognormal",
                        "median_tokens": 1020,
                        "sigma": 0.5,
                        "min_tokens": 4,
                        "max_tokens": 8192,
                    },
                    "output_tokens": {
                        "kind": "lognormal",
                        "median_tokens": 129,
                        "sigma": 0.99,
                        "min_tokens": 1,
                        "max_tokens": 2048,
                    },
                }
            ]
        },
        "cluster": {"num_replicas": case.num_replicas, "hardware": "A100-80GB", "model": "Llama-2-7B"},
        "scheduler": {"policy": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 16384},
        "stop": {"max_requests": num_requests},
        "simulation": {"fast_forward": fast_forward},
    }


def bench_runs(cases: list[str], sizes: list[str], step_mode: bool) -> list[tuple[str, int, bool]]:
    """(case, requests, fast forward) for every run asked for; the trace replay has one size, run once."""
    runs = []
    for index, size in enumerate(sizes):
        for case in cases:
            if case == REPLAY_CASE and index > 0:
                continue
            num_requests = REPLAY_REQUESTS if case == REPLAY_CASE else SIZES[size]
            runs += [(case, num_requests, fast) for fast in ((True, False) if step_mode else (True,))]
    return runs


def run_one(case_name: str, num_requests: int, fast_forward: bool) -> dict[str, Any]:
    """Run one case in this process and measure it (call in a fresh process for a clean peak RSS)."""
    trace = ""
    with tempfile.TemporaryDirectory(prefix="clustersim-bench-") as tmp:
        if case_name == REPLAY_CASE:  # the trace is written before the clock starts
            trace = write_replay_trace(Path(tmp) / "replay.parquet")
            raw, num_requests = replay_scenario("replay.parquet", fast_forward), REPLAY_REQUESTS
        else:
            raw = bench_scenario(CASES[case_name], num_requests, fast_forward)
        scenario = scenario_from_mapping(raw, f"bench {case_name}")
        started = time.perf_counter()
        result = run_scenario(LoadedScenario(scenario, "bench", Path(tmp)), Path(tmp) / "run")
        wall_s = time.perf_counter() - started
        steps_rows = _count_rows(Path(tmp) / "run" / "steps.parquet")
    summary = result.summary
    peak_rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "case": case_name,
        "num_requests": num_requests,
        "fast_forward": fast_forward,
        "wall_s": round(wall_s, 3),
        "sim_requests_per_wall_s": round(num_requests / wall_s),
        "sim_output_tokens_per_wall_s": round(summary["output_tokens"] / wall_s),
        "num_events": summary["simulator"]["num_events"],
        "steps_rows": steps_rows,
        "num_iterations": summary["replicas"]["num_steps"],
        "peak_rss_mb": round(peak_rss_kb / 1024),
        "makespan_s": round(summary["makespan_s"], 1),
        "us_per_request": round(wall_s / num_requests * 1e6, 1),
        "events_per_request": round(summary["simulator"]["num_events"] / num_requests, 2),
        "trace": trace,
    }


def _count_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def machine_description() -> str:
    """CPU model and core count, for the results table."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model} ({os.cpu_count()} cores)"


def run_in_child(case_name: str, num_requests: int, fast_forward: bool) -> dict[str, Any]:
    """Run one case in a child process and return its measurements, with the whole process's wall
    time (start-up and imports included) as ``process_wall_s``."""
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "clustersim.bench", case_name, str(num_requests), "1" if fast_forward else "0"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark {case_name} {num_requests} failed:\n{proc.stderr}")
    process_wall_s = time.perf_counter() - started
    measured: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    measured["process_wall_s"] = round(process_wall_s, 3)
    measured["process_requests_per_s"] = round(measured["num_requests"] / process_wall_s)
    return measured


def append_results(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append measured rows (with date, machine, python) to a CSV file, writing a header if new; a
    file written with fewer columns is rewritten with today's (its rows keep their values)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine_description(),
        "python": platform.python_version(),
    }
    earlier: list[dict[str, Any]] = []
    if path.exists():
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames is not None and list(reader.fieldnames) != list(RESULT_COLUMNS):
                earlier = list(reader)
    mode = "w" if earlier or not path.exists() else "a"
    with path.open(mode, newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=RESULT_COLUMNS, extrasaction="ignore")
        if mode == "w":
            writer.writeheader()
        writer.writerows(earlier)
        for row in rows:
            writer.writerow({**stamp, **row})


def format_table(rows: list[dict[str, Any]]) -> str:
    """The measurements as an aligned text table (req/s: the run; process req/s: the whole process)."""
    header = (
        f"{'case':<13}{'requests':>10}{'mode':>5}{'wall s':>8}{'req/s':>8}{'proc req/s':>11}{'us/req':>8}"
        f"{'ev/req':>7}{'out tok/s':>11}{'events':>12}{'rows':>11}{'RSS MB':>8}"
    )
    lines = [header]
    for r in rows:
        lines.append(
            f"{r['case']:<13}{r['num_requests']:>10,}{'fast' if r['fast_forward'] else 'step':>5}{r['wall_s']:>8.2f}"
            f"{r['sim_requests_per_wall_s']:>8,}{r.get('process_requests_per_s', 0):>11,}{r['us_per_request']:>8.1f}"
            f"{r['events_per_request']:>7.2f}{r['sim_output_tokens_per_wall_s']:>11,}{r['num_events']:>12,}"
            f"{r['steps_rows']:>11,}{r['peak_rss_mb']:>8,}"
        )
    return "\n".join(lines)


def format_markdown_table(rows: list[dict[str, Any]]) -> str:
    """The measurements as a Markdown table (for the docs)."""
    lines = [
        "| case | requests | mode | wall s | simulated req/s | whole-process req/s | us/request | events/request "
        "| output tok/s | steps rows | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['num_requests']:,} | {'fast' if r['fast_forward'] else 'step'} | {r['wall_s']:.2f} "
            f"| {r['sim_requests_per_wall_s']:,} | {r.get('process_requests_per_s', 0):,} | {r['us_per_request']:.1f} "
            f"| {r['events_per_request']:.2f} | {r['sim_output_tokens_per_wall_s']:,} | {r['steps_rows']:,} "
            f"| {r['peak_rss_mb']:,} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    name, size, fast = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    print(json.dumps(run_one(name, size, fast)))
