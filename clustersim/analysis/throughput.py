"""Output tokens per second over simulated time, from ``steps.parquet``.

A step row emits ``num_steps * num_emitted_tokens`` tokens (a prefill emits
its sequence's first token). The tokens are spread evenly over the row's interval before binning,
so the curve is the rate at which the cluster produced tokens, and its integral is the run's total.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from numpy.typing import NDArray

from clustersim.analysis.rundata import RunData
from clustersim.analysis.style import colors, new_figure, seconds_label
from clustersim.analysis.timebins import bin_edges, binned_amount

FloatArray = NDArray[np.float64]
NUM_BINS = 150
MAX_REPLICA_LINES = 8
SUMMARY_MISMATCH_FRAC = 0.01


def tokens_per_s(run: RunData, edges_s: FloatArray, replica: int | None = None) -> FloatArray:
    """Output tokens emitted per second in each bin, by one replica or (``None``) the whole cluster.

    Args:
        run: The run.
        edges_s: Increasing bin edges (s).
        replica: Replica index, or ``None`` for all replicas.

    Returns:
        Rate per bin (tokens/s).
    """
    steps = run.steps
    tokens = run.emitted_tokens()
    if replica is not None:
        mask = (steps["replica"] == replica).to_numpy()
        steps, tokens = steps[mask], tokens[mask]
    emitted = binned_amount(steps["started_at_s"], steps["duration_s"], tokens, edges_s)
    return emitted / np.diff(edges_s)


def plot_throughput(run: RunData, num_bins: int = NUM_BINS) -> Figure:
    """Cluster output-token rate per time bin, with per-replica lines when there are a few replicas.

    A dashed line marks the run mean (tokens emitted / makespan). If ``summary.json`` reports a
    different mean (by more than 1 %), the figure says so: the two logs disagree (not checked with a
    measurement window, whose summary rate is the measured requests' over their arrivals).

    Args:
        run: The run to plot.
        num_bins: Number of equal time bins over the makespan.

    Returns:
        The figure (not yet saved).
    """
    figure = new_figure(12.0, 4.8)
    ax = figure.subplots()
    makespan_s = run.makespan_s
    edges_s = bin_edges(makespan_s, num_bins)
    width = seconds_label(float(edges_s[1] - edges_s[0]))
    figure.suptitle(f"{run.title}:\noutput token throughput ({width} bins)")
    ax.set_xlim(0, makespan_s if makespan_s > 0 else 1.0)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("output tokens per second (tok/s)")
    if run.steps.empty:
        ax.text(
            0.5,
            0.5,
            "no scheduler iteration completed during the run",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="0.4",
        )
        return figure
    _draw_rates(ax, run, edges_s)
    ax.set_ylim(bottom=0)
    figure.legend(*ax.get_legend_handles_labels(), loc="outside right upper", fontsize="small")
    return figure


def _draw_rates(ax: Axes, run: RunData, edges_s: FloatArray) -> None:
    replicas = run.replicas
    if 1 < len(replicas) <= MAX_REPLICA_LINES:
        for replica, color in zip(replicas, colors(len(replicas)), strict=True):
            rate = tokens_per_s(run, edges_s, replica)
            ax.stairs(rate, edges_s, color=color, lw=1.0, alpha=0.8, label=run.replica_label(replica))
    ax.stairs(tokens_per_s(run, edges_s), edges_s, color="0.15", lw=1.8, label="cluster total")
    makespan_s = run.makespan_s
    mean_tokens_per_s = float(run.emitted_tokens().sum()) / makespan_s if makespan_s > 0 else 0.0
    ax.axhline(mean_tokens_per_s, color="crimson", ls="--", lw=1.2, label=f"run mean {mean_tokens_per_s:,.1f} tok/s")
    reported = run.summary.get("output_tokens_per_s")
    if "window" in run.summary:  # the summary's rate is the measured requests', over their arrivals' span
        return
    if isinstance(reported, int | float) and not math.isclose(
        reported, mean_tokens_per_s, rel_tol=SUMMARY_MISMATCH_FRAC
    ):
        message = f"summary.json reports {reported:,.1f} tok/s: the requests and steps logs disagree"
        ax.text(0.01, 0.02, message, transform=ax.transAxes, color="crimson", fontsize="small")
