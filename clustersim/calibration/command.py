"""The ``clustersim calibrate`` command: options in, profile files and a printed error table out."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from clustersim.calibration.datafiles import FileOptions, read_data
from clustersim.calibration.measurements import PRECISIONS
from clustersim.calibration.parameters import DEFAULT_ENGINE_FIELDS, GPU_FIELDS
from clustersim.config.catalogue import Catalogue
from clustersim.doctables import parse_target, shown_command, write_doc_table
from clustersim.errors import ConfigError
from clustersim.guard import fail

if TYPE_CHECKING:  # scipy, which fit needs, is imported only when the command runs
    from clustersim.calibration.fit import Calibration

CSV_HELP = """Fit an engine profile's host-time fields to your own measurements and write it as a profile.

DATA.csv has one measured setting per row, with exactly the columns hardware, model,
tensor_parallel, weight_precision (may be blank), load_kind (batch, concurrency or rate_per_s),
load, prompt_tokens, output_tokens, ttft_s, itl_s, output_tokens_per_s (the last three in
seconds and tokens/s, whole deployment; blank where not measured, at least one per row). Lines
starting with # are comments. Each row is simulated as that benchmark; the fit minimises the
squared log error over every measured value (scipy least squares, from BASE's values), then
prints measured vs predicted per row, the leave-one-out error and, with --train-rows or
--train-frac, the error on the rows held out, with Pearson's r per metric. Example:

  clustersim calibrate my-bench.csv --engine vllm --out my-vllm.yaml

DATA may also be a benchmark tool's JSON, told by its content: the --save-result file of vllm bench
serve (or benchmark_serving.py), a GuideLLM report (one row per benchmark) or a GenAI-Perf / AIPerf
profile export. Give --hardware for them (and --tensor-parallel, --weight-precision; --model when
the file's model id is not in the catalogue). Per-request lists in the file (vLLM --save-detailed,
GuideLLM's requests) are replayed: the same lengths, and the same send times of a rate benchmark.
Their p99 TTFT and ITL are predicted and scored, not fitted.
Give several DATA files or a folder of them, in any mix of formats:

\b
  clustersim calibrate vllm.json guidellm.json --hardware H100-SXM \\
      --engine vllm --out my-vllm.yaml --out-figure parity.png
"""


def _fields(text: str, fit_gpu: bool) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    return names + [name for name in GPU_FIELDS if name not in names] if fit_gpu else names


def _rows(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError("--train-rows", "", f"expected row numbers such as 0,3,7, got '{text}'") from None


@click.command("calibrate", help=CSV_HELP)
@click.argument("data", metavar="DATA...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--engine", "engine_name", required=True, metavar="BASE", help="Engine profile to start from (name or .yaml)."
)
@click.option(
    "--out", required=True, type=click.Path(path_type=Path), metavar="FILE.yaml", help="Engine profile to write."
)
@click.option(
    "--fit",
    "fit_fields",
    default=",".join(DEFAULT_ENGINE_FIELDS),
    show_default=True,
    metavar="FIELD,...",
    help="Real-valued profile fields to fit: engine fields, or GPU fields (one value per GPU of the rows).",
)
@click.option(
    "--fit-gpu",
    is_flag=True,
    help="Also fit each GPU's compute_efficiency_frac and memory_efficiency_frac (written beside --out).",
)
@click.option(
    "--train-rows", metavar="I,J,...", help="Fit on these rows only (0-based, in file order); score the rest."
)
@click.option(
    "--train-frac", type=float, metavar="FRAC", help="Fit on a seeded random fraction of the rows; score the rest."
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of --train-frac's draw.")
@click.option(
    "--set", "overrides", multiple=True, metavar="PATH=VALUE", help="Scenario override for every row (repeatable)."
)
@click.option(
    "--requests",
    "num_requests",
    type=click.IntRange(min=1, max=100_000),
    default=200,
    show_default=True,
    help="Requests simulated per concurrency or rate_per_s CSV row (concurrency: at least 4 per user); "
    "a JSON file's rows simulate as many as the benchmark completed.",
)
@click.option("--hardware", metavar="GPU", help="The GPU of every JSON file's rows (name or .yaml; required for them).")
@click.option(
    "--model", "model_name", metavar="MODEL", help="The model of every JSON file's rows [default: the file's id]."
)
@click.option(
    "--tensor-parallel", type=click.IntRange(min=1), metavar="N", help="GPUs per replica of JSON rows [default: 1]."
)
@click.option("--weight-precision", metavar="P", help=f"Weight precision of JSON rows: {', '.join(PRECISIONS)}.")
@click.option(
    "--out-figure", type=click.Path(path_type=Path), metavar="FILE.png", help="Also draw measured vs predicted."
)
@click.option("--doc", metavar="FILE.md#NAME", help="Also write the printout into that block of a Markdown file.")
def calibrate(
    data: tuple[Path, ...],
    engine_name: str,
    out: Path,
    fit_fields: str,
    fit_gpu: bool,
    train_rows: str | None,
    train_frac: float | None,
    seed: int,
    overrides: tuple[str, ...],
    num_requests: int,
    hardware: str | None,
    model_name: str | None,
    tensor_parallel: int | None,
    weight_precision: str | None,
    out_figure: Path | None,
    doc: str | None,
) -> None:
    if importlib.util.find_spec("scipy") is None:
        fail("clustersim calibrate needs scipy (the plots extra): python -m pip install 'clustersim[plots]'")
    # imported here, not at the top: scipy is an optional extra that the other commands never need
    from clustersim.calibration.fit import calibrate as run_calibration
    from clustersim.calibration.fit import choose_training_rows, prepare
    from clustersim.calibration.profilefile import citation, write_profiles
    from clustersim.calibration.report import format_report

    if out.suffix not in (".yaml", ".yml"):
        fail(f"--out: {out} must end in .yaml or .yml (a scenario names profile files by that suffix)")
    _check_figure(out_figure)
    if doc:
        parse_target(doc)  # before the fit, not after it
    engine = Catalogue.builtin().engine(engine_name, "--engine", "")
    measurements = read_data(data, FileOptions(hardware, model_name, tensor_parallel, weight_precision))
    train = choose_training_rows(len(measurements.rows), _rows(train_rows), train_frac, seed)
    setup = prepare(measurements, engine, _fields(fit_fields, fit_gpu), train, overrides, num_requests)
    with tempfile.TemporaryDirectory(prefix="clustersim-calibrate-") as scratch:
        result = run_calibration(setup, train, Path(scratch) / "run")
    title = f"calibrated engine '{engine.name}' on {citation(measurements)}: {len(measurements.rows)} rows"
    report = format_report(result, title)
    click.echo(report)
    for path in write_profiles(result, measurements, out):
        click.echo(f"wrote {path}")
    if out_figure is not None:
        figure_title = f"'{engine.name}' fitted to {measurements.name}"
        click.echo(f"wrote {_draw_parity(result, out_figure, figure_title)}")
    if doc:
        path = write_doc_table(doc, f"```text\n{report}\n```", shown_command(sys.argv[1:]))
        click.echo(f"wrote the table into {path}")


def _check_figure(out_figure: Path | None) -> None:
    if out_figure is None:
        return
    if out_figure.suffix.lower() != ".png":
        fail(f"--out-figure: {out_figure} must end in .png")
    if importlib.util.find_spec("matplotlib") is None:
        fail("--out-figure needs matplotlib (the plots extra): python -m pip install 'clustersim[plots]'")


def _draw_parity(result: Calibration, out_figure: Path, title: str) -> Path:
    """The parity figure of the fitted predictions (metrics in the report's units)."""
    # imported here, not at the top: plotting libraries take a second to load and are an optional extra
    from clustersim.analysis.calibration_parity import ParitySeries, write_calibration_parity
    from clustersim.calibration.report import LABELS, fitted_pairs

    series = []
    for metric, pairs in fitted_pairs(result).items():
        label, scale, _ = LABELS[metric]
        series.append(
            ParitySeries(
                label,
                tuple(p[0] * scale for p in pairs),
                tuple(p[1] * scale for p in pairs),
                tuple(p[2] for p in pairs),
            )
        )
    return write_calibration_parity(series, out_figure, title)
