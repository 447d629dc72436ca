"""The ``clustersim`` command. Thin: parse arguments, call the library, print, map errors to exit 2."""

from __future__ import annotations

import importlib.util
import platform
import sys
import time
from pathlib import Path

import click

from clustersim import __version__
from clustersim.architecture import GpuSpec, ModelShape
from clustersim.bench import (
    CASES,
    SIZES,
    append_results,
    bench_runs,
    format_markdown_table,
    format_table,
    machine_description,
    run_in_child,
)
from clustersim.calibration.command import calibrate
from clustersim.cli_common import doc_option, resolve_scenario_path, write_doc
from clustersim.cli_sweep import compare_command, plan_command, sweep
from clustersim.cli_validate import validate_command
from clustersim.clock import Clock
from clustersim.config.catalogue import Catalogue, builtin_data_dir
from clustersim.config.loader import load_scenario
from clustersim.config.releases import checked_release
from clustersim.config.scenario import Precision
from clustersim.cost.base import StepBatch
from clustersim.cost.describe import format_breakdown, format_catalogue
from clustersim.cost.pipeline import largest_micro_batch
from clustersim.cost.roofline import RooflineCostModel, small_kernels
from clustersim.errors import ClusterSimError, did_you_mean, one_line
from clustersim.eventlog import RunLog
from clustersim.guard import EXIT_BUG, GuardedGroup, fail
from clustersim.invariants import InvariantViolation
from clustersim.plans import load_plan
from clustersim.printout import format_summary
from clustersim.progress import RunProgress, Snapshot, progress_enabled
from clustersim.runner import Watch, run_scenario
from clustersim.runplan import with_memory_sized_graphs
from clustersim.sweeps import load_sweep

PLOT_MODULES = ("matplotlib", "seaborn", "pandas", "scipy")


def _need_plots(command: str) -> None:
    """Exit with one line if the optional plotting and fitting libraries are not installed."""
    missing = [name for name in PLOT_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        fail(
            f"{command} needs {', '.join(missing)} (the plots extra): "
            "python -m pip install 'clustersim[plots]' (or '.[plots]' from a source tree)"
        )


def run_watcher(quiet: bool, num_requests: int | None) -> Watch:
    """The progress display of one run (on a terminal only): simulated time, requests, events."""
    enabled = progress_enabled(quiet)

    def watch(clock: Clock, log: RunLog) -> RunProgress:
        return RunProgress(lambda: Snapshot(clock.now, log.requests.num_appended, clock.num_events), enabled,
                           num_requests)  # fmt: skip

    return watch


@click.group(cls=GuardedGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
        started = time.perf_counter()
        result = run_scenario(loaded, out_dir, watch=run_watcher(quiet, loaded.scenario.stop.max_requests))
    except ClusterSimError as exc:
        fail(str(exc))
        return
    except InvariantViolation as exc:
        click.echo(f"clustersim: internal error: {one_line(str(exc))} (outputs kept in {exc.out_dir})", err=True)
        sys.exit(EXIT_BUG)
    wall_s = time.perf_counter() - started
    if not quiet:
        click.echo(format_summary(result.summary))
        lifecycle = ", lifecycle" if "faults" in result.summary or "autoscaler" in result.summary else ""
        lifecycle += ", transfers" if "disaggregation" in result.summary else ""
        click.echo(
            f"wrote {result.out_dir}/ (requests, steps, memory{lifecycle} and itl .parquet, summary.json) "
            f"in {wall_s:.2f} s wall"
        )
    else:
        click.echo(str(result.out_dir))


@main.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Figure folder [default: FOLDER/figures].")
def report(folder: Path, out_dir: Path | None) -> None:
    """Figures and one self-contained report.html for FOLDER: a run, a sweep or a plan."""
    _need_plots("clustersim report")
    # imported here, not at the top: the plotting libraries are an optional extra that `run` never needs
    from clustersim.analysis.htmlreport import write_report
    from clustersim.analysis.rundata import RunDirError

    try:
        page, figures, skipped = write_report(folder, out_dir)
    except RunDirError as exc:
        fail(str(exc))
        return
    for path in figures:
        click.echo(str(path))
    for name, reason in skipped.items():
        click.echo(f"skipped {name}: {reason}")
    click.echo(f"wrote {page}")


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
@doc_option()
def bench(cases: str, sizes: str, step_mode: bool, results: Path, doc: str | None) -> None:
    """Measure simulator speed on the standard benchmark scenarios (each in its own process)."""
    chosen_cases = [c.strip() for c in cases.split(",") if c.strip()]
    chosen_sizes = [s.strip() for s in sizes.split(",") if s.strip()]
    for case in chosen_cases:
        if case not in CASES:
            fail(f"--cases: unknown case '{case}'{did_you_mean(case, CASES)}; choose from {', '.join(CASES)}")
    for size in chosen_sizes:
        if size not in SIZES:
            fail(f"--sizes: unknown size '{size}'{did_you_mean(size, SIZES)}; choose from {', '.join(SIZES)}")
    rows = []
    click.echo(f"machine: {machine_description()}")
    for case, num_requests, fast in bench_runs(chosen_cases, chosen_sizes, step_mode):
        rows.append(run_in_child(case, num_requests, fast))
        click.echo(format_table(rows[-1:]).splitlines()[-1] if len(rows) > 1 else format_table(rows))
    append_results(results, rows)
    click.echo(f"appended {len(rows)} rows to {results}")
    if doc:
        write_doc(doc, format_markdown_table(rows), f"{machine_description()}, Python {platform.python_version()}")


@main.command()
def scenarios() -> None:
    """List the built-in scenarios, sweeps (clustersim sweep NAME) and plans (clustersim plan NAME)."""
    for path in sorted(builtin_data_dir("scenarios").glob("*.yaml")):
        loaded = load_scenario(path)
        click.echo(f"{path.stem:<28} {loaded.scenario.description}")
    for kind, loader in (("sweeps", load_sweep), ("plans", load_plan)):
        files = sorted((builtin_data_dir("scenarios") / kind).glob("*.yaml"))
        if files:
            click.echo(f"\n{kind} (clustersim {kind[:-1]} NAME):")
        for path in files:
            click.echo(f"{path.stem:<28} {loader(path).description}")


@main.command("validate-cost")
@click.argument("data_dir", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Write the scored samples and figure here.")
@click.option("--fit", is_flag=True, help="Refit the measured GPUs on the training half and print YAML entries.")
@click.option(
    "--published",
    is_flag=True,
    help="Instead: run scenarios/published/ and compare with DATA_DIR/published/serving_results.csv.",
)
@click.option(
    "--kernels",
    "kernels_dir",
    type=click.Path(path_type=Path),
    help="Also a folder of kernel tables measured with scripts/measure_kernels.py (e.g. validation/kernels).",
)
@doc_option("report")
def validate_cost(
    data_dir: Path, out_dir: Path | None, fit: bool, published: bool, kernels_dir: Path | None, doc: str | None
) -> None:
    """Score the cost model on the held-out half of the measured kernel times in DATA_DIR.

    DATA_DIR is a ground-truth folder (with profiles/) or a folder of vidur_*.csv profiles. With
    --published, replay every published end-to-end serving result instead (runs kept under --out).
    """
    _need_plots("clustersim validate-cost")
    from clustersim.validation.cli import run_validate_cost
    from clustersim.validation.engine_errors import format_engine_errors
    from clustersim.validation.published import format_comparisons, run_published

    try:
        if published:
            comparisons = run_published(data_dir, out_dir)
            report = format_comparisons(comparisons)
            report += "\n\nmean absolute error per engine and metric:\n" + format_engine_errors(comparisons)
        else:
            report = run_validate_cost(data_dir, out_dir, fit, kernels_dir=kernels_dir)
    except ClusterSimError as exc:
        fail(str(exc))
        return
    click.echo(report)
    if doc:  # without the machine-specific "wrote PATH" lines
        table = "\n".join(line for line in report.splitlines() if not line.startswith("wrote "))
        write_doc(doc, f"```text\n{table}\n```")
    if published:
        return
    if out_dir is not None:
        # imported here, not at the top: plotting libraries take a second to load
        from clustersim.analysis.cost_validation import write_cost_validation_figure

        figure = write_cost_validation_figure(out_dir / "cost_validation.parquet", out_dir / "cost-validation.png")
        click.echo(f"wrote {figure}")


@main.command()
def profiles() -> None:
    """List the built-in hardware, models and engines with their key numbers."""
    click.echo(format_catalogue(Catalogue.builtin()))


main.add_command(calibrate)
main.add_command(sweep)
main.add_command(compare_command)
main.add_command(plan_command)
main.add_command(validate_command)


@main.command()
@click.option("--hardware", required=True, help="GPU name or alias (see `clustersim profiles`).")
@click.option("--model", "model_name", required=True, help="Model name or alias.")
@click.option("--engine", default="vllm", show_default=True, help="Engine profile.")
@click.option("--tp", "tensor_parallel", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--pp", "pipeline_parallel", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--batch", "num_decode_seqs", type=click.IntRange(min=0), default=1, show_default=True, help="Decoding sequences."
)
@click.option(
    "--context",
    "context_tokens",
    type=click.IntRange(min=0),
    default=1024,
    show_default=True,
    help="Context per decoding sequence.",
)
@click.option(
    "--prefill",
    "prefill_tokens",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Tokens of one prefill chunk.",
)
@click.option(
    "--prefill-context", type=click.IntRange(min=0), default=0, show_default=True, help="Prior context of that chunk."
)
@click.option("--weights", type=click.Choice(["bf16", "fp16", "fp8", "fp4"]), default=None, help="Weight precision.")
@click.option("--kv-cache", type=click.Choice(["bf16", "fp16", "fp8"]), default=None, help="KV-cache precision.")
@click.option(
    "--engine-version", default=None, help="The engine's release (kernels of later releases slower; default: current)."
)
def step(
    hardware: str,
    model_name: str,
    engine: str,
    tensor_parallel: int,
    pipeline_parallel: int,
    num_decode_seqs: int,
    context_tokens: int,
    prefill_tokens: int,
    prefill_context: int,
    weights: Precision | None,
    kv_cache: Precision | None,
    engine_version: str | None,
) -> None:
    """Price one step with the roofline model and print its breakdown per op group."""
    catalogue = Catalogue.builtin()
    try:
        engine_version = None if engine_version is None else checked_release(engine_version)
    except ValueError as exc:
        fail(f"--engine-version: {exc}")
        return
    try:
        hardware_profile = catalogue.hardware(hardware, "--hardware", "")
        engine_profile = catalogue.engine(engine, "--engine", "")
        gpu = GpuSpec.from_profiles(hardware_profile, engine_profile, engine_version)
        gpu = with_memory_sized_graphs(
            gpu, engine_profile, hardware_profile, engine_version, tensor_parallel, pipeline_parallel
        )
        shape = ModelShape.from_profile(catalogue.model(model_name, "--model", ""), weights, kv_cache)
    except ClusterSimError as exc:
        fail(str(exc))
        return
    if pipeline_parallel > shape.num_layers:
        fail(f"--pp: {pipeline_parallel} stages for {shape.name}'s {shape.num_layers} layers")
        return
    prefill = (prefill_tokens,) if prefill_tokens else ()
    batch = StepBatch(prefill, (prefill_context,) if prefill else (), num_decode_seqs, num_decode_seqs * context_tokens)
    micro = largest_micro_batch(batch, pipeline_parallel)  # a micro-batch per stage in flight
    cost = RooflineCostModel(shape, gpu, tensor_parallel, pipeline_parallel).price(micro)
    release = f" {engine_version}" if engine_version else ""
    click.echo(
        f"{shape.name} ({shape.weight_precision} weights) on {tensor_parallel * pipeline_parallel} x {gpu.name} "
        f"(TP {tensor_parallel}, PP {pipeline_parallel}), engine {engine}{release}: {num_decode_seqs} decoding x "
        f"{context_tokens} context, prefill {prefill_tokens} (+{prefill_context} prior)"
    )
    if micro is not batch:
        click.echo(
            f"{min(pipeline_parallel, batch.num_seqs)} micro-batches in flight: the step is the trip of the largest "
            f"through all {pipeline_parallel} stages ({micro.num_decode_seqs} decoding, prefill "
            f"{micro.num_prefill_tokens}); every sequence gains a token per trip"
        )
    click.echo(format_breakdown(cost))
    if kernels := small_kernels(shape, gpu.engine):
        click.echo(
            f"elementwise includes {kernels} small kernels of MoE and MLA layers "
            f"({kernels * gpu.elementwise_kernel_latency_s * 1e3:.3f} ms: routing, expert alignment, quantisation, "
            "norms; the engine profile's small_kernels_per_moe_layer / small_kernels_per_mla_layer)"
        )
    family = hardware_profile.family.value if hardware_profile.family is not None else None
    if engine_version and not any(r.gpu_family == family for r in engine_profile.kernel_releases):
        click.echo(
            f"note: engine {engine} records no kernel releases on {gpu.name}: release {engine_version}'s kernels "
            "are priced as its current one's",
            err=True,
        )
