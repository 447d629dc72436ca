"""``lifecycle.png``: what failures and the autoscaler did to a run (runs with ``lifecycle.parquet``).

Three panels over simulated time: each replica's state (up, starting cold, draining, stopped, down)
with each failure's held requests; the cluster's output tokens per second; and the TTFT of each
completed request at its arrival, retried ones apart, with the lost and rejected requests marked at
their arrival.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from clustersim.analysis.rundata import RunData
from clustersim.analysis.style import new_figure, seconds_label
from clustersim.analysis.throughput import NUM_BINS, tokens_per_s
from clustersim.analysis.timebins import bin_edges

STATE_COLORS = {"up": "#4c9f70", "starting": "#e9a23b", "draining": "#7fb3d5", "stopped": "#dddddd", "down": "#c8453b"}
STATE_OF_EVENT = {
    "failed": "down",
    "detected": "down",
    "starting": "starting",
    "up": "up",
    "draining": "draining",
    "stopped": "stopped",
}
MAX_POINTS = 20_000  # TTFT dots drawn (an even subsample beyond)
MAX_LABELLED_FAILURES = 12


def state_spans(lifecycle: pd.DataFrame, replicas: list[int], end_s: float) -> list[tuple[int, str, float, float]]:
    """(replica, state, start, length) for each stretch of each replica's time in ``[0, end_s]``."""
    spans = []
    for replica in replicas:
        rows = lifecycle[lifecycle["replica"] == replica]
        state, since = "up", 0.0
        for at_s, event in zip(rows["at_s"], rows["event"], strict=True):
            at_s = min(float(at_s), end_s)
            if at_s > since:
                spans.append((replica, state, since, at_s - since))
            state, since = STATE_OF_EVENT[str(event)], max(since, at_s)
        if end_s > since:
            spans.append((replica, state, since, end_s - since))
    return spans


def plot_lifecycle(run: RunData, num_bins: int = NUM_BINS) -> Figure:
    """The lifecycle figure of ``run`` (which has a lifecycle log)."""
    lifecycle = run.lifecycle if run.lifecycle is not None else pd.DataFrame(columns=["replica", "at_s", "event"])
    figure = new_figure(12.0, 8.5)
    states, rate, ttft = figure.subplots(3, 1, sharex=True, height_ratios=[1.1, 1.0, 1.4])
    end_s = run.makespan_s if run.makespan_s > 0 else 1.0
    figure.suptitle(f"{run.title}:\nreplica lifecycle ({_caption(run.summary)})")
    _draw_states(states, lifecycle, run.replicas, end_s)
    ticks = [int(tick) for tick in states.get_yticks()]
    states.set_yticks(ticks, [run.replica_label(tick).removeprefix("replica ") for tick in ticks])
    edges_s = bin_edges(end_s, num_bins)
    rate.stairs(tokens_per_s(run, edges_s), edges_s, color="0.15", lw=1.5)
    rate.set_ylabel(f"output tok/s\n({seconds_label(float(edges_s[1] - edges_s[0]))} bins)")
    rate.set_ylim(bottom=0)
    _draw_ttft(ttft, run)
    for ax in (rate, ttft):
        for at_s in lifecycle.loc[lifecycle["event"] == "failed", "at_s"]:
            ax.axvline(float(at_s), color=STATE_COLORS["down"], lw=0.9, ls="--", alpha=0.8)
    ttft.set_xlim(0, end_s)
    ttft.set_xlabel("simulated time (s)")
    return figure


def _draw_states(ax: Axes, lifecycle: pd.DataFrame, replicas: list[int], end_s: float) -> None:
    spans = state_spans(lifecycle, replicas, end_s)
    for replica, state, start_s, length_s in spans:
        ax.broken_barh([(start_s, length_s)], (replica - 0.4, 0.8), color=STATE_COLORS[state], lw=0)
    failures = lifecycle[lifecycle["event"] == "failed"]
    if len(failures) <= MAX_LABELLED_FAILURES:
        for row in failures.itertuples():
            held, retried, lost = _episode(lifecycle, row)
            ax.annotate(
                f"held {held}: {retried} retried, {lost} lost",
                (min(float(row.at_s), end_s), float(row.replica)),
                xytext=(4, 0), textcoords="offset points", va="center", fontsize="x-small", color="white",
            )  # fmt: skip
    ax.set_yticks(replicas if len(replicas) <= 16 else replicas[:: max(1, len(replicas) // 16)])
    ax.set_ylim(min(replicas, default=0) - 0.6, max(replicas, default=0) + 0.6)
    ax.invert_yaxis()
    ax.set_ylabel("replica")
    ax.grid(False, axis="y")
    shown = [state for state in STATE_COLORS if any(span[1] == state for span in spans)]
    handles = [ax.bar(0, 0, color=STATE_COLORS[state], label=state) for state in shown]
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize="small", ncols=len(shown))


def _episode(lifecycle: pd.DataFrame, failed: object) -> tuple[int, int, int]:
    """A failure's requests held, retried and lost, with those of its detection when it came later."""
    held, retried, lost = int(failed.num_held), int(failed.num_retried), int(failed.num_lost)  # type: ignore[attr-defined]
    later = lifecycle[(lifecycle["replica"] == failed.replica) & (lifecycle["at_s"] >= failed.at_s)]  # type: ignore[attr-defined]
    detected = later[later["event"] == "detected"]
    if len(detected):
        first = detected.iloc[0]
        held, retried, lost = held + int(first["num_held"]), int(first["num_retried"]), int(first["num_lost"])
    return held, retried, lost


def _draw_ttft(ax: Axes, run: RunData) -> None:
    requests = run.requests
    done = requests[requests["status"] == "completed"]
    if len(done) > MAX_POINTS:
        done = done.iloc[np.linspace(0, len(done) - 1, MAX_POINTS).astype(int)]
    retried = done["num_retries"] > 0 if "num_retries" in done else pd.Series(False, index=done.index)
    ttft_ms = (done["first_token_at_s"] - done["arrival_at_s"]) * 1e3
    ax.scatter(done["arrival_at_s"][~retried], ttft_ms[~retried], s=3, color="0.55", lw=0, label="completed")
    if retried.any():
        retried_at_s = done["arrival_at_s"][retried]
        ax.scatter(retried_at_s, ttft_ms[retried], s=9, color="#e9a23b", lw=0, label="completed, retried")
    top = float(ttft_ms.max()) if len(ttft_ms) else 1.0
    for status, marker, color in (("lost", "x", STATE_COLORS["down"]), ("rejected", "|", "0.2")):
        arrivals = requests.loc[requests["status"] == status, "arrival_at_s"]
        if len(arrivals):
            ax.scatter(arrivals, np.full(len(arrivals), top * 1.05), marker=marker, color=color, s=20, label=status)
    ax.set_yscale("symlog", linthresh=max(1.0, float(ttft_ms.quantile(0.5)) if len(ttft_ms) else 1.0))
    ax.set_ylim(bottom=0)
    ax.set_ylabel("TTFT (ms) at arrival")
    ax.legend(loc="upper left", fontsize="small", markerscale=2)


def _caption(summary: dict[str, object]) -> str:
    """What moved: failures and their requests, the autoscaler's starts and stops."""
    parts = []
    faults = summary.get("faults")
    if isinstance(faults, dict):
        parts.append(
            f"{faults['num_failures']} failed, {faults['num_requests_retried']} requests retried, "
            f"{faults['num_requests_lost']} lost"
        )
    scaler = summary.get("autoscaler")
    if isinstance(scaler, dict):
        parts.append(
            f"autoscaler: {scaler['num_starts']} starts, {scaler['num_stops']} stops, "
            f"{scaler['mean_replicas_provisioned']:.2f} replicas on average"
            + "".join(
                f", {role} {pool['mean_replicas_provisioned']:.2f}" for role, pool in scaler.get("pools", {}).items()
            )
        )
    return "; ".join(parts) or "no moves"
