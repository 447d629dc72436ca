"""The ``clustersim`` command. Thin: parse arguments, call the library, print, map errors to exit 2."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from clustersim import __version__
from clustersim.bench import CASES, SIZES, append_results, format_table, machine_description, run_in_child
from clustersim.config.catalogue import builtin_data_dir
from clustersim.config.loader import load_scenario
from clustersim.errors import ClusterSimError, did_you_mean
from clustersim.invariants import InvariantViolation
from clustersim.sim import run_scenario

EXIT_BAD_INPUT = 2
EXIT_BUG = 3


def _fail(message: str) -> None:
    click.echo(f"clustersim: error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def resolve_scenario_path(scenario: str | None) -> Path:
    """A path as given, else a built-in scenario by name; no argument means the built-in default."""
    if scenario is None:
        return builtin_data_dir("scenarios") / "default.yaml"
    path = Path(scenario)
    if path.exists() or path.suffix in (".yaml", ".yml"):
        return path
    builtin = builtin_data_dir("scenarios") / f"{scenario}.yaml"
    return builtin if builtin.exists() else path


def _fmt(value: Any, scale: float = 1.0, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value * scale:.{digits}f}"


def format_summary(summary: dict[str, Any]) -> str:
    """A short, aligned text table of a run's summary."""
    counts = summary["num_requests"]
    lines = [
        f"scenario {summary['scenario']}  seed {summary['seed']}  makespan {summary['makespan_s']:.3f} s",
        f"requests: {counts['arrived']} arrived, {counts['completed']} completed, "
        f"{counts['rejected']} rejected, {counts['unfinished']} unfinished",
        f"{'metric':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    for name, label in (("ttft_s", "TTFT ms"), ("tpot_s", "TPOT ms"), ("e2e_s", "E2E ms"), ("queue_s", "queue ms")):
        row = summary[name]
        lines.append(f"{label:<10}" + "".join(f"{_fmt(row[k], 1e3, 1):>10}" for k in ("mean", "p50", "p90", "p99")))
    replicas = summary["replicas"]
    lines.append(
        f"throughput: {_fmt(summary['output_tokens_per_s'], digits=1)} output tok/s, "
        f"{_fmt(summary['requests_per_s'], digits=2)} req/s; busy {_fmt(replicas['mean_busy_frac'], 100, 1)}%, "
        f"mean batch {_fmt(replicas['mean_batch_seqs'], digits=1)} seqs, "
        f"KV peak {_fmt(replicas['kv_peak_used_frac'], 100, 1)}%, preemptions {replicas['num_preemptions']}"
    )
    if "slo" in summary:
        slo = summary["slo"]
        targets = ", ".join(f"{k} <= {v}" for k, v in slo["targets"].items())
        lines.append(
            f"SLO ({targets}): {_fmt(slo['attainment_frac'], 100, 1)}% of requests met it; "
            f"goodput {_fmt(slo['goodput_requests_per_s'], digits=2)} req/s"
        )
    return "\n".join(lines)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="clustersim")
def main() -> None:
    """clustersim: a discrete-event performance model of an LLM GPU serving cluster."""


@main.command()
@click.argument("scenario", required=False)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Output folder [default: runs/NAME-TIME].")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE", help="Override a scenario field.")
@click.option("--quiet", is_flag=True, help="Print only the output folder.")
def run(scenario: str | None, out_dir: Path | None, overrides: tuple[str, ...], quiet: bool) -> None:
    """Run SCENARIO (a YAML file or a built-in name; the built-in default chat scenario if omitted)."""
    try:
        loaded = load_scenario(resolve_scenario_path(scenario), overrides)
        if out_dir is None:
            out_dir = Path("runs") / f"{loaded.scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        started = time.perf_counter()
        result = run_scenario(loaded, out_dir)
    except ClusterSimError as exc:
        _fail(str(exc))
        return
    except InvariantViolation as exc:
        click.echo(f"clustersim: internal error: {exc} (outputs kept in {out_dir})", err=True)
        sys.exit(EXIT_BUG)
    wall_s = time.perf_counter() - started
    if not quiet:
        click.echo(format_summary(result.summary))
        click.echo(f"wrote {result.out_dir}/ (requests.parquet, steps.parquet, summary.json) in {wall_s:.2f} s wall")
    else:
        click.echo(str(result.out_dir))


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Figure folder [default: RUN_DIR/figures].")
def report(run_dir: Path, out_dir: Path | None) -> None:
    """Write the figures of the run in RUN_DIR (latency CDFs, timeline, throughput, Gantt for small runs)."""
    # imported here, not at the top: plotting libraries take a second to load and `run` never needs them
    from analysis.figures import write_figures
    from analysis.rundata import RunDirError

    try:
        paths = write_figures(run_dir, out_dir)
    except RunDirError as exc:
        _fail(str(exc))
        return
    for path in paths:
        click.echo(str(path))


@main.command()
@click.option("--cases", default=",".join(CASES), show_default=True, help="Comma-separated benchmark cases.")
@click.option("--sizes", default="10k,100k", show_default=True, help=f"Comma-separated sizes from {', '.join(SIZES)}.")
@click.option("--step-mode", is_flag=True, help="Also run the step-by-step reference mode for comparison.")
@click.option(
    "--results",
    type=click.Path(path_type=Path),
    default=Path("bench/results.csv"),
    show_default=True,
    help="CSV file the measurements are appended to.",
)
def bench(cases: str, sizes: str, step_mode: bool, results: Path) -> None:
    """Measure simulator speed on the standard benchmark scenarios (each in its own process)."""
    chosen_cases = [c.strip() for c in cases.split(",") if c.strip()]
    chosen_sizes = [s.strip() for s in sizes.split(",") if s.strip()]
    for case in chosen_cases:
        if case not in CASES:
            _fail(f"--cases: unknown case '{case}'{did_you_mean(case, CASES)}; choose from {', '.join(CASES)}")
    for size in chosen_sizes:
        if size not in SIZES:
            _fail(f"--sizes: unknown size '{size}'{did_you_mean(size, SIZES)}; choose from {', '.join(SIZES)}")
    rows = []
    click.echo(f"machine: {machine_description()}")
    for size in chosen_sizes:
        for case in chosen_cases:
            for fast in (True, False) if step_mode else (True,):
                rows.append(run_in_child(case, SIZES[size], fast))
                click.echo(format_table(rows[-1:]).splitlines()[-1] if len(rows) > 1 else format_table(rows))
    append_results(results, rows)
    click.echo(f"appended {len(rows)} rows to {results}")


@main.command()
def scenarios() -> None:
    """List the built-in scenarios."""
    for path in sorted(builtin_data_dir("scenarios").glob("*.yaml")):
        loaded = load_scenario(path)
        click.echo(f"{path.stem:<28} {loaded.scenario.description}")
