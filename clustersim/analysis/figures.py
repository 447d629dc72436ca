"""Write the standard set of PNG figures for one run directory.

=====================  ===================================================================
``latency_cdf.png``    CDFs of TTFT, TPOT and end-to-end latency (ms), per tenant
``timeline.png``       per replica over time: batch size, queue length, KV used fraction
``requests_gantt.png`` one bar per request (queue vs service); only for <= 60 requests
``throughput.png``     output tokens per second over time, cluster and per replica
``kv_memory.png``      the KV ledger over time: stored, cached, fragmented, reserved shares
``lifecycle.png``      replica states, throughput and TTFT around failures and scaling
``transfers.png``      a disaggregated run's trip from prompt to first token, and the KV held for it
=====================  ===================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from matplotlib.figure import Figure

from clustersim.analysis.gantt import MAX_GANTT_REQUESTS, plot_requests_gantt
from clustersim.analysis.latency import plot_latency_cdf
from clustersim.analysis.lifecyclefig import plot_lifecycle
from clustersim.analysis.memory import plot_kv_memory
from clustersim.analysis.rundata import RunData, load_run
from clustersim.analysis.style import save, theme
from clustersim.analysis.throughput import plot_throughput
from clustersim.analysis.timeline import plot_timeline
from clustersim.analysis.transfersfig import plot_transfers

PlotFunction = Callable[[RunData], Figure]


def figures_for(run: RunData) -> dict[str, PlotFunction]:
    """The figures that make sense for ``run``, by file name (the Gantt chart only for small runs)."""
    plots: dict[str, PlotFunction] = {
        "latency_cdf.png": plot_latency_cdf,
        "timeline.png": plot_timeline,
        "throughput.png": plot_throughput,
    }
    if run.memory is not None:
        plots["kv_memory.png"] = plot_kv_memory
    if run.lifecycle is not None:
        plots["lifecycle.png"] = plot_lifecycle
    if run.transfers is not None:
        plots["transfers.png"] = plot_transfers
    if len(run.requests) <= MAX_GANTT_REQUESTS:
        plots["requests_gantt.png"] = plot_requests_gantt
    return plots


def write_figures(run_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Read a run directory and write its figures as PNGs.

    Args:
        run_dir: A directory written by ``clustersim run`` (``requests.parquet``, ``steps.parquet``,
            ``summary.json``).
        out_dir: Where to write the PNGs; created if needed. Defaults to ``run_dir / "figures"``.

    Returns:
        The paths written, in a fixed order.

    Raises:
        RunDirError: ``run_dir`` is missing, incomplete or unreadable.
    """
    run = load_run(run_dir)
    target = out_dir if out_dir is not None else run_dir / "figures"
    written: list[Path] = []
    with theme():
        for file_name, plot in figures_for(run).items():
            written.append(save(plot(run), target / file_name))
    return written
