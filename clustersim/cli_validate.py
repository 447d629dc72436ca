"""The ``validate`` command: run the public validation corpus and print the error (thin: parse, call, print)."""

from __future__ import annotations

import fnmatch
import time
from pathlib import Path

import click

from clustersim.cli_common import write_doc
from clustersim.config.catalogue import builtin_data_dir
from clustersim.errors import ClusterSimError
from clustersim.guard import fail
from clustersim.outdir import new_default_folder
from clustersim.progress import CountProgress, progress_enabled
from clustersim.validation.corpus import CorpusRow, load_corpus
from clustersim.validation.corpusreport import corpus_summary, error_table, rows_table, skipped_table
from clustersim.validation.runcorpus import comparisons, run_corpus


def default_corpus_dir() -> Path:
    return builtin_data_dir("validation") / "corpus"


def _select(rows: tuple[CorpusRow, ...], patterns: tuple[str, ...]) -> tuple[CorpusRow, ...]:
    if not patterns:
        return rows
    chosen = tuple(r for r in rows if any(fnmatch.fnmatch(r.row_id, p) or r.publisher == p for p in patterns))
    if not chosen:
        raise ClusterSimError(f"--rows: no corpus row matches {', '.join(patterns)}")
    return chosen


@click.command("validate")
@click.argument("corpus", required=False, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Output folder [default: runs/validate-TIME].")
@click.option("--rows", "patterns", multiple=True, metavar="PATTERN", help="Only rows whose id matches (glob), or a publisher.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Worker processes [default: every core].")
@click.option("--profiles", "profiles_dir", type=click.Path(path_type=Path), help="A hardware_profiles folder to use.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--doc", metavar="FILE.md", help="Also write the tables into their blocks of that Markdown file.")
def validate_command(
    corpus: Path | None,
    out_dir: Path | None,
    patterns: tuple[str, ...],
    jobs: int | None,
    profiles_dir: Path | None,
    quiet: bool,
    doc: str | None,
) -> None:
    """Simulate every row of the public validation corpus as it was measured and print the error.

    CORPUS is a folder of corpus CSV files [default: the built-in corpus]. Runs go under --out and
    are reused when the same folder is given again (only rows whose scenario or profiles changed run).
    """
    started = time.perf_counter()
    try:
        rows = _select(load_corpus(corpus or default_corpus_dir()), patterns)
        folder = out_dir or new_default_folder("validate")
        with CountProgress(len(rows), "rows", progress_enabled(quiet)) as bar:
            outcomes = run_corpus(
                rows, folder, jobs=jobs, catalogue_root=profiles_dir, on_row=lambda _row, status: bar.advance(failed=status == "failed")
            )
    except ClusterSimError as exc:
        fail(str(exc))
        return
    found = comparisons(outcomes)
    summary = corpus_summary(outcomes)
    by_gpu, by_engine = error_table(found, by_gpu=True), error_table(found, by_gpu=False)
    skipped = skipped_table(outcomes)
    click.echo(summary)
    click.echo("\nmean absolute percentage error per engine and metric (scored metric of each row):")
    click.echo(by_engine)
    click.echo("\nper engine and GPU:")
    click.echo(by_gpu)
    click.echo("\nnot simulated:")
    click.echo(skipped)
    click.echo(f"\nwrote {folder}/ (rows, comparisons .parquet/.csv; scenarios/, runs/) in {time.perf_counter() - started:.1f} s")
    if doc:
        write_doc(f"{doc}#corpus", summary)
        write_doc(f"{doc}#corpus-engines", by_engine)
        write_doc(f"{doc}#corpus-gpus", by_gpu)
        write_doc(f"{doc}#corpus-skipped", skipped)
        write_doc(f"{doc}#corpus-rows", rows_table(found))
