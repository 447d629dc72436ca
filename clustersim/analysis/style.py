"""Shared look of every figure: seaborn theme, palette, DPI, and small axis helpers.

Figures are built with :class:`matplotlib.figure.Figure` directly (no pyplot), so nothing here
touches global backend state; PNGs are rendered by the Agg canvas.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib as mpl
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.typing import ColorType

DPI = 120
PALETTE = "tab10"


@contextmanager
def theme() -> Iterator[None]:
    """Apply the seaborn ``whitegrid`` / ``notebook`` look for the duration of the block only."""
    rc: Any = {**sns.axes_style("whitegrid"), **sns.plotting_context("notebook", font_scale=0.85)}
    rc.update({"figure.dpi": DPI, "savefig.dpi": DPI, "legend.frameon": True, "legend.framealpha": 0.85})
    with mpl.rc_context(rc):
        yield


def new_figure(width_in: float, height_in: float) -> Figure:
    """An empty figure of the given size (inches) with an Agg canvas and constrained layout."""
    figure = Figure(figsize=(width_in, height_in), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def colors(num_colors: int) -> list[ColorType]:
    """``num_colors`` distinct colours: the palette's ten, then as many evenly spaced hues as needed."""
    if num_colors <= 10:
        return list(sns.color_palette(PALETTE, 10))[:num_colors]
    return list(sns.color_palette("husl", num_colors))


def tenant_colors(tenants: list[str]) -> dict[str, ColorType]:
    """One colour per tenant name, the same in every figure (palette order of the sorted names)."""
    return dict(zip(tenants, colors(len(tenants)), strict=True))


def annotate_empty(ax: Axes, message: str) -> None:
    """Write ``message`` in the middle of an axes that has nothing to show, and hide its ticks."""
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center", color="0.4", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def seconds_label(width_s: float) -> str:
    """A bin width for a title: ``0.25 s``, ``40 ms``, ``2 min``."""
    if width_s >= 120:
        return f"{width_s / 60:.3g} min"
    if width_s >= 1:
        return f"{width_s:.3g} s"
    return f"{width_s * 1e3:.3g} ms"


def save(figure: Figure, path: Path) -> Path:
    """Write ``figure`` as a PNG at :data:`DPI` and return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=DPI, format="png")
    return path
