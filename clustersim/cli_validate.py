"""The ``validate`` command: run the public validation corpus and print the error (thin: parse, call, print)."""

from __future__ import annotations

import fnmatch
import importlib.util
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import click
import pyarrow.parquet as pq

from clustersim.cli_common import write_doc
from clustersim.config.catalogue import Catalogue, builtin_data_dir
from clustersim.errors import ClusterSimError, ConfigError
from clustersim.guard import fail
from clustersim.outdir import claimed_folder, new_default_folder
from clustersim.progress import CountProgress, progress_enabled
from clustersim.validation.corpus import CorpusRow, corpus_sha256, load_corpus
from clustersim.validation.corpusreport import (
    corpus_summary,
    error_table,
    fit_table,
    moved_table,
    rows_table,
    skipped_table,
)
from clustersim.validation.crossval import CorpusFit, fit_corpus, folds_summary, write_efficiency
from clustersim.validation.feasibility import infeasible_ttft
from clustersim.validation.rowscenario import lookup_hardware
from clustersim.validation.runcorpus import RowOutcome, comparisons, run_corpus, write_tables


def default_corpus_dir() -> Path:
    return builtin_data_dir("validation") / "corpus"


def _select(rows: tuple[CorpusRow, ...], patterns: tuple[str, ...]) -> tuple[CorpusRow, ...]:
    if not patterns:
        return rows
    chosen = tuple(r for r in rows if any(fnmatch.fnmatch(r.row_id, p) or r.publisher == p for p in patterns))
    if not chosen:
        raise ClusterSimError(f"--rows: no corpus row matches {', '.join(patterns)}")
    return chosen


def _parity(folder: Path, title: str) -> None:
    """Draw the parity figure when the plotting extra is installed."""
    if importlib.util.find_spec("matplotlib") is None:
        click.echo("(no parity figure: python -m pip install 'clustersim[plots]')")
        return
    from clustersim.analysis.validationfig import write_parity_figure  # plotting libraries load slowly

    click.echo(f"wrote {write_parity_figure(folder / 'comparisons.parquet', folder / 'parity.png', title)}")


def _report(outcomes: Sequence[RowOutcome], heading: str) -> tuple[str, str, str]:
    found = comparisons(outcomes)
    by_gpu, by_engine = error_table(found, by_gpu=True), error_table(found, by_gpu=False)
    click.echo(f"\n{heading}, per engine and metric (the scored metric of each row):")
    click.echo(by_engine)
    click.echo("\nper engine and GPU:")
    click.echo(by_gpu)
    return by_engine, by_gpu, rows_table(found)


@click.command("validate")
@click.argument("corpus", required=False, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Output folder [default: runs/validate-TIME].")
@click.option(
    "--rows", "patterns", multiple=True, metavar="PATTERN", help="Only rows whose id matches (glob), or a publisher."
)
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Worker processes [default: every core].")
@click.option("--profiles", "profiles_dir", type=click.Path(path_type=Path), help="A hardware_profiles folder to use.")
@click.option("--fit", "do_fit", is_flag=True, help="Fit the engines' efficiency scales, cross-validated by publisher.")
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Solver evaluations of the all-rows fit, at most (it stops when converged; 1 scores its start, "
    "with --start-from an earlier fit re-scored).",
)
@click.option(
    "--fold-iterations",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="... of each leave-one-publisher-out fit, at most (each stops when converged).",
)
@click.option(
    "--start-from",
    "start_from",
    type=click.Path(path_type=Path),
    metavar="FOLDER",
    help="With --fit: start each fit where the same fit of an earlier --out FOLDER ended.",
)
@click.option("--write-profiles", is_flag=True, help="With --fit: write the fitted scales into the engine profiles.")
@click.option("--no-cv", is_flag=True, help="With --fit: skip the leave-one-publisher-out fits (in-sample only).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--hardware",
    metavar="GPU",
    help="Simulate every row on this GPU instead of the one it names (a what-if: a row whose GPU is in doubt, "
    "or a published setting on other hardware); not with --fit.",
)
@click.option(
    "--doc",
    metavar="FILE.md[#BLOCK]",
    help="Also write the tables into their blocks of that Markdown file (without --fit, FILE.md#BLOCK writes the "
    "summary and error tables into BLOCK and what was not simulated into BLOCK-skipped).",
)
def validate_command(
    corpus: Path | None,
    out_dir: Path | None,
    patterns: tuple[str, ...],
    jobs: int | None,
    profiles_dir: Path | None,
    do_fit: bool,
    iterations: int,
    fold_iterations: int,
    start_from: Path | None,
    write_profiles: bool,
    no_cv: bool,
    quiet: bool,
    hardware: str | None,
    doc: str | None,
) -> None:
    """Simulate every row of the public validation corpus as it was measured and print the error.

    CORPUS is a folder of corpus CSV files [default: the built-in corpus]. Runs go under --out and
    are reused when the same folder is given again (only rows whose scenario or profiles changed run).
    With --fit, the engines' efficiency scales are fitted to the corpus instead, and every row is
    predicted by a fit that never saw its publisher (leave-one-publisher-out): those errors are the
    ones to quote. Each fit stops when converged or at its cap of evaluations; its outcome is kept
    under --out/fits/, so the same --out again resumes an interrupted fit, and --start-from FOLDER
    continues the fits of an earlier run (each fold from the earlier fold without the same publisher).
    """
    started = time.perf_counter()
    if (write_profiles or no_cv or start_from) and not do_fit:
        fail("--write-profiles, --no-cv and --start-from need --fit")
    if start_from is not None and not (start_from / "fits").is_dir():
        fail(f"--start-from: {start_from} holds no fits/ folder (give the --out of an earlier `validate --fit`)")
    if hardware is not None and do_fit:
        fail("--hardware is a what-if of the shipped profiles: it cannot be fitted to (drop --fit)")
    if no_cv and doc:
        fail("--doc with --fit writes cross-validated errors: drop --no-cv")
    if do_fit and doc and "#" in doc:
        fail(f"--doc: with --fit, give the file alone (its blocks are the fit's own), not {doc}")
    try:
        corpus_dir = corpus or default_corpus_dir()
        rows = _select(load_corpus(corpus_dir), patterns)
        folder = out_dir or new_default_folder("validate")
        if profiles_dir is not None and not all(
            (profiles_dir / kind).is_dir() for kind in ("gpus", "models", "engines")
        ):
            raise ClusterSimError(
                f"--profiles: {profiles_dir} is not a hardware_profiles folder (gpus/, models/, engines/)"
            )
        catalogue = Catalogue(profiles_dir) if profiles_dir is not None else Catalogue.builtin()
        _check_doubts(rows, catalogue)
        if hardware is not None:
            hardware = catalogue.hardware(hardware, source="--hardware", field_path="GPU").name
            rows = tuple(replace(r, gpu=hardware) for r in rows)
        for row in rows:  # latencies no GPU could produce: fitted to, they would mislead the fit
            if (why := infeasible_ttft(row, catalogue)) is not None:
                hint = "feature prefix_cache_hits, or earlier_runs naming the runs that left them cached"
                click.echo(f"warning: {row.file}:{row.line}: {row.row_id}: {why} ({hint})", err=True)
        if do_fit:
            fit_options = FitOptions(jobs, iterations, fold_iterations, not no_cv, write_profiles, quiet,
                                     start_from / "fits" if start_from else None)  # fmt: skip
            _fit(rows, catalogue, folder, corpus_dir, fit_options, doc)
        else:
            _validate(rows, catalogue, folder, jobs, quiet, doc, hardware)
    except ClusterSimError as exc:
        fail(str(exc))
        return
    click.echo(f"in {time.perf_counter() - started:.1f} s")


def _check_doubts(rows: Sequence[CorpusRow], catalogue: Catalogue) -> None:
    """Every ``gpu_doubt`` names a GPU the catalogue has."""
    for row in rows:
        if row.gpu_doubt is not None and lookup_hardware(row.gpu_doubt, catalogue) is None:
            raise ConfigError(row.where, "features", f"gpu_doubt={row.gpu_doubt}: no hardware profile of that name "
                              "(clustersim profiles lists them)")  # fmt: skip


def _validate(rows: tuple[CorpusRow, ...], catalogue: Catalogue, folder: Path, jobs: int | None, quiet: bool,
              doc: str | None, hardware: str | None = None) -> None:  # fmt: skip
    with CountProgress(len(rows), "rows", progress_enabled(quiet)) as bar:
        outcomes = run_corpus(rows, folder, jobs=jobs, catalogue_root=catalogue.root,
                              on_row=lambda _row, status: bar.advance(failed=status == "failed"))  # fmt: skip
    summary = corpus_summary(outcomes)
    if hardware is not None:
        summary += f"\n\nEvery row simulated on {hardware} (--hardware), not on the GPU its source names."
    click.echo(summary)
    heading = "mean absolute percentage error with the profiles as they are"
    by_engine, by_gpu, _rows = _report(outcomes, f"{heading} (in-sample for the rows their fit saw)")
    skipped = skipped_table(outcomes)
    click.echo("\nnot simulated:\n" + skipped)
    click.echo(f"\nwrote {folder}/ (rows, comparisons .parquet/.csv; scenarios/, runs/)")
    _parity(folder, "clustersim with its shipped profiles against the public corpus")
    if doc and "#" in doc:  # a block of one's own: the summary and both error tables
        tables = f"{summary}\n\n{heading}, per engine:\n\n{by_engine}\n\nper engine and GPU:\n\n{by_gpu}"
        write_doc(doc, tables)
        write_doc(f"{doc}-skipped", skipped)
    elif doc:
        write_doc(f"{doc}#corpus", summary)
        write_doc(f"{doc}#corpus-skipped", skipped)


@dataclass(frozen=True)
class FitOptions:
    jobs: int | None
    iterations: int
    fold_iterations: int
    cross_validate: bool
    write_profiles: bool
    quiet: bool
    start_from: Path | None = None  # an earlier run's fits/ folder


def _fit(rows: tuple[CorpusRow, ...], catalogue: Catalogue, folder: Path, corpus_dir: Path, options: FitOptions,
         doc: str | None) -> None:  # fmt: skip
    say = (lambda message: None) if options.quiet else (lambda message: click.echo(message, err=True))
    earlier = _earlier_errors(options.start_from)  # read first: --start-from may be --out itself
    with claimed_folder(folder):  # held while fitting: its fits/ resume an interrupted fit
        result = fit_corpus(rows, catalogue, options.jobs, options.iterations, say, options.fold_iterations,
                            options.cross_validate, folder / "fits", options.start_from)  # fmt: skip
        for name, outcomes in (("cross-validated", result.cross_validated), ("in-sample", result.in_sample)):
            (folder / name).mkdir(exist_ok=True)
            write_tables([*outcomes, *result.skipped], folder / name)
    summary = corpus_summary([*result.in_sample, *result.doubted, *result.skipped])
    if result.doubted:
        summary += (f" {len(result.doubted)} of the simulated rows name a GPU their figures contradict (gpu_doubt):"
                    " scored as published, fitted by no fit.")  # fmt: skip
    click.echo(summary)
    params = fit_table(result.params, result.values, result.num_rows)
    click.echo("\nfitted scales (all rows):\n" + params)
    cv = ("", "", "")
    if options.cross_validate:
        heading = "leave-one-publisher-out error (each publisher predicted by a fit without it)"
        cv = _report(result.cross_validated, heading)
        ended = folds_summary(result)
        click.echo(ended)
        moved = _moved(earlier, options.start_from, result)
        cv = (f"{cv[0]}\n\n{ended}{moved}", cv[1], cv[2])
    _report(result.in_sample, "in-sample error of the all-rows fit (for contrast only)")
    click.echo(f"\nwrote {folder}/ (cross-validated/ and in-sample/: rows, comparisons .parquet/.csv)")
    if options.cross_validate:
        _parity(folder / "cross-validated", "clustersim against the public corpus, each publisher left out of the fit")
    if options.write_profiles:
        source = _fit_source(result, corpus_dir)
        for path in write_efficiency(result, catalogue.root, source):
            click.echo(f"wrote the fitted scales into {path}")
    if doc:
        write_doc(f"{doc}#corpus", summary)
        write_doc(f"{doc}#corpus-fit", params)
        write_doc(f"{doc}#corpus-cv-engines", cv[0])
        write_doc(f"{doc}#corpus-cv-gpus", cv[1])
        write_doc(f"{doc}#corpus-cv-rows", cv[2])
        write_doc(f"{doc}#corpus-skipped", skipped_table(result.skipped))


def _earlier_errors(start_from: Path | None) -> list[tuple[str, str, float]] | None:
    """The scored cross-validated errors (engine, kind, error %) of the run ``start_from`` belongs to."""
    if start_from is None or not (earlier := start_from.parent / "cross-validated" / "comparisons.parquet").exists():
        return None
    table = pq.read_table(earlier, columns=["engine", "kind", "scored", "error_pct"]).to_pylist()
    return [(r["engine"], r["kind"], r["error_pct"]) for r in table if r["scored"]]


def _moved(earlier: list[tuple[str, str, float]] | None, start_from: Path | None, result: CorpusFit) -> str:
    """The cross-validated error against the run this fit continued (printed; empty without one)."""
    if earlier is None or start_from is None:
        return ""
    text = (f"\n\nAgainst the run it continued ({start_from.parent.name}), per engine and metric:\n\n"
            + moved_table(earlier, comparisons(result.cross_validated)))  # fmt: skip
    click.echo(text)
    return text


def _fit_source(result: CorpusFit, corpus_dir: Path) -> str:
    publishers = {o.row.publisher for o in result.in_sample}
    return (
        f"fitted by `clustersim validate --fit` to the public validation corpus (validation/corpus, sha256 "
        f"{corpus_sha256(corpus_dir)[:12]}; {len(result.in_sample)} rows from {len(publishers)} publishers; "
        "leave-one-publisher-out errors in docs/validation.md)"
    )
