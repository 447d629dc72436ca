"""The ``sweep`` and ``compare`` commands: thin, as the rest of the command (parse, call, print)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from clustersim.cli_common import resolve_data_file, resolve_scenario_path, write_doc
from clustersim.compare import WINDOW_LABEL, compare, format_markdown, select_columns
from clustersim.errors import ClusterSimError
from clustersim.guard import EXIT_INTERRUPTED, fail
from clustersim.outdir import new_default_folder
from clustersim.sweep import Point, SweepResult, load_sweep, resolve_base, run_sweep
from clustersim.sweep.printout import stats_markdown

EXIT_SOME_FAILED = 1


class PointPrinter:
    """Says each point as it settles (one line, to stderr) when stderr is a terminal and not quiet."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.done, self.failed, self.reused = total, 0, 0, 0
        self.quiet = quiet or not sys.stderr.isatty()
        self.started = time.perf_counter()

    def start(self, total: int) -> None:
        self.total = total

    def __call__(self, point: Point, row: dict[str, Any]) -> None:
        self.done += 1
        self.failed += row.get("status") != "ok"
        self.reused += bool(row.get("reused"))
        if self.quiet:
            return
        status = "reused" if row.get("reused") else row.get("status", "?")
        detail = f": {row.get('error')}" if row.get("status") != "ok" else f" in {row.get('wall_s', 0.0):.1f} s"
        click.echo(f"[{self.done}/{self.total}] {point.label}: {status}{detail}", err=True)


def finish(result: SweepResult, printer: PointPrinter, table: str) -> None:
    """Print the table and where everything went; exit 1 when a point failed."""
    click.echo(table)
    wall_s = time.perf_counter() - printer.started
    click.echo(
        f"{len(result.points)} points ({printer.reused} reused, {result.num_failed} failed) in {wall_s:.1f} s; "
        f"wrote {result.out_dir}/ (points.parquet, stats.parquet; runs/, and requests/ steps/ memory/ itl/ "
        "as Hive-partitioned datasets)"
    )
    if result.num_failed:
        for point, row in zip(result.points, result.rows, strict=True):
            if row.get("status") != "ok":
                click.echo(f"failed: {point.label}: {row.get('error')}", err=True)
        sys.exit(EXIT_SOME_FAILED)


def interrupted(out_dir: Path, printer: PointPrinter) -> None:
    click.echo(
        f"clustersim: interrupted; the {printer.done} points settled are kept in {out_dir}/ "
        "(run the same command again to compute only the rest)",
        err=True,
    )
    sys.exit(EXIT_INTERRUPTED)


@click.command()
@click.argument("sweep_file")
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), help="Output folder [default: runs/sweep-NAME-TIME]."
)
@click.option("--jobs", type=click.IntRange(min=1), help="Points run at once [default: the machine's cores].")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True)
@click.option("--address", help="A Ray cluster to join (with --backend ray) [default: start Ray locally].")
@click.option("--quiet", is_flag=True, help="Print only the table and where it went.")
def sweep(
    sweep_file: str, out_dir: Path | None, jobs: int | None, backend: str, address: str | None, quiet: bool
) -> None:
    """Run SWEEP_FILE (a YAML file, or a built-in sweep by name): every point, every seed.

    A rerun into the same --out computes only the points not finished there. Exit 1 when a point
    failed (the others still ran), 130 when interrupted (what finished is kept).
    """
    path = resolve_data_file(sweep_file, "sweeps")
    try:
        spec = load_sweep(path)
        base = resolve_base(spec.base, path.parent)
        target = out_dir if out_dir is not None else new_default_folder(f"sweep-{spec.name}")
    except ClusterSimError as exc:
        fail(str(exc))
        return
    printer = PointPrinter(0, quiet)
    try:
        result = run_sweep(spec, base, target, source=str(path), jobs=jobs, backend=backend,  # type: ignore[arg-type]
                           address=address, on_start=printer.start, on_point=printer)  # fmt: skip
    except ClusterSimError as exc:
        fail(str(exc))
        return
    except KeyboardInterrupt:
        interrupted(target, printer)
        return
    finish(result, printer, stats_markdown(result.stats_table, result.axis_columns))


@click.command(name="compare")
@click.argument("scenario")
@click.option("--vary", multiple=True, required=True, metavar="PATH=V1,V2", help="Values to compare (repeatable).")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE", help="Override applied to every variant.")
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), help="Output folder [default: runs/sweep-compare-NAME-TIME]."
)
@click.option("--jobs", type=click.IntRange(min=1), help="Variants run at once [default: the machine's cores].")
@click.option("--columns", metavar="LABEL,...", help="Only these table columns (labels as printed), in this order.")
@click.option("--doc", metavar="FILE.md#NAME", help="Also write the table into that block of a Markdown file.")
@click.option("--quiet", is_flag=True, help="Print only the table and where it went.")
def compare_command(
    scenario: str,
    vary: tuple[str, ...],
    overrides: tuple[str, ...],
    out_dir: Path | None,
    jobs: int | None,
    columns: str | None,
    doc: str | None,
    quiet: bool,
) -> None:
    """Run SCENARIO once per variant (a sweep with one seed) and print a comparison table.

    A rerun into the same --out computes only the variants not finished there; exit 1 when a
    variant failed (the others still ran).
    """
    path = resolve_scenario_path(scenario)
    printer = PointPrinter(0, quiet)
    try:
        chosen = select_columns(columns)
        target = out_dir if out_dir is not None else new_default_folder(f"sweep-compare-{path.stem}")
        rows, result = compare(path, vary, overrides, target, jobs, printer.start, printer)
    except ClusterSimError as exc:
        fail(str(exc))
        return
    except KeyboardInterrupt:
        interrupted(target, printer)
        return
    if columns is None and any(WINDOW_LABEL in row for row in rows):
        chosen.insert(1, WINDOW_LABEL)  # the counts and figures that follow are the measured requests'
    table = format_markdown(rows, chosen)
    if doc and not result.num_failed:
        write_doc(doc, table)
    finish(result, printer, table)
