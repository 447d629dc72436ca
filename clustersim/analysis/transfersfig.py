"""``transfers.png``: where a disaggregated run's time to first token went (runs with ``transfers.parquet``).

Two panels over simulated time, by the prompt's end, per time bin: the mean of each part of a request's
trip from its prompt's end to its first token (the wait for the decode replica to take its KV cache,
the wait for the link, the time on it, and the decode replica's wait and step until the first token),
stacked; and the KV bytes held for transfers (a prompt's blocks from its end until they are let go).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from clustersim.analysis.rundata import RunData
from clustersim.analysis.style import colors, new_figure
from clustersim.analysis.timebins import bin_edges

NUM_BINS = 120
PARTS = (
    ("decode wait", "prefilled_at_s", "pulled_at_s"),
    ("link wait", "pulled_at_s", "started_at_s"),
    ("on the link", "started_at_s", "landed_at_s"),
    ("to first token", "landed_at_s", "first_token_at_s"),
)


def trip_parts_s(transfers: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """Per request's first transfer, if it landed: its prompt's end and each part of the trip to the
    first token, in seconds (a transfer after a retry carries no first token)."""
    first = requests.set_index("request_id")["first_token_at_s"]
    rows = transfers.sort_values("prefilled_at_s", kind="stable").drop_duplicates("request_id")
    rows = rows[rows["landed_at_s"].notna()].copy()
    rows["first_token_at_s"] = rows["request_id"].map(first)
    rows = rows[rows["first_token_at_s"].notna()]
    parts = pd.DataFrame({"prefilled_at_s": rows["prefilled_at_s"].to_numpy()})
    for label, start, end in PARTS:
        parts[label] = (rows[end] - rows[start]).to_numpy()
    return parts


def held_bytes(transfers: pd.DataFrame, edges_s: np.ndarray, end_s: float) -> np.ndarray:
    """The mean KV bytes held for transfers in each bin (a prompt's, from its end until the prefill
    replica lets it go: it landed, was lost, or its request ended without it)."""
    starts = transfers["prefilled_at_s"].to_numpy()
    ends = transfers["released_at_s"].fillna(end_s).to_numpy()
    size = transfers["kv_bytes"].to_numpy()
    low, high = edges_s[:-1], edges_s[1:]
    overlap = np.clip(np.minimum(ends[:, None], high) - np.maximum(starts[:, None], low), 0.0, None)
    width = np.maximum(high - low, 1e-300)
    held: np.ndarray = (overlap * size[:, None]).sum(axis=0) / width
    return held


def plot_transfers(run: RunData) -> Figure:
    transfers = run.transfers
    assert transfers is not None
    figure = new_figure(11, 7)
    trip_ax, held_ax = figure.subplots(2, 1, sharex=True)
    end_s = run.makespan_s
    edges_s = bin_edges(end_s, NUM_BINS)
    num_bins = len(edges_s) - 1
    parts = trip_parts_s(transfers, run.requests)
    which = np.clip(np.searchsorted(edges_s, parts["prefilled_at_s"].to_numpy(), side="right") - 1, 0, num_bins - 1)
    counts = np.maximum(np.bincount(which, minlength=num_bins), 1)
    means = [np.bincount(which, weights=parts[label].to_numpy(), minlength=num_bins) / counts for label, _, _ in PARTS]
    middles = (edges_s[:-1] + edges_s[1:]) / 2
    trip_ax.stackplot(middles, *(1000 * m for m in means), labels=[label for label, _, _ in PARTS],
                      colors=colors(len(PARTS)), step="mid")  # fmt: skip
    trip_ax.set_ylabel("ms from the prompt's end\n(mean per bin)")
    trip_ax.legend(loc="upper left", fontsize=8, ncol=4)
    held_ax.stairs(held_bytes(transfers, edges_s, end_s) / 1e9, edges_s, color="0.2", lw=1.2)
    held_ax.set_ylabel("KV held for transfers\n(GB, mean per bin)")
    held_ax.set_xlabel("simulated time (s)")
    held_ax.set_ylim(bottom=0)
    trip_ax.set_ylim(bottom=0)
    figure.suptitle(f"{run.title}: KV transfers from the prefill to the decode pool")
    return figure
