"""Which cross-run figures a sweep or a plan can have, why the others are left out, and what each shows.

Every figure is a function of the folder's tables; one that cannot be drawn is named with the reason
(a sweep without a rate axis has no latency-against-offered-rate curve, one without two varying axes no
heatmap), so that a report says what it left out instead of drawing an empty panel.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from matplotlib.figure import Figure

from clustersim.analysis.latencycurves import (
    ACHIEVED,
    KNEE_FACTOR,
    MAX_LINES,
    along_axis,
    plot_latency_throughput,
    plot_latency_vs_achieved,
    rate_axis,
)
from clustersim.analysis.planfigs import at_target, plot_cost_frontier
from clustersim.analysis.sweepdata import PlanData, SweepData
from clustersim.analysis.sweepfigs import heatmap_axes, plot_cdf_by_variant, plot_slo_heatmap

Plot = Callable[[], Figure]

REQUEST_COLUMNS = ["status", "arrival_at_s", "first_token_at_s", "max_itl_s"]

CAPTIONS = {
    "latency_throughput.png": (
        "Each point is the mean over the seeds, its bar the 95% interval (drawn from 0 where it reaches below). "
        "Dotted: each line's knee, the lowest rate at which the SLO is missed in some seed (a sweep without an "
        f"SLO: the lowest rate at which p99 TTFT exceeds {KNEE_FACTOR:g}x its value at the lowest rate). "
        "Dashed: the SLO's targets, on the panels of its percentile."
    ),
    "latency_vs_achieved.png": (
        "The same latencies against the achieved output tokens per second (mean over the seeds); each line's "
        "points follow its rate axis (else its first numeric axis), knees as in the figure above."
    ),
    "latency_cdf_by_variant.png": (
        "The completed requests of every seed pooled per variant; max ITL is each request's longest gap between "
        f"two tokens. Beyond {MAX_LINES} variants, {MAX_LINES} spread over median TTFT (lowest and highest kept)."
    ),
    "slo_heatmap.png": "The share of a point's seeds in which it meets the SLO ('-': no seed was judged).",
    "cost_frontier.png": (
        "Every evaluation of the replica search at the target rate (o: met the SLO in every seed, x: missed it), "
        "each hardware's price line, and each option's answer circled with its rank."
    ),
    "transfers.png": (
        "Top: for the prompts done in each time bin, the mean time from the prompt's end to the first token, by "
        "part: waiting for the decode replica to take the KV cache, waiting for the link, on the link, and on the "
        "decode replica until the first token. Bottom: the KV bytes held for transfers."
    ),
    "lifecycle.png": (
        "Top: each replica's state (up; starting: reading its weights and starting its engine; draining: routed "
        "nothing new; stopped; down: failed), with what each failure held. Middle: the cluster's output rate "
        "(dashed: failures). Bottom: each completed request's TTFT at its arrival (retried ones in orange; lost "
        "and rejected ones marked above)."
    ),
}


def sweep_figures(data: SweepData) -> tuple[dict[str, Plot], dict[str, str]]:
    """The figures a sweep can have (by file name) and the reasons for those it cannot."""
    figures: dict[str, Plot] = {}
    skipped: dict[str, str] = {}
    if rate_axis(data) is None:
        skipped["latency_throughput.png"] = "no axis is an offered rate (a numeric axis named *rate_per_s)"
    else:
        figures["latency_throughput.png"] = lambda: plot_latency_throughput(data)
    if along_axis(data) is None:
        skipped["latency_vs_achieved.png"] = "no numeric axis with several values to draw a line along"
    elif f"{ACHIEVED}_mean" not in data.stats:
        skipped["latency_vs_achieved.png"] = "the stats table has no output throughput"
    else:
        figures["latency_vs_achieved.png"] = lambda: plot_latency_vs_achieved(data)
    requests = _requests(data)
    if requests is None or requests.empty:
        skipped["latency_cdf_by_variant.png"] = "no point finished (no requests to plot)"
    else:
        figures["latency_cdf_by_variant.png"] = lambda: plot_cdf_by_variant(data, requests)
    if "slo_met_seeds_frac" not in data.stats or data.stats["slo_met_seeds_frac"].isna().all():
        skipped["slo_heatmap.png"] = "the sweep judges no SLO at a percentile (set slo with a percentile)"
    elif heatmap_axes(data) is None:
        varying = sum(data.stats[axis].nunique() > 1 for axis in data.axes)
        skipped["slo_heatmap.png"] = f"needs exactly two axes with several values (this sweep has {varying})"
    else:
        figures["slo_heatmap.png"] = lambda: plot_slo_heatmap(data)
    return figures, skipped


def _requests(data: SweepData) -> pd.DataFrame | None:
    try:
        return data.requests(REQUEST_COLUMNS)
    except (OSError, ValueError):
        return None


def plan_figures(data: PlanData) -> tuple[dict[str, Plot], dict[str, str]]:
    """The figures a plan can have and the reasons for those it cannot."""
    if data.evaluations.empty or "num_gpus" not in data.evaluations or at_target(data).empty:
        return {}, {"cost_frontier.png": "no evaluation ran at the target rate"}
    return {"cost_frontier.png": lambda: plot_cost_frontier(data)}, {}
