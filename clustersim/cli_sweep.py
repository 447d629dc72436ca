"""The ``sweep`` and ``compare`` commands: thin, as the rest of the command (parse, call, print)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from clustersim.cli_common import doc_option, resolve_data_file, resolve_scenario_path, write_doc
from clustersim.compare import WINDOW_LABEL, compare, format_markdown, select_columns
from clustersim.errors import ClusterSimError
from clustersim.guard import EXIT_INTERRUPTED, fail
from clustersim.outdir import new_default_folder
from clustersim.plans import PlanSpec, load_plan, run_plan_spec
from clustersim.plans.search import Evaluation
from clustersim.progress import CountProgress, progress_enabled
from clustersim.sweeps import Point, SweepResult, load_sweep, resolve_base, run_sweep
from clustersim.sweeps.printout import stats_markdown

EXIT_SOME_FAILED = 1


class PointPrinter:
    """Counts the points as they settle, and shows a progress bar on a terminal (unless quiet)."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.done, self.failed, self.reused = total, 0, 0, 0
        self.started = time.perf_counter()
        self.bar = CountProgress(total, "points", progress_enabled(quiet))

    def __enter__(self) -> PointPrinter:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def start(self, total: int) -> None:
        self.total = total
        self.bar.set_total(total)

    def __call__(self, point: Point, row: dict[str, Any]) -> None:
        self.done += 1
        failed, reused = row.get("status") != "ok", bool(row.get("reused"))
        self.failed += failed
        self.reused += reused
        self.bar.advance(failed=failed, reused=reused)


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
        failures: dict[str, list[str]] = {}
        for point, row in zip(result.points, result.rows, strict=True):
            if row.get("status") != "ok":
                failures.setdefault(str(row.get("error") or "not run"), []).append(point.label)
        for error, labels in failures.items():
            which = labels[0] if len(labels) == 1 else f"{len(labels)} points ({labels[0]}, ...)"
            click.echo(f"failed: {which}: {error}", err=True)
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
@doc_option()
def sweep(
    sweep_file: str,
    out_dir: Path | None,
    jobs: int | None,
    backend: str,
    address: str | None,
    quiet: bool,
    doc: str | None,
) -> None:
    """Run SWEEP_FILE (a YAML file, or a built-in sweep by name): every point, every seed.

    A rerun into the same --out computes only the points not finished there. Exit 1 when a point
    failed (the others still ran), 130 when interrupted (what finished is kept). --doc writes the
    table only when every point ran.
    """
    path = resolve_data_file(sweep_file, "sweeps")
    spec = load_sweep(path)  # bad input: the command's guard prints one line and exits 2
    base = resolve_base(spec.base, path.parent)
    target = out_dir if out_dir is not None else new_default_folder(f"sweep-{spec.name}")
    printer = PointPrinter(0, quiet)
    try:
        with printer:
            result = run_sweep(spec, base, target, source=str(path), jobs=jobs, backend=backend,  # type: ignore[arg-type]
                               address=address, on_start=printer.start, on_point=printer)  # fmt: skip
    except ClusterSimError as exc:
        fail(str(exc))
        return
    except KeyboardInterrupt:
        interrupted(target, printer)
        return
    table = stats_markdown(result.stats_table, result.axis_columns)
    if doc and not result.num_failed:
        write_doc(doc, table)
    finish(result, printer, table)


@click.command(name="compare")
@click.argument("scenario")
@click.option("--vary", multiple=True, required=True, metavar="PATH=V1,V2", help="Values to compare (repeatable).")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE", help="Override applied to every variant.")
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), help="Output folder [default: runs/sweep-compare-NAME-TIME]."
)
@click.option("--jobs", type=click.IntRange(min=1), help="Variants run at once [default: the machine's cores].")
@click.option("--columns", metavar="LABEL,...", help="Only these table columns (labels as printed), in this order.")
@click.option("--tenant", metavar="NAME", help="Request counts, latencies and token rates of this tenant only.")
@doc_option()
@click.option("--quiet", is_flag=True, help="Print only the table and where it went.")
def compare_command(
    scenario: str,
    vary: tuple[str, ...],
    overrides: tuple[str, ...],
    out_dir: Path | None,
    jobs: int | None,
    columns: str | None,
    tenant: str | None,
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
        with printer:
            rows, result = compare(path, vary, overrides, target, jobs, printer.start, printer, tenant)
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


@click.command(name="plan")
@click.argument("plan_file")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Output folder [default: runs/plan-NAME-TIME].")
@click.option("--jobs", type=click.IntRange(min=1), help="Runs at once [default: the machine's cores].")
@click.option("--backend", type=click.Choice(["local", "ray"]), default="local", show_default=True)
@click.option("--address", help="A Ray cluster to join (with --backend ray) [default: start Ray locally].")
@doc_option()
@click.option("--quiet", is_flag=True, help="Print only the table and where it went.")
def plan_command(
    plan_file: str,
    out_dir: Path | None,
    jobs: int | None,
    backend: str,
    address: str | None,
    doc: str | None,
    quiet: bool,
) -> None:
    """Answer PLAN_FILE (a YAML file, or a built-in plan by name): for each option, the fewest replicas
    meeting the SLOs in every seed, ranked by price. A rerun into the same --out reuses every run."""
    path = resolve_data_file(plan_file, "plans")
    spec = load_plan(path)  # bad input: the command's guard prints one line and exits 2
    base = resolve_base(spec.base, path.parent)
    target = out_dir if out_dir is not None else new_default_folder(f"plan-{spec.name}")
    started = time.perf_counter()
    say = _evaluation_printer(quiet)
    try:
        result = run_plan_spec(spec, base, target, source=str(path), jobs=jobs, backend=backend,  # type: ignore[arg-type]
                               address=address, on_evaluation=say)  # fmt: skip
    except ClusterSimError as exc:
        fail(str(exc))
        return
    except KeyboardInterrupt:
        click.echo(
            f"clustersim: interrupted; every finished run is kept in {target}/ (run again to reuse them)", err=True
        )
        sys.exit(EXIT_INTERRUPTED)
    table = (result.out_dir / "plan.md").read_text(encoding="utf-8").rstrip("\n")
    click.echo(f"{spec.name}: {result.target_rate_per_s:.4g} req/s, {slo_text(spec)}, {spec_seeds(spec)}")
    click.echo(table)
    if doc:
        write_doc(doc, table)
    evaluations = sum(len(a.evaluations) for a in result.answers)
    click.echo(
        f"{evaluations} evaluations in {time.perf_counter() - started:.1f} s; wrote {result.out_dir}/ "
        "(plan.parquet, plan.md, evaluations.parquet, evaluations/)"
    )


def slo_text(spec: PlanSpec) -> str:
    targets = ", ".join(f"{name} <= {value:g}" for name, value in spec.slo.targets().items())
    text = f"p{spec.slo.percentile:g} {targets}" if spec.slo.percentile is not None else targets
    if spec.min_attainment_frac is not None:
        text += f", {spec.min_attainment_frac:.4g} of requests meeting every target"
    return text


def spec_seeds(spec: PlanSpec) -> str:
    count = spec.seeds if isinstance(spec.seeds, int) else len(spec.seeds)
    return f"{count} seeds, met in every seed"


def _evaluation_printer(quiet: bool) -> Callable[[str, Evaluation], None]:
    show = progress_enabled(quiet)

    def say(option: str, evaluation: Evaluation) -> None:
        if show:
            verdict = "error" if evaluation.error else "met" if evaluation.met else "missed"
            click.echo(f"{option}: {evaluation.num_replicas} replicas x{evaluation.rate_factor:.3g} rate: {verdict}",
                       err=True)  # fmt: skip

    return say
