"""Figures across the runs of a sweep or a plan.

=============================  ==================================================================
``latency_throughput.png``     p50/p99 TTFT and p99 ITL and TPOT against the offered rate, one line
                               per value of the other axes, 95% intervals over seeds, knee marked
``latency_cdf_by_variant.png`` CDFs of TTFT and of each request's longest gap (max ITL), per variant
``slo_heatmap.png``            the share of seeds meeting the SLO, over two axes
``cost_frontier.png``          a plan's $/h against GPUs per hardware: every evaluation, the answers
=============================  ==================================================================

The knee of a latency-throughput line is the lowest rate at which the SLO is missed in some seed
when the sweep judges an SLO, else the lowest rate at which the mean p99 TTFT is more than twice
its value at the lowest rate.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from clustersim.analysis.style import annotate_empty, colors, new_figure
from clustersim.analysis.sweepdata import PlanData, SweepData

MAX_LINES = 12
KNEE_FACTOR = 2.0
PANELS = (("ttft_p50_s", "TTFT p50"), ("ttft_p99_s", "TTFT p99"), ("itl_p99_s", "ITL p99"), ("tpot_p99_s", "TPOT p99"))


def rate_axis(data: SweepData) -> str | None:
    """The first axis that is an offered rate, if any."""
    return next((axis for axis in data.axes if data.is_rate(axis)), None)


def _groups(frame: pd.DataFrame, by: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """``frame``'s rows grouped by the values of ``by``, in the order they first appear."""
    if not by:
        return [("all", frame)]
    return [(", ".join(f"{c}={v}" for c, v in zip(by, key if isinstance(key, tuple) else (key,), strict=True)), g)
            for key, g in frame.groupby(by, sort=False)]  # fmt: skip


def knee_rate(line: pd.DataFrame, rate: str) -> tuple[float | None, str]:
    """The knee of one line (sorted by rate) and how it was found."""
    judged = line["slo_met_all_seeds"].notna() if "slo_met_all_seeds" in line else pd.Series(False, index=line.index)
    if judged.any():
        missed = line[judged & (line["slo_met_all_seeds"] == False)]  # noqa: E712  (pandas elementwise)
        return (float(missed[rate].iloc[0]) if len(missed) else None), "first rate missing the SLO"
    values = line["ttft_p99_s_mean"].to_numpy(dtype=float)
    over = np.flatnonzero(values > KNEE_FACTOR * values[0]) if values.size else np.array([])
    return (float(line[rate].iloc[over[0]]) if over.size else None), f"p99 TTFT over {KNEE_FACTOR:g}x its lowest"


def plot_latency_throughput(data: SweepData) -> Figure:
    """Latency against the offered rate (requires a rate axis: see :func:`rate_axis`)."""
    rate = rate_axis(data)
    assert rate is not None
    others = [axis for axis in data.axes if axis != rate]
    lines = _groups(data.stats.sort_values(rate), others)[:MAX_LINES]
    panels = [p for p in PANELS if f"{p[0]}_mean" in data.stats]
    figure = new_figure(4.2 * len(panels), 3.8)
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    palette = colors(len(lines))
    how = ""
    for (label, line), color in zip(lines, palette, strict=True):
        knee, how = knee_rate(line, rate)
        for ax, (metric, title) in zip(axes, panels, strict=True):
            _line_with_interval(ax, line, rate, metric, color, label)
            if knee is not None:
                ax.axvline(knee, color=color, linestyle=":", linewidth=1.2)
            ax.set_title(f"{title} (ms)")
            ax.set_xlabel(f"offered rate ({rate}, req/s)")
    for ax, (metric, _) in zip(axes, panels, strict=True):
        _log_if_wide(ax, data.stats[f"{metric}_mean"].to_numpy(dtype=float) * 1e3)
    axes[0].set_ylabel("ms (mean over seeds, 95% interval)")
    handles, names = axes[0].get_legend_handles_labels()
    figure.legend(handles, names, loc="outside lower center", ncols=min(4, max(1, len(names))), fontsize="small",
                  title=f"dotted: the knee ({how})")  # fmt: skip
    figure.suptitle(f"{data.name}: latency against offered rate" + (f", by {', '.join(others)}" if others else ""))
    return figure


def _line_with_interval(ax: Axes, line: pd.DataFrame, rate: str, metric: str, color: Any, label: str) -> None:
    x = line[rate].to_numpy(dtype=float)
    y = line[f"{metric}_mean"].to_numpy(dtype=float) * 1e3
    low = line[f"{metric}_ci_low"].to_numpy(dtype=float) * 1e3
    high = line[f"{metric}_ci_high"].to_numpy(dtype=float) * 1e3
    errors = np.vstack([np.nan_to_num(y - low), np.nan_to_num(high - y)])
    ax.errorbar(x, y, yerr=errors, color=color, marker="o", markersize=4, capsize=3, label=label)


def _log_if_wide(ax: Axes, plotted: np.ndarray[Any, np.dtype[np.float64]]) -> None:
    """A log scale when the plotted values span more than 50x, with plain numbers on the ticks."""
    values = plotted[np.isfinite(plotted) & (plotted > 0)]
    if values.size and values.max() / values.min() > 50:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def plot_cdf_by_variant(data: SweepData, requests: pd.DataFrame) -> Figure:
    """CDFs of TTFT and max ITL (ms) per variant, every seed pooled (at most 12 variants)."""
    figure = new_figure(10.0, 4.2)
    ttft_ax, itl_ax = figure.subplots(1, 2)
    done = requests[requests["status"] == "completed"]
    order = {
        label: i for i, (label, _) in enumerate(_groups(data.stats.astype({a: str for a in data.axes}), data.axes))
    }
    groups = sorted(_groups(done, data.axes), key=lambda item: order.get(item[0], len(order)))
    shown = groups[:MAX_LINES]
    for (label, group), color in zip(shown, colors(len(shown)), strict=True):
        _cdf(ttft_ax, (group["first_token_at_s"] - group["arrival_at_s"]).to_numpy(dtype=float) * 1e3, color, label)
        _cdf(itl_ax, group["max_itl_s"].dropna().to_numpy(dtype=float) * 1e3, color, label)
    for ax, title in ((ttft_ax, "TTFT"), (itl_ax, "longest gap per request (max ITL)")):
        ax.set_xscale("log")
        ax.set_xlabel("ms")
        ax.set_title(title)
    ttft_ax.set_ylabel("fraction of completed requests")
    note = f" (the first {MAX_LINES} of {len(groups)})" if len(groups) > MAX_LINES else ""
    figure.legend(*ttft_ax.get_legend_handles_labels(), loc="outside right center", fontsize="small",
                  title=f"variant{note}")  # fmt: skip
    figure.suptitle(f"{data.name}: latency distributions by variant, seeds pooled")
    return figure


def _cdf(ax: Axes, values: np.ndarray[Any, np.dtype[np.float64]], color: Any, label: str) -> None:
    values = np.sort(values[np.isfinite(values) & (values > 0)])
    if values.size:
        ax.step(values, np.arange(1, values.size + 1) / values.size, where="post", color=color, label=label)


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
    figure = new_figure(1.2 + 1.1 * len(col_values), 1.2 + 0.55 * len(row_values))
    ax = figure.subplots()
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        ax.text(j, i, "-" if math.isnan(value) else f"{value:.0%}", ha="center", va="center", fontsize="small")
    ax.set_xticks(range(len(col_values)), [str(v) for v in col_values])
    ax.set_yticks(range(len(row_values)), [str(v) for v in row_values])
    ax.set_xlabel(cols_axis)
    ax.set_ylabel(rows_axis)
    ax.grid(False)
    figure.colorbar(image, ax=ax, label="seeds meeting the SLO")
    figure.suptitle(f"{data.name}: SLO verdicts")
    return figure


def plot_cost_frontier(data: PlanData) -> Figure:
    """A plan's evaluations at the target rate: $/h against GPUs, by hardware; the answers starred."""
    figure = new_figure(9.0, 4.5)
    ax = figure.subplots()
    evaluations = data.evaluations
    target = evaluations["rate_per_s"].min() if len(evaluations) else 0.0
    at_target = evaluations[np.isclose(evaluations["rate_per_s"], target)] if len(evaluations) else evaluations
    hardware = list(dict.fromkeys(at_target["hardware"])) if len(at_target) else []
    if not hardware:
        annotate_empty(ax, "no evaluation ran")
    for name, color in zip(hardware, colors(len(hardware)), strict=True):
        rows = at_target[(at_target["hardware"] == name) & at_target["num_gpus"].notna()]
        for met, marker in ((True, "o"), (False, "x")):
            chosen = rows[rows["slo_met"] == met]
            ax.scatter(chosen["num_gpus"], chosen["cost_usd_per_hour"], color=color, marker=marker,
                       label=f"{name}: {'meets' if met else 'misses'} the SLO")  # fmt: skip
    answers = data.plan[data.plan["num_replicas"].notna()]
    for number, (_, row) in enumerate(answers.iterrows()):
        ax.scatter([row["num_gpus"]], [row["cost_usd_per_hour"]], s=220, facecolors="none", edgecolors="black",
                   linewidths=1.5, zorder=3)  # fmt: skip
        ax.annotate(f"#{int(row['rank'])} {row['option']}", (row["num_gpus"], row["cost_usd_per_hour"]),
                    xytext=(10, 12 if number % 2 else -16), textcoords="offset points", fontsize="small",
                    arrowprops={"arrowstyle": "-", "color": "0.5"})  # fmt: skip
    ax.set_xlabel("GPUs")
    ax.set_ylabel("$ per hour")
    figure.legend(*ax.get_legend_handles_labels(), loc="outside right center", fontsize="small",
                  title="circled: each option's answer")  # fmt: skip
    figure.suptitle(f"{data.name}: cost against GPUs at {target:.4g} req/s (every evaluation)")
    return figure
