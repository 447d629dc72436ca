"""Per-replica state over simulated time: running batch size, waiting queue, KV-cache occupancy."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter
from matplotlib.typing import ColorType
from numpy.typing import NDArray

from clustersim.analysis.rundata import RunData
from clustersim.analysis.style import colors, new_figure, seconds_label
from clustersim.analysis.timebins import bin_edges, binned_amount, step_path, time_weighted_mean

FloatArray = NDArray[np.float64]
MAX_RAW_ROWS = 20_000
NUM_BINS = 400
MAX_REPLICA_LINES = 8  # more replicas: their mean and range, not one line each


class Signal(NamedTuple):
    """One panel: its y label and the value drawn while the replica is idle (NaN: no line)."""

    key: str
    ylabel: str
    idle_value: float


BATCH = Signal("num_seqs", "running batch\n(sequences)", 0.0)
QUEUE = Signal("num_waiting", "waiting queue\n(requests)", 0.0)
KV_FRAC = Signal("kv_used_frac", "KV cache used\n(% of blocks)", np.nan)
KV_BLOCKS = Signal("kv_used_blocks", "KV cache used\n(blocks)", np.nan)
KV_BLOCKS_BELOW_FRAC = 0.01  # below this peak occupancy, absolute block counts read better than percentages


def replica_signals(steps: pd.DataFrame) -> dict[str, FloatArray]:
    """Signals of some step rows: batch size, queue length, KV used fraction in [0, 1] and KV used blocks."""
    total = steps["kv_total_blocks"].to_numpy(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        kv_used_frac = np.where(total > 0, steps["kv_used_blocks"].to_numpy(np.float64) / total, np.nan)
    return {
        "num_seqs": steps["num_seqs"].to_numpy(np.float64),
        "num_waiting": steps["num_waiting"].to_numpy(np.float64),
        "kv_used_frac": kv_used_frac,
        "kv_used_blocks": steps["kv_used_blocks"].to_numpy(np.float64),
    }


def binned_signal(
    started_at_s: FloatArray, duration_s: FloatArray, values: FloatArray, edges_s: FloatArray, idle_value: float
) -> FloatArray:
    """Time-weighted mean of a signal per bin; idle time counts as ``idle_value``, or is left out if NaN."""
    if np.isnan(idle_value):
        return time_weighted_mean(started_at_s, duration_s, values, edges_s)[0]
    busy_integral = binned_amount(started_at_s, duration_s, values * duration_s, edges_s)
    busy_s = binned_amount(started_at_s, duration_s, duration_s, edges_s)
    width_s = np.diff(edges_s)
    return (busy_integral + idle_value * (width_s - busy_s)) / width_s


def panel_signals(steps: pd.DataFrame) -> tuple[Signal, Signal, Signal]:
    """Batch, queue, and KV occupancy: as a percentage, or in blocks when the peak is under 1 %."""
    peak_frac = np.nanmax(replica_signals(steps)["kv_used_frac"], initial=0.0)
    return BATCH, QUEUE, KV_BLOCKS if peak_frac < KV_BLOCKS_BELOW_FRAC else KV_FRAC


def _draw_replica(
    axes: list[Axes],
    signals_drawn: tuple[Signal, ...],
    rows: pd.DataFrame,
    edges_s: FloatArray | None,
    color: ColorType,
    label: str,
    queue_edges_s: FloatArray | None = None,
) -> None:
    start_s = rows["started_at_s"].to_numpy(np.float64)
    duration_s = rows["duration_s"].to_numpy(np.float64)
    signals = replica_signals(rows)
    for ax, signal in zip(axes, signals_drawn, strict=True):
        values = signals[signal.key]
        if edges_s is None and signal is QUEUE and queue_edges_s is not None:  # 0/1 flips would fill the panel
            x = (queue_edges_s[:-1] + queue_edges_s[1:]) / 2
            y = binned_signal(start_s, duration_s, values, queue_edges_s, signal.idle_value)
        elif edges_s is None:
            x, y = step_path(start_s, start_s + duration_s, values, signal.idle_value)
        else:
            x = (edges_s[:-1] + edges_s[1:]) / 2
            y = binned_signal(start_s, duration_s, values, edges_s, signal.idle_value)
        ax.plot(x, y, color=color, lw=1.3 if edges_s is None else 1.0, label=label)


def plot_timeline(run: RunData, max_raw_rows: int = MAX_RAW_ROWS, num_bins: int = NUM_BINS) -> Figure:
    """Three stacked panels sharing the time axis, one line per replica (more than eight: their
    mean and the band from the least to the greatest, per time bin).

    Short runs are drawn step by step, the queue binned once there are more steps than bins (its
    0/1 flips would fill the panel). Runs with more than ``max_raw_rows`` step rows are binned
    into ``num_bins`` bins, each showing the time-weighted mean (batch and queue count idle time as
    0; KV occupancy averages over busy time only). KV occupancy is a percentage of the replica's
    blocks, or a block count when it never reaches 1 %. Values are those logged at the end of each
    iteration, drawn over the iteration's interval.

    Args:
        run: The run to plot.
        max_raw_rows: Above this many step rows, bin instead of drawing every step.
        num_bins: Number of time bins when binning.

    Returns:
        The figure (not yet saved).
    """
    figure = new_figure(12.0, 8.0)
    steps = run.steps
    signals_drawn = panel_signals(steps)
    axes = list(figure.subplots(len(signals_drawn), 1, sharex=True))
    makespan_s = run.makespan_s
    edges_s = bin_edges(makespan_s, num_bins) if len(steps) > max_raw_rows else None
    replicas = run.replicas
    if len(replicas) > MAX_REPLICA_LINES and not steps.empty:
        edges_s = bin_edges(makespan_s, num_bins)
        _draw_cluster(axes, signals_drawn, steps, replicas, edges_s)
    else:
        queue_edges_s = bin_edges(makespan_s, num_bins) if len(steps) > num_bins else None
        for replica, color in zip(replicas, colors(len(replicas)), strict=True):
            rows = steps[steps["replica"] == replica]
            if len(rows):
                _draw_replica(axes, signals_drawn, rows, edges_s, color, run.replica_label(replica), queue_edges_s)
    _label_axes(axes, signals_drawn, steps, binned=edges_s is not None, queue_binned=len(steps) > num_bins)
    axes[-1].set_xlim(0, makespan_s if makespan_s > 0 else 1.0)
    if steps.empty:
        axes[1].text(
            0.5,
            0.5,
            "no scheduler iteration completed during the run",
            transform=axes[1].transAxes,
            ha="center",
            va="center",
            color="0.4",
        )
    elif len(replicas) > 1:
        figure.legend(
            *axes[0].get_legend_handles_labels(),
            loc="outside lower center",
            ncols=min(len(replicas), MAX_REPLICA_LINES),
            fontsize="small",
        )
    if edges_s is None:
        how = "every scheduler iteration" + ("; the queue: time-weighted mean per bin" if len(steps) > num_bins else "")
    else:
        width = seconds_label(float(edges_s[1] - edges_s[0]))
        how = f"time-weighted mean per {width} bin, from {len(steps):,} step rows"
    figure.suptitle(f"{run.title}: replica state over time\n({how})")
    return figure


def _draw_cluster(
    axes: list[Axes], signals_drawn: tuple[Signal, ...], steps: pd.DataFrame, replicas: list[int], edges_s: FloatArray
) -> None:
    """Many replicas: per time bin, the mean over replicas and the band from the least to the greatest."""
    per_replica: dict[str, list[FloatArray]] = {signal.key: [] for signal in signals_drawn}
    for replica in replicas:
        rows = steps[steps["replica"] == replica]
        start_s = rows["started_at_s"].to_numpy(np.float64)
        duration_s = rows["duration_s"].to_numpy(np.float64)
        signals = replica_signals(rows)
        for signal in signals_drawn:
            per_replica[signal.key].append(
                binned_signal(start_s, duration_s, signals[signal.key], edges_s, signal.idle_value)
            )
    x = (edges_s[:-1] + edges_s[1:]) / 2
    color = colors(1)[0]
    for ax, signal in zip(axes, signals_drawn, strict=True):
        stacked = np.vstack(per_replica[signal.key])
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a bin where no replica was busy (KV: NaN)
            low, mean, high = np.nanmin(stacked, 0), np.nanmean(stacked, 0), np.nanmax(stacked, 0)
        ax.fill_between(x, low, high, color=color, alpha=0.25, lw=0, label="least to greatest replica")
        ax.plot(x, mean, color=color, lw=1.2, label=f"mean of {len(replicas)} replicas")


def _label_axes(
    axes: list[Axes], signals_drawn: tuple[Signal, ...], steps: pd.DataFrame, binned: bool, queue_binned: bool
) -> None:
    totals = steps["kv_total_blocks"].unique()
    for ax, signal in zip(axes, signals_drawn, strict=True):
        ylabel = signal.ylabel
        binned_here = binned or (signal is QUEUE and queue_binned)
        if signal is KV_FRAC:
            ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
            if len(totals) == 1:
                ylabel = f"KV cache used\n(% of {int(totals[0]):,} blocks)"
        else:
            ax.yaxis.set_major_locator(MaxNLocator(integer=not binned_here))
            if signal is KV_BLOCKS and len(totals) == 1:
                ylabel = f"KV cache used\n(blocks of {int(totals[0]):,})"
        ax.set_ylabel(("mean " if binned_here else "") + ylabel)
        ax.set_ylim(bottom=0)
    axes[-1].set_xlabel("simulated time (s)")
