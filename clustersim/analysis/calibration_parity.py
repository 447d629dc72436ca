"""The parity figure of ``clustersim calibrate --out-figure``: measured vs predicted, one marker per metric.

Log-log axes, the y = x line and a band of +-15 % around it; each metric (TTFT, ITL, throughput, their
p99s) has its own marker and colour, filled for the rows the fit used and hollow for the held-out
rows. The figure takes the values as given (the calibration's fitted predictions, in display units);
it reads no file.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter
from matplotlib.typing import ColorType

from clustersim.analysis.style import annotate_empty, colors, new_figure, save, theme

BAND_FRAC = 0.15
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
MARGIN_FACTOR = 1.5  # axis limits this factor beyond the outermost value
TITLE_CHARS = 60


@dataclass(frozen=True)
class ParitySeries:
    """One metric's points: ``label`` (with its unit), measured and predicted values (same unit,
    positive) and whether each point's row was held out of the fit."""

    label: str
    measured: tuple[float, ...]
    predicted: tuple[float, ...]
    held_out: tuple[bool, ...]


def _limits(series: Sequence[ParitySeries]) -> tuple[float, float]:
    values = np.array([v for s in series for v in (*s.measured, *s.predicted)], dtype=np.float64)
    return float(values.min()) / MARGIN_FACTOR, float(values.max()) * MARGIN_FACTOR


def _draw_series(ax: Axes, one: ParitySeries, marker: str, color: ColorType) -> bool:
    """One metric's points: filled for fit rows, hollow for held-out rows; whether any was held out."""
    measured, predicted = np.asarray(one.measured), np.asarray(one.predicted)
    fit = ~np.asarray(one.held_out, dtype=bool)
    ax.scatter(measured[fit], predicted[fit], marker=marker, color=color, zorder=3)
    ax.scatter(measured[~fit], predicted[~fit], marker=marker, facecolors="none", edgecolors=color, zorder=3)
    return bool((~fit).any())


def _legend(ax: Axes, handles: list[Artist], any_held_out: bool) -> None:
    handles.append(Patch(color="0.85", label=f"\u00b1{BAND_FRAC:.0%}"))
    if any_held_out:
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="none", color="0.4", label="held out"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", borderaxespad=0)


def plot_calibration_parity(series: Sequence[ParitySeries], title: str = "") -> Figure:
    """Measured (x) vs predicted (y) of every series on one log-log axes, with y = x and +-15 %."""
    figure = new_figure(7.0, 5.0)
    ax = figure.subplots()
    drawn = [s for s in series if s.measured]
    if title:
        ax.set_title(textwrap.fill(title, TITLE_CHARS, break_on_hyphens=False), fontsize="medium")
    if not drawn:
        annotate_empty(ax, "no measured value has a prediction")
        return figure
    low, high = _limits(drawn)
    line = np.geomspace(low, high, 50)
    ax.fill_between(line, line * (1 - BAND_FRAC), line * (1 + BAND_FRAC), color="0.85")
    ax.plot(line, line, color="0.3", linewidth=0.8)
    handles: list[Artist] = []
    any_held_out = False
    for index, (one, color) in enumerate(zip(drawn, colors(len(drawn)), strict=True)):
        marker = MARKERS[index % len(MARKERS)]
        any_held_out |= _draw_series(ax, one, marker, color)
        handles.append(Line2D([], [], marker=marker, linestyle="", color=color, label=one.label))
    handles.append(Line2D([], [], color="0.3", linewidth=0.8, label="y = x"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_aspect("equal")
    ax.set_xlabel("measured")
    ax.set_ylabel("predicted (fitted profile)")
    _legend(ax, handles, any_held_out)
    return figure


def write_calibration_parity(series: Sequence[ParitySeries], out_path: Path, title: str = "") -> Path:
    """Draw :func:`plot_calibration_parity` to ``out_path`` (PNG)."""
    with theme():
        return save(plot_calibration_parity(series, title), out_path)
