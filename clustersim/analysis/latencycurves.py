"""Latency against load across a sweep's variants, from ``stats.parquet``.

=============================  ==================================================================
``latency_throughput.png``     p50/p99 TTFT and p99 ITL and TPOT against the offered rate (an axis
                               named ``*rate_per_s``), one line per value of the other axes
``latency_vs_achieved.png``    the same latencies against the achieved output-token throughput,
                               each line following the rate axis (else the first numeric axis)
=============================  ==================================================================

Every point is the mean over the seeds, its bars the 95% interval (drawn from 0 when it reaches below
0); the SLO's targets are dashed on the panels of its percentile. The knee of a line (along a rate) is
the lowest rate at which the SLO is missed in some seed when the sweep judges an SLO, else the lowest
rate at which the mean p99 TTFT is more than twice its value at the lowest rate; it is dotted.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter
from matplotlib.transforms import ScaledTranslation, Transform

from clustersim.analysis.style import colors, new_figure
from clustersim.analysis.sweepdata import SweepData

MAX_LINES = 12
KNEE_FACTOR = 2.0
LOG_SPAN = 10.0  # a log latency axis once the plotted means span a decade
FEW_DECADES = 300.0  # a log axis spanning less labels its 2x and 5x ticks too
DODGE_PT = 3.0  # lines sharing an x are drawn this many points apart, so that every interval shows
PANELS = (("ttft_p50_s", "TTFT p50"), ("ttft_p99_s", "TTFT p99"), ("itl_p99_s", "ITL p99"), ("tpot_p99_s", "TPOT p99"))
ACHIEVED = "output_tokens_per_s"

Array = np.ndarray[Any, np.dtype[np.float64]]


def rate_axis(data: SweepData) -> str | None:
    """The first axis that is an offered rate, if any."""
    return next((axis for axis in data.axes if data.is_rate(axis)), None)


def along_axis(data: SweepData) -> str | None:
    """The axis a line of the achieved-throughput figure follows: the rate axis, else the first
    numeric axis with several values (a batch size, a replica count), else none."""
    numeric = [a for a in data.axes if pd.api.types.is_numeric_dtype(data.stats[a]) and data.stats[a].nunique() > 1]
    return rate_axis(data) or next(iter(numeric), None)


def variant_groups(frame: pd.DataFrame, by: list[str]) -> list[tuple[str, pd.DataFrame]]:
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
    return _latency_figure(data, rate, achieved=False)


def plot_latency_vs_achieved(data: SweepData) -> Figure:
    """Latency against the achieved output tokens per second (requires :func:`along_axis`)."""
    along = along_axis(data)
    assert along is not None
    return _latency_figure(data, along, achieved=True)


def _latency_figure(data: SweepData, along: str, *, achieved: bool) -> Figure:
    others = [axis for axis in data.axes if axis != along]
    groups = variant_groups(data.stats.sort_values(along, kind="stable"), others)
    lines = groups[:MAX_LINES]
    panels = [p for p in PANELS if f"{p[0]}_mean" in data.stats]
    figure = new_figure(4.2 * len(panels), 3.6 + 0.22 * math.ceil(len(lines) / 4))
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    knees: list[float] = []
    how = ""
    for index, ((label, line), (color, style)) in enumerate(zip(lines, line_styles(len(lines)), strict=True)):
        knee, how = knee_rate(line, along) if data.is_rate(along) else (None, "")
        label += " (no point ran)" if "num_ok" in line and (line["num_ok"] == 0).all() else ""
        x = line[f"{ACHIEVED}_mean" if achieved else along].to_numpy(dtype=float)
        at_knee = x[line[along].to_numpy(dtype=float) == knee] if knee is not None else x[:0]
        knees.extend(float(v) for v in at_knee)
        shift = None if achieved else _dodge(figure, index, len(lines))
        for ax, (metric, _) in zip(axes, panels, strict=True):
            y, yerr = interval_bars(line, metric)
            ax.errorbar(x, y, yerr=yerr, color=color, linestyle=style, marker="o", markersize=4, capsize=3,
                        label=label, transform=ax.transData if shift is None else ax.transData + shift)  # fmt: skip
            _count_in_limits(ax, x, y, yerr)
            for value in at_knee:
                ax.axvline(value, color=color, linestyle=":", linewidth=1.2)
        if achieved and len(lines) <= 4:
            _label_points(axes[0], x, line, along, color)
    _decorate(figure, axes, panels, data, along, achieved)
    _legend(figure, axes[0], how if knees else "", len(groups))
    return figure


def line_styles(count: int) -> list[tuple[Any, str]]:
    """A colour and a line style for each of ``count`` lines: the ten palette colours solid, then dashed."""
    palette = colors(min(count, 10))
    return [(palette[i % 10], ("-", "--", "-.")[i // 10 % 3]) for i in range(count)]


def interval_bars(line: pd.DataFrame, metric: str) -> tuple[Array, Array]:
    """A metric's means (ms) and the distances down and up to its 95% interval (the low end at least 0)."""
    y = line[f"{metric}_mean"].to_numpy(dtype=float) * 1e3
    low = np.maximum(line[f"{metric}_ci_low"].to_numpy(dtype=float) * 1e3, 0.0)
    high = line[f"{metric}_ci_high"].to_numpy(dtype=float) * 1e3
    return y, np.vstack([np.nan_to_num(np.maximum(y - low, 0.0)), np.nan_to_num(high - y)])


def _count_in_limits(ax: Axes, x: Array, y: Array, yerr: Array) -> None:
    """Autoscaling skips shifted artists: the points and their interval ends are added to the limits."""
    ends = np.column_stack([np.tile(x, 2), np.concatenate([y - yerr[0], y + yerr[1]])])
    ax.update_datalim(ends[np.isfinite(ends).all(axis=1)])


def _dodge(figure: Figure, index: int, count: int) -> Transform:
    """A shift of a few points to the side for line ``index`` of ``count`` (the data stay as they are)."""
    return ScaledTranslation((index - (count - 1) / 2) * DODGE_PT / 72, 0.0, figure.dpi_scale_trans)


def _label_points(ax: Axes, x: Array, line: pd.DataFrame, along: str, color: Any) -> None:
    y = line[f"{PANELS[0][0]}_mean"].to_numpy(dtype=float) * 1e3
    for xi, yi, value in zip(x, y, line[along], strict=True):
        if np.isfinite(xi) and np.isfinite(yi):
            ax.annotate(f"{value:g}", (xi, yi), xytext=(3, 4), textcoords="offset points", fontsize="x-small",
                        color=color)  # fmt: skip


def _decorate(figure: Figure, axes: Any, panels: list[tuple[str, str]], data: SweepData, along: str,
              achieved: bool) -> None:  # fmt: skip
    percentile, targets = data.slo_targets()
    for ax, (metric, title) in zip(axes, panels, strict=True):
        ax.set_title(f"{title} (ms)")
        ax.set_xlabel("achieved output tokens/s (mean over seeds)" if achieved else f"offered rate ({along}, req/s)")
        name, _, pct = metric.removesuffix("_s").partition("_p")
        target = targets.get(f"{name}_s")
        if target is not None and percentile is not None and float(pct) == percentile:
            ax.axhline(target * 1e3, color="crimson", linestyle="--", linewidth=1.0, label="SLO target")
        log_if_wide(ax, data.stats[f"{metric}_mean"].to_numpy(dtype=float) * 1e3)
    axes[0].set_ylabel("ms: mean over seeds, 95% interval")
    others = [axis for axis in data.axes if axis != along]
    by = f", by {', '.join(others)}" if others else ""
    what = f"achieved throughput (points along {along})" if achieved else "offered rate"
    figure.suptitle(f"{data.name}: latency against {what}{by}")


def _legend(figure: Figure, ax: Axes, how: str, num_groups: int) -> None:
    handles, names = ax.get_legend_handles_labels()
    entries = [(h, n) for h, n in zip(handles, names, strict=True) if n != "SLO target"]
    if any(line.get_label() == "SLO target" for panel in figure.axes for line in panel.get_lines()):
        entries.append((Line2D([], [], color="crimson", linestyle="--"), "SLO target"))
    title = [f"dotted: the knee ({how})"] if how else []
    if num_groups > MAX_LINES:
        title.append(f"the first {MAX_LINES} of {num_groups} lines")
    figure.legend(*zip(*entries, strict=True), loc="outside lower center", ncols=min(4, len(entries)),
                  fontsize="small", title="; ".join(title) or None, title_fontsize="small")  # fmt: skip


def log_if_wide(ax: Axes, plotted: Array) -> None:
    """A log scale when the plotted values span :data:`LOG_SPAN` or more, else a linear one from 0; plain
    numbers on the ticks either way."""
    values = plotted[np.isfinite(plotted) & (plotted > 0)]
    if values.size and values.max() / values.min() >= LOG_SPAN:
        ax.set_yscale("log")
        ax.set_ylim(bottom=max(ax.get_ylim()[0], values.min() / 3))  # intervals reaching 0 run off the bottom
        plain_log_ticks(ax.yaxis, float(values.max() / values.min()))
    else:  # from 0, and a flat line stays a flat line instead of a zoom into its rounding
        ax.set_ylim(0.0, max(ax.get_ylim()[1], float(values.max()) * 1.1 if values.size else 1.0))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))


def plain_log_ticks(axis: Axis, span: float) -> None:
    """Plain numbers on a log axis (``100``, not ``10^2``); under :data:`FEW_DECADES` of ``span`` the
    2x and 5x minor ticks are labelled too, so that a short axis does not show one number."""

    def minor(value: float, _: object) -> str:
        leading = round(value / 10 ** math.floor(math.log10(value))) if value > 0 else 0
        return f"{value:g}" if span < FEW_DECADES and leading in (2, 5) else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))
