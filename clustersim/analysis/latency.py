"""Empirical CDFs of per-request latency: TTFT, TPOT, longest inter-token gap and end-to-end, one line per tenant."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.typing import ColorType
from numpy.typing import NDArray

from clustersim.analysis.rundata import RunData
from clustersim.analysis.style import annotate_empty, colors, new_figure, tenant_colors

FloatArray = NDArray[np.float64]
LOG_SCALE_MIN_DECADES = 2.0
ALL_TENANTS = "all tenants"
MAX_CDF_POINTS = 4000  # larger samples are drawn at this many evenly spaced quantile levels
SLO_REACH = 2.0  # widen the axis to show an SLO target up to this factor beyond the data


class LatencyMetric(NamedTuple):
    """One panel: the key in :func:`latencies_ms`, the panel title and the axis name."""

    key: str
    title: str
    axis: str


METRICS = (
    LatencyMetric("ttft", "Time to first token", "TTFT"),
    LatencyMetric("tpot", "Time per output token", "TPOT"),
    LatencyMetric("itl", "Longest gap between two tokens", "max inter-token latency"),
    LatencyMetric("e2e", "End-to-end latency", "end-to-end latency"),
)


def latencies_ms(requests: pd.DataFrame) -> dict[str, FloatArray]:
    """Latencies (ms) of the completed requests in ``requests``, NaNs dropped.

    TTFT is ``first_token_at_s - arrival_at_s``; TPOT is ``(finished_at_s - first_token_at_s) /
    (output_tokens - 1)`` and exists only for outputs of 2 or more tokens; end-to-end is
    ``finished_at_s - arrival_at_s``; ``itl`` is each request's longest inter-token gap
    (``max_itl_s``: empty for runs written before it existed).

    Args:
        requests: Rows of ``requests.parquet``.

    Returns:
        ``{"ttft": ..., "tpot": ..., "itl": ..., "e2e": ...}`` arrays in milliseconds.
    """
    done = requests[requests["status"] == "completed"]
    arrival_s = done["arrival_at_s"].to_numpy(np.float64)
    first_token_s = done["first_token_at_s"].to_numpy(np.float64)
    finished_s = done["finished_at_s"].to_numpy(np.float64)
    outputs = done["output_tokens"].to_numpy(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot_s = np.where(outputs > 1, (finished_s - first_token_s) / (outputs - 1), np.nan)
    longest_s = done["max_itl_s"].to_numpy(np.float64) if "max_itl_s" in done else np.zeros(0)
    result = {"ttft": first_token_s - arrival_s, "tpot": tpot_s, "itl": longest_s, "e2e": finished_s - arrival_s}
    return {key: values[np.isfinite(values)] * 1e3 for key, values in result.items()}


def format_ms(value_ms: float) -> str:
    """A latency for a legend: three significant digits, no exponent (``1,000``, ``31.2``, ``0.52``)."""
    if abs(value_ms) >= 100:
        return f"{value_ms:,.0f}"
    if abs(value_ms) >= 10:
        return f"{value_ms:.1f}"
    return f"{value_ms:.2g}" if abs(value_ms) < 0.01 else f"{value_ms:.2f}"


class Group(NamedTuple):
    """One line in every panel: a tenant (or all of them), its colour and its latencies (ms)."""

    name: str
    color: ColorType
    latencies_ms: dict[str, FloatArray]


def _groups(run: RunData) -> list[Group]:
    tenants = run.tenants
    if len(tenants) <= 1:
        name = tenants[0] if tenants else ALL_TENANTS
        return [Group(name, colors(1)[0], latencies_ms(run.requests))]
    by_tenant = [
        Group(t, color, latencies_ms(run.requests[run.requests["tenant"] == t]))
        for t, color in tenant_colors(tenants).items()
    ]
    return [Group(ALL_TENANTS, "0.15", latencies_ms(run.requests)), *by_tenant]


def _slo_target_ms(run: RunData, key: str) -> float | None:
    targets = (run.summary.get("slo") or {}).get("targets") or {}
    target_s = targets.get(f"{key}_s")  # itl: slo.itl_s bounds every gap of a request, i.e. its longest
    return float(target_s) * 1e3 if isinstance(target_s, int | float) else None


def _draw_cdf(ax: Axes, values_ms: FloatArray, label: str, color: ColorType, width: float) -> None:
    if values_ms.size > MAX_CDF_POINTS:  # exact ECDF points at evenly spaced levels
        y = np.linspace(0.0, 1.0, MAX_CDF_POINTS + 1)[1:]
        x = np.quantile(values_ms, y, method="inverted_cdf")
    else:
        x = np.sort(values_ms)
        y = np.arange(1, x.size + 1) / x.size
    ax.step(np.r_[x[0], x], np.r_[0.0, y], where="post", color=color, lw=width, label=label)
    p50, p99 = np.percentile(x, [50, 99])
    ax.plot([p50], [0.5], "o", color=color, ms=6, mec="white", zorder=4)
    ax.plot([p99], [0.99], "D", color=color, ms=5.5, mec="white", zorder=4)


def _set_x_scale(ax: Axes, all_ms: FloatArray, target_ms: float | None) -> None:
    """Log scale when the values span more than two decades; the SLO target is kept in view if it is near."""
    low, high = float(all_ms.min()), float(all_ms.max())
    if low > 0 and np.log10(high / low) > LOG_SCALE_MIN_DECADES:
        ax.set_xscale("log")
        if target_ms is not None and low / SLO_REACH <= target_ms <= high * SLO_REACH:
            low, high = min(low, target_ms), max(high, target_ms)
        ax.set_xlim(low / 1.3, high * 1.3)
        return
    if target_ms is not None and 0 < target_ms <= high * SLO_REACH:
        high = max(high, target_ms)
    ax.set_xlim(min(low, 0.0), high * 1.05 if high > 0 else 1.0)


def _panel(ax: Axes, legend_ax: Axes, run: RunData, metric: LatencyMetric, groups: list[Group]) -> None:
    ax.set_title(metric.title)
    ax.set_xlabel(f"{metric.axis} (ms)")
    legend_ax.axis("off")
    present = [group.latencies_ms[metric.key] for group in groups if group.latencies_ms[metric.key].size]
    if not present:
        if metric.key == "itl" and "max_itl_s" not in run.requests:
            annotate_empty(ax, "not recorded in this run\n(written before max_itl_s existed)")
        elif len(run.completed()) and metric.key in ("tpot", "itl"):
            annotate_empty(ax, f"no completed request has 2+ output tokens\n({metric.axis} is undefined)")
        else:
            annotate_empty(ax, "no completed requests")
        return
    for group in groups:
        values = group.latencies_ms[metric.key]
        if values.size:
            p50, p99 = np.percentile(values, [50, 99])
            label = f"{group.name}: p50 {format_ms(p50)} ms, p99 {format_ms(p99)} ms (n={values.size:,})"
            _draw_cdf(ax, values, label, group.color, 2.2 if group.name == ALL_TENANTS else 1.6)
        else:
            ax.plot([], [], color=group.color, lw=1.6, ls=":", label=f"{group.name}: n=0")
    for level in (0.5, 0.99):
        ax.axhline(level, color="0.6", lw=0.8, ls=":", zorder=1)
    target_ms = _slo_target_ms(run, metric.key)
    _set_x_scale(ax, np.concatenate(present), target_ms)
    ax.set_xlabel(f"{metric.axis} (ms, {'log scale' if ax.get_xscale() == 'log' else 'linear scale'})")
    ax.set_ylim(0, 1.03)
    handles, labels = ax.get_legend_handles_labels()
    if target_ms is not None:
        low, high = ax.get_xlim()
        on_scale = low <= target_ms <= high
        if on_scale:
            ax.axvline(target_ms, color="crimson", lw=1.2, ls="--", zorder=2)
        handles.append(Line2D([], [], color="crimson", lw=1.2, ls="--"))
        labels.append(f"SLO target {format_ms(target_ms)} ms" + ("" if on_scale else " (off the axis)"))
    legend_ax.legend(handles, labels, loc="upper center", fontsize="small", borderaxespad=0)


def plot_latency_cdf(run: RunData) -> Figure:
    """Four panels of empirical CDFs (TTFT, TPOT, longest inter-token gap, end-to-end) over completed requests.

    With several tenants there is one line per tenant and a darker line for all of them; a dot
    marks each line's p50 and a diamond its p99; a dashed red line marks the SLO target, if any.

    Args:
        run: The run to plot.

    Returns:
        The figure (not yet saved).
    """
    groups = _groups(run)
    num_legend_rows = len(groups) + (1 if run.summary.get("slo") else 0)
    legend_height_in = 0.2 + 0.22 * num_legend_rows
    figure = new_figure(19.0, 4.4 + legend_height_in)
    grid = figure.add_gridspec(2, len(METRICS), height_ratios=[4.0, legend_height_in])
    axes = [figure.add_subplot(grid[0, i]) for i in range(len(METRICS))]
    for ax in axes[1:]:
        ax.sharey(axes[0])
        ax.tick_params(labelleft=False)
    for i, (ax, metric) in enumerate(zip(axes, METRICS, strict=True)):
        _panel(ax, figure.add_subplot(grid[1, i]), run, metric, groups)
    axes[0].set_ylabel("fraction of completed requests")
    num_done, num_all = len(run.completed()), len(run.requests)
    figure.suptitle(
        f"{run.title}: request latency CDFs ({num_done:,} of {num_all:,} requests completed; \u25cf p50, \u25c6 p99)"
    )
    return figure
