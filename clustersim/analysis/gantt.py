"""One bar per request, arrival to finish: the picture that shows how batching policies schedule work.

Drawn only for small runs (at most :data:`MAX_GANTT_REQUESTS` requests); beyond that the bars
are too thin to read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.typing import ColorType

from clustersim.analysis.rundata import RunData
from clustersim.analysis.style import new_figure, tenant_colors

MAX_GANTT_REQUESTS = 60
QUEUE_ALPHA = 0.3
BAR_HEIGHT = 0.6


def _row_label(request: pd.Series, multi_replica: bool) -> str:
    label = f"#{int(request['request_id'])}"
    if multi_replica and int(request["replica"]) >= 0:
        label += f" (replica {int(request['replica'])})"
    return label


def _draw_request(ax: Axes, y: float, request: pd.Series, end_of_run_s: float, color: ColorType) -> None:
    arrival_s = float(request["arrival_at_s"])
    scheduled_s = float(request["first_scheduled_at_s"])
    first_token_s = float(request["first_token_at_s"])
    finished_s = float(request["finished_at_s"])
    status = str(request["status"])
    if status == "rejected":
        ax.plot([arrival_s], [y], "x", color="crimson", ms=8, mew=2)
        return
    queue_end_s = scheduled_s if np.isfinite(scheduled_s) else end_of_run_s
    ax.barh(y, queue_end_s - arrival_s, left=arrival_s, height=BAR_HEIGHT, color=color, alpha=QUEUE_ALPHA, lw=0)
    if np.isfinite(scheduled_s):
        service_end_s = finished_s if np.isfinite(finished_s) else end_of_run_s
        ax.barh(
            y,
            service_end_s - scheduled_s,
            left=scheduled_s,
            height=BAR_HEIGHT,
            color=color,
            lw=0,
            hatch="//" if status != "completed" else None,
            edgecolor="white",
        )
    if np.isfinite(first_token_s):
        ax.plot([first_token_s], [y], "|", color="black", ms=BAR_HEIGHT * 22, mew=1.5)


def _legend_handles(run: RunData, colors_by_tenant: dict[str, ColorType]) -> list[Artist]:
    color = next(iter(colors_by_tenant.values()))
    handles: list[Artist] = [
        Patch(color=color, alpha=QUEUE_ALPHA, label="queued (arrival \u2192 first scheduled)"),
        Patch(color=color, label="in service (first scheduled \u2192 finished)"),
        _marker_handle("|", "black", "first token"),
        Line2D([], [], color="0.3", lw=1, ls="--", label="end of run"),
    ]
    statuses = set(run.requests["status"])
    if "unfinished" in statuses:
        handles.append(Patch(facecolor=color, hatch="//", edgecolor="white", label="unfinished at end of run"))
    if "rejected" in statuses:
        handles.append(_marker_handle("x", "crimson", "rejected on arrival"))
    if len(colors_by_tenant) > 1:
        handles += [Patch(color=c, label=f"tenant {name}") for name, c in colors_by_tenant.items()]
    return handles


def _marker_handle(marker: str, color: str, label: str) -> Line2D:
    """A legend handle showing a lone marker."""
    return Line2D([], [], marker=marker, ls="", color=color, ms=9, mew=1.8, label=label)


def plot_requests_gantt(run: RunData) -> Figure:
    """Horizontal bars, one per request (top: lowest ``request_id``), over simulated time.

    The light part of a bar is time in the queue (arrival to first scheduled), the solid part is
    service (first scheduled to finished, preemptions included); a tick marks the first token.
    Unfinished requests run to the end of the run, hatched; rejected ones are a red cross.

    Args:
        run: The run to plot; should have at most :data:`MAX_GANTT_REQUESTS` requests.

    Returns:
        The figure (not yet saved).
    """
    requests = run.requests.sort_values("request_id", kind="stable").reset_index(drop=True)
    figure = new_figure(11.0, 1.9 + 0.32 * max(len(requests), 3))
    ax = figure.subplots()
    tenants = run.tenants
    colors_by_tenant: dict[str, ColorType] = dict(tenant_colors(tenants or ["all"]))
    end_of_run_s = run.makespan_s
    multi_replica = len(run.replicas) > 1
    for y, (_, request) in enumerate(requests.iterrows()):
        _draw_request(ax, float(y), request, end_of_run_s, colors_by_tenant.get(str(request["tenant"]), "0.5"))
    ax.set_yticks(range(len(requests)), [_row_label(r, multi_replica) for _, r in requests.iterrows()])
    ax.set_ylim(len(requests) - 0.5, -0.5)
    ax.set_xlim(0, end_of_run_s * 1.02 if end_of_run_s > 0 else 1.0)
    ax.axvline(end_of_run_s, color="0.3", lw=1, ls="--")
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("request id")
    figure.legend(handles=_legend_handles(run, colors_by_tenant), loc="outside lower center", ncols=3, fontsize="small")
    figure.suptitle(f"{run.title}: request timeline ({len(requests)} requests, makespan {end_of_run_s:.4g} s)")
    return figure
