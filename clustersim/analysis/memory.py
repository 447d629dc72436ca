"""Where the KV memory went over time: the ledger categories as shares of the cluster's KV capacity."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from clustersim.analysis.rundata import RunData
from clustersim.analysis.style import annotate_empty, colors, new_figure
from clustersim.records import LEDGER_CATEGORIES

LABELS = {
    "stored_bytes": "tokens stored",
    "cached_prefix_bytes": "cached prefixes",
    "internal_frag_bytes": "internal fragmentation",
    "reserved_unused_bytes": "reserved, unused",
    "external_frag_bytes": "external fragmentation",
    "in_flight_bytes": "in flight between replicas",
}
# every ledger category but free headroom, in the order they stack
CATEGORIES = tuple(LABELS.items())
assert set(LABELS) == set(LEDGER_CATEGORIES) - {"free_bytes"}, "a ledger category without a label"
NUM_SAMPLES = 600
ZOOM_BELOW_PERCENT = 25.0  # a peak use under this share of capacity: the axis ends near the peak, not at 100%


def ledger_shares(run: RunData, num_samples: int = NUM_SAMPLES) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Sample times and, per category, its share of the cluster's KV capacity at those times.

    A replica between steps (idle) counts as all free. Capacity is each replica's, summed.
    """
    memory = run.memory
    assert memory is not None
    end_s = float((memory["started_at_s"] + memory["duration_s"]).max())
    times = np.linspace(0.0, end_s, num_samples, endpoint=False) + end_s / (2 * num_samples)
    totals = {column: np.zeros(num_samples) for column, _ in CATEGORIES}
    capacity = 0.0
    for _, rows in memory.groupby("replica"):
        rows = rows.sort_values("started_at_s")
        starts = rows["started_at_s"].to_numpy()
        ends = starts + rows["duration_s"].to_numpy()
        index = np.searchsorted(starts, times, side="right") - 1
        inside = (index >= 0) & (times < ends[np.clip(index, 0, None)])
        capacity += float(rows["capacity_bytes"].iloc[0])
        for column, _ in CATEGORIES:
            values = rows[column].to_numpy()
            totals[column] += np.where(inside, values[np.clip(index, 0, None)], 0.0)
    return times, {column: totals[column] / capacity for column, _ in CATEGORIES}


def plot_kv_memory(run: RunData) -> Figure:
    """Stacked shares of KV capacity over time; the rest, up to 100%, is free."""
    figure = new_figure(11, 4.2)
    ax = figure.add_subplot(1, 1, 1)
    if run.memory is None or run.memory.empty:
        annotate_empty(ax, "no step completed: the KV ledger (memory.parquet) is empty")
        ax.set_title(f"{run.title}: where the KV cache went")
        return figure
    times, shares = ledger_shares(run)
    palette = colors(len(CATEGORIES))
    ax.stackplot(
        times,
        *(100 * shares[column] for column, _ in CATEGORIES),
        labels=[label for _, label in CATEGORIES],
        colors=palette,
        alpha=0.85,
    )
    waste = run.summary.get("kv", {}).get("waste_frac")
    title = f"{run.title}:\nwhere the KV cache went (share of the cluster's KV capacity; the rest is free)"
    if waste is not None:
        title += f"\ntime-weighted waste {100 * waste:.1f}% of capacity"
    ax.set_title(title)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("share of KV capacity (%)")
    peak = float(np.max(sum(100 * shares[column] for column, _ in CATEGORIES), initial=0.0))
    if 0 < peak < ZOOM_BELOW_PERCENT:  # a small pool stays visible: the axis ends near its peak
        ax.set_ylim(0, peak * 1.25)
        ax.set_ylabel(f"share of KV capacity (%; axis up to {peak * 1.25:.3g}%)")
    else:
        ax.set_ylim(0, 100)
    ax.set_xlim(0, float(times[-1]) + float(times[0]))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    return figure
