"""A capacity plan's figure, from ``plan.parquet`` and ``evaluations.parquet``.

=============================  ==================================================================
``cost_frontier.png``          $/h against GPUs at the plan's target rate: every evaluation of the
                               replica search as a point coloured by hardware (o: met the SLO in
                               every seed, x: missed it), each hardware's price line, and each
                               option's answer (plan.parquet) circled and named with its rank
=============================  ==================================================================

The max-rate search's evaluations (same GPUs as an answer, higher rates) are counted in the title and
not drawn; options on the same hardware are drawn a few points apart so that none hides another.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import yaml
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from matplotlib.transforms import ScaledTranslation

from clustersim.analysis.style import annotate_empty, colors, new_figure
from clustersim.analysis.sweepdata import PlanData

ANSWER_SIZE = 220  # marker area (points^2) of the rings around the answers
DODGE_PT = 8.0  # options sharing a hardware are drawn this many points apart


def target_rate(data: PlanData) -> float | None:
    """The plan's offered rate: its file's ``traffic.rate_per_s``, else the lowest evaluated rate."""
    spec: Any = yaml.safe_load(data.spec_text) if data.spec_text else None
    rate = ((spec or {}).get("traffic") or {}).get("rate_per_s")
    if rate is not None:
        return float(rate)
    rates = data.evaluations["rate_per_s"].dropna() if "rate_per_s" in data.evaluations else pd.Series([])
    return float(rates.min()) if len(rates) else None


def at_target(data: PlanData) -> pd.DataFrame:
    """The evaluations of the replica search (at the target rate) that ran."""
    target = target_rate(data)
    evaluations = data.evaluations
    if target is None or evaluations.empty:
        return evaluations.iloc[0:0]
    keep = np.isclose(evaluations["rate_per_s"].astype(float), target) & evaluations["num_gpus"].notna()
    return evaluations[keep]


def plot_cost_frontier(data: PlanData) -> Figure:
    """A plan's evaluations at the target rate: $/h against GPUs, by hardware; the answers circled."""
    figure = new_figure(9.0, 4.8)
    ax = figure.subplots()
    rows = at_target(data)
    hardware = list(dict.fromkeys(rows["hardware"]))
    if not hardware:
        annotate_empty(ax, "no evaluation ran at the target rate")
    palette = dict(zip(hardware, colors(len(hardware)), strict=True))
    shifts = _option_shifts(figure, rows)
    for name in hardware:
        _hardware_points(ax, rows[rows["hardware"] == name], name, palette[name], shifts)
    _circle_answers(ax, data.plan, shifts)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("$ per hour")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    figure.legend(*ax.get_legend_handles_labels(), loc="outside right center", fontsize="small",
                  title="circled: each option's answer", title_fontsize="small")  # fmt: skip
    target = target_rate(data)
    others = len(data.evaluations) - len(rows)
    note = f"; {others} max-rate evaluations not drawn" if others else ""
    rate = f"{target:.4g} req/s" if target is not None else "the target rate"
    figure.suptitle(f"{data.name}: cost against GPUs at {rate}, by hardware and number of replicas\n"
                    f"every evaluation of the replica search ({len(rows)}){note}", fontsize="medium")  # fmt: skip
    return figure


def _option_shifts(figure: Figure, rows: pd.DataFrame) -> dict[str, ScaledTranslation]:
    """A small sideways shift per option, so that options sharing a hardware do not hide each other."""
    shifts: dict[str, ScaledTranslation] = {}
    for _, options in rows.groupby("hardware", sort=False)["option"]:
        names = list(dict.fromkeys(options))
        for index, option in enumerate(names):
            dx = (index - (len(names) - 1) / 2) * DODGE_PT / 72
            shifts[str(option)] = ScaledTranslation(dx, 0.0, figure.dpi_scale_trans)
    return shifts


def _hardware_points(ax: Axes, rows: pd.DataFrame, name: str, color: Any,
                     shifts: dict[str, ScaledTranslation]) -> None:  # fmt: skip
    price = rows.drop_duplicates("num_gpus").sort_values("num_gpus")
    ax.plot(price["num_gpus"], price["cost_usd_per_hour"], color=color, linewidth=0.8, alpha=0.4)
    for met, marker in ((True, "o"), (False, "x")):
        label = f"{name}: {'meets' if met else 'misses'} the SLO"
        for option, chosen in rows[rows["slo_met"] == met].groupby("option", sort=False):
            ax.scatter(chosen["num_gpus"], chosen["cost_usd_per_hour"], color=color, marker=marker, label=label,
                       transform=ax.transData + shifts[str(option)], zorder=2)  # fmt: skip
            label = "_nolegend_"


def _circle_answers(ax: Axes, plan: pd.DataFrame, shifts: dict[str, ScaledTranslation]) -> None:
    answers = plan[plan["num_replicas"].notna()]
    for number, (_, row) in enumerate(answers.iterrows()):
        point = (float(row["num_gpus"]), float(row["cost_usd_per_hour"]))
        shift = shifts.get(str(row["option"]))
        transform = ax.transData + shift if shift is not None else ax.transData
        ax.scatter([point[0]], [point[1]], s=ANSWER_SIZE, facecolors="none", edgecolors="black", linewidths=1.5,
                   zorder=3, transform=transform)  # fmt: skip
        offset = (12, 14 if number % 2 else -18)
        ax.annotate(f"#{int(row['rank'])} {row['option']}", point, xytext=offset, textcoords="offset points",
                    fontsize="small", arrowprops={"arrowstyle": "-", "color": "0.5"})  # fmt: skip
