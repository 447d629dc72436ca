"""Predicted-vs-measured kernel times of the cost model (reads the Parquet ``validate-cost`` writes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from matplotlib.figure import Figure

from clustersim.analysis.style import annotate_empty, colors, new_figure, save, theme
from clustersim.validation.kernels import GROUPS

COLUMNS = 3


def plot_cost_validation(scored_parquet: Path) -> Figure:
    """One log-log panel per op group: held-out measured vs predicted times (us), one colour per GPU
    (every row of the scored-only groups: fused element-wise kernels, MoE layers, whole steps)."""
    frame = pq.read_table(scored_parquet).to_pandas()
    frame = frame[frame["held_out"]]
    gpus = sorted(frame["gpu"].unique())
    palette = dict(zip(gpus, colors(len(gpus)), strict=True))
    rows_of_panels = -(-len(GROUPS) // COLUMNS)
    figure = new_figure(3.4 * COLUMNS, 3.2 * rows_of_panels)
    axes = figure.subplots(rows_of_panels, COLUMNS).flatten()
    for ax, group in zip(axes, GROUPS, strict=True):
        rows = frame[frame["op_group"] == group]
        ax.set_title(group)
        if rows.empty:
            annotate_empty(ax, "no measured data")
            continue
        for gpu in gpus:
            part = rows[rows["gpu"] == gpu]
            if part.empty:
                continue
            measured = part["measured_s"].to_numpy() * 1e6
            predicted = part["predicted_s"].to_numpy() * 1e6
            mape = float(np.mean(np.abs(predicted / measured - 1.0))) * 100.0
            ax.scatter(measured, predicted, s=4, alpha=0.4, color=palette[gpu], label=f"{gpu} ({mape:.1f}%)")
        low = float(min(rows["measured_s"].min(), rows["predicted_s"].min())) * 1e6
        high = float(max(rows["measured_s"].max(), rows["predicted_s"].max())) * 1e6
        ax.plot([low, high], [low, high], color="0.3", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured (us)")
        ax.set_ylabel("predicted (us)")
        ax.legend(loc="upper left", fontsize="x-small", markerscale=3)
    return figure


def write_cost_validation_figure(scored_parquet: Path, out_path: Path) -> Path:
    """Draw :func:`plot_cost_validation` to ``out_path`` (PNG)."""
    with theme():
        return save(plot_cost_validation(scored_parquet), out_path)
