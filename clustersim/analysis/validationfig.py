"""The validation's parity figure: predicted against published, one panel per kind of metric.

Reads the ``comparisons.parquet`` that ``clustersim validate`` writes (its scored metric of each kind
per row). Log-log axes, colour by engine, marker by GPU, the line of equality and a band of +-15%.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from clustersim.analysis.style import annotate_empty, colors, new_figure, save, theme

KINDS = (("throughput", "throughput (tokens/s, requests/s)"), ("TTFT", "TTFT (ms)"),
         ("TPOT/ITL", "TPOT / ITL (ms)"), ("E2E", "end-to-end latency (ms)"))  # fmt: skip
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
BAND = 0.15
MIN_SPAN = 20.0  # the least ratio of an axis's ends: over a decade, so a whole power is always labelled


def plot_parity(comparisons_parquet: Path, title: str = "") -> Figure:
    """Four log-log panels of predicted vs published values."""
    frame = pq.read_table(comparisons_parquet).to_pandas()
    frame = frame[frame["scored"] & (frame["published"] > 0) & (frame["predicted"] > 0)]
    engines, gpus = sorted(frame["engine"].unique()), sorted(frame["gpu"].unique())
    palette = dict(zip(engines, colors(max(1, len(engines))), strict=False))
    markers = {gpu: MARKERS[i % len(MARKERS)] for i, gpu in enumerate(gpus)}
    figure = new_figure(4.0 * len(KINDS), 4.2)
    axes = figure.subplots(1, len(KINDS))
    for ax, (kind, label) in zip(axes, KINDS, strict=True):
        rows = frame[frame["kind"] == kind]
        ax.set_title(label)
        if rows.empty:
            annotate_empty(ax, "no published values")
            continue
        for (engine, gpu), part in rows.groupby(["engine", "gpu"]):
            ax.scatter(part["published"], part["predicted"], s=18, alpha=0.75, color=palette[engine],
                       marker=markers[gpu], label=f"{engine} {gpu} ({len(part)})")  # fmt: skip
        values = np.concatenate([rows["published"].to_numpy(), rows["predicted"].to_numpy()])
        low, high = float(values.min()) / 1.5, float(values.max()) * 1.5
        if high / low < MIN_SPAN:  # a narrow range might hold no whole power to label
            middle = math.sqrt(low * high)
            low, high = middle / math.sqrt(MIN_SPAN), middle * math.sqrt(MIN_SPAN)
        line = np.array([low, high])
        ax.plot(line, line, color="0.3", linewidth=0.8)
        ax.fill_between(line, line * (1 - BAND), line * (1 + BAND), color="0.5", alpha=0.12, linewidth=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # whole powers only: minor labels of a narrow range run together
            axis.set_minor_formatter(NullFormatter())
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        mape = float(np.mean(np.abs(rows["error_pct"]))) if len(rows) else float("nan")
        ax.set_xlabel(f"published  (MAPE {mape:.1f}% over {len(rows)} rows)")
        ax.legend(loc="upper left", fontsize="xx-small", markerscale=0.8)
    axes[0].set_ylabel("predicted by clustersim")
    if title:
        figure.suptitle(title)
    return figure


def write_parity_figure(comparisons_parquet: Path, out_path: Path, title: str = "") -> Path:
    """Draw :func:`plot_parity` to ``out_path`` (PNG)."""
    with theme():
        return save(plot_parity(comparisons_parquet, title), out_path)
