"""Figures across the variants of a sweep, from its tables and its requests dataset.

=============================  ==================================================================
``latency_cdf_by_variant.png`` CDFs of TTFT and of each request's longest gap (max ITL), per variant,
                               every seed pooled; beyond 12 variants, 12 spread over median TTFT
``slo_heatmap.png``            the share of seeds meeting the SLO, over two axes
=============================  ==================================================================

The latency-against-load figures are in :mod:`clustersim.analysis.latencycurves`, a plan's in
:mod:`clustersim.analysis.planfigs`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from clustersim.analysis.latencycurves import MAX_LINES, line_styles, plain_log_ticks, variant_groups
from clustersim.analysis.style import new_figure
from clustersim.analysis.sweepdata import SweepData


def plot_cdf_by_variant(data: SweepData, requests: pd.DataFrame) -> Figure:
    """CDFs of TTFT and max ITL (ms) per variant, every seed pooled (at most :data:`MAX_LINES` variants)."""
    figure = new_figure(10.0, 4.2)
    ttft_ax, itl_ax = figure.subplots(1, 2)
    done = requests[requests["status"] == "completed"]
    stats_order = variant_groups(data.stats.astype({a: str for a in data.axes}), data.axes)
    order = {label: i for i, (label, _) in enumerate(stats_order)}
    groups = sorted(variant_groups(done, data.axes), key=lambda item: order.get(item[0], len(order)))
    shown = spread_by_median_ttft(groups, MAX_LINES)
    for (label, group), style in zip(shown, line_styles(len(shown)), strict=True):
        _cdf(ttft_ax, _ttft_ms(group), style, label)
        _cdf(itl_ax, group["max_itl_s"].dropna().to_numpy(dtype=float) * 1e3, style, label)
    for ax, title in ((ttft_ax, "TTFT"), (itl_ax, "longest gap per request (max ITL)")):
        ax.set_xscale("log")
        _widen_if_narrow(ax)
        ax.set_xlabel("ms (log scale)")
        ax.set_title(title)
    ttft_ax.set_ylabel("fraction of completed requests")
    note = f" ({len(shown)} of {len(groups)}, spread over median TTFT)" if len(shown) < len(groups) else ""
    figure.legend(*ttft_ax.get_legend_handles_labels(), loc="outside right center", fontsize="small",
                  title=f"variant{note}", title_fontsize="small")  # fmt: skip
    figure.suptitle(f"{data.name}: latency distributions by variant ({', '.join(data.axes)}), seeds pooled")
    return figure


def _ttft_ms(group: pd.DataFrame) -> np.ndarray[Any, np.dtype[np.float64]]:
    ttft_s: np.ndarray[Any, np.dtype[np.float64]] = (group["first_token_at_s"] - group["arrival_at_s"]).to_numpy(float)
    return ttft_s * 1e3


def spread_by_median_ttft(groups: list[tuple[str, pd.DataFrame]], limit: int) -> list[tuple[str, pd.DataFrame]]:
    """All ``groups`` when there are at most ``limit``, else ``limit`` of them evenly spaced in the order
    of their median TTFT (the lowest and the highest always among them), kept in their given order."""
    if len(groups) <= limit:
        return groups
    medians = [float(np.nanmedian(_ttft_ms(group))) if len(group) else math.inf for _, group in groups]
    ranked = sorted(range(len(groups)), key=lambda i: medians[i])
    picked = {ranked[round(j * (len(groups) - 1) / (limit - 1))] for j in range(limit)}
    return [groups[i] for i in sorted(picked)]


def _widen_if_narrow(ax: Axes) -> None:
    """Values all within a factor of 2 (a fixed step time) get an axis from half to twice them, not a
    zoom into their rounding; the ticks are plain numbers."""
    xs = np.concatenate([line.get_xdata() for line in ax.get_lines()] or [np.array([])]).astype(float)
    if xs.size and xs.max() / xs.min() < 2:
        ax.set_xlim(xs.min() / 2, xs.max() * 2)
    plain_log_ticks(ax.xaxis, float(xs.max() / xs.min()) if xs.size else 1.0)


def _cdf(ax: Axes, values: np.ndarray[Any, np.dtype[np.float64]], style: tuple[Any, str], label: str) -> None:
    values = np.sort(values[np.isfinite(values) & (values > 0)])
    if values.size:
        ax.step(
            values,
            np.arange(1, values.size + 1) / values.size,
            where="post",
            color=style[0],
            linestyle=style[1],
            label=label,
        )


def heatmap_axes(data: SweepData) -> tuple[str, str] | None:
    """The two axes of the heatmap: the sweep's first two, when every other axis has one value."""
    varying = [axis for axis in data.axes if data.stats[axis].nunique() > 1]
    return (varying[0], varying[1]) if len(varying) == 2 else None


def plot_slo_heatmap(data: SweepData) -> Figure:
    """The share of seeds meeting the SLO, rows by the first axis, columns by the second."""
    pair = heatmap_axes(data)
    assert pair is not None
    rows_axis, cols_axis = pair
    row_values = list(dict.fromkeys(data.stats[rows_axis]))
    col_values = list(dict.fromkeys(data.stats[cols_axis]))
    grid = np.full((len(row_values), len(col_values)), np.nan)
    for _, row in data.stats.iterrows():
        value = row["slo_met_seeds_frac"]
        grid[row_values.index(row[rows_axis]), col_values.index(row[cols_axis])] = (
            np.nan if value is None or pd.isna(value) else float(value)
        )
    figure = new_figure(max(4.5, 1.6 + 1.1 * len(col_values)), 1.6 + 0.55 * len(row_values))
    ax = figure.subplots()
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        dark = not math.isnan(value) and (value < 0.2 or value > 0.8)  # the colour map's ends are dark
        ax.text(j, i, "-" if math.isnan(value) else f"{value:.0%}", ha="center", va="center", fontsize="small",
                color="white" if dark else "black")  # fmt: skip
    ax.set_xticks(range(len(col_values)), [str(v) for v in col_values])
    ax.set_yticks(range(len(row_values)), [str(v) for v in row_values])
    ax.set_xlabel(cols_axis)
    ax.set_ylabel(rows_axis)
    ax.grid(False)
    figure.colorbar(image, ax=ax, label="share of seeds meeting the SLO")
    figure.suptitle(f"{data.name}: SLO verdicts by {rows_axis} and {cols_axis}\n{slo_text(data)}", fontsize="medium")
    return figure


def slo_text(data: SweepData) -> str:
    """The sweep file's SLO in words: ``p99 TTFT <= 500 ms, TPOT <= 50 ms``."""
    percentile, targets = data.slo_targets()
    if not targets:
        return "the scenario's SLO"
    words = ", ".join(f"{name.removesuffix('_s').upper()} <= {value * 1e3:g} ms" for name, value in targets.items())
    return f"p{percentile:g} {words}" if percentile is not None else words
