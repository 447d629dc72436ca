"""What ``clustersim sweep`` prints: one line per point as it settles, and the table of variants
(each figure the mean over seeds, ``+-`` the half-width of its 95% interval when there are several)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

# (label, metric of points.parquet, scale)
TABLE_METRICS: tuple[tuple[str, str, float], ...] = (
    ("TTFT p99 ms", "ttft_p99_s", 1e3),
    ("TPOT p99 ms", "tpot_p99_s", 1e3),
    ("ITL p99 ms", "itl_p99_s", 1e3),
    ("out tok/s", "output_tokens_per_s", 1.0),
    ("SLO met %", "slo_attainment_frac", 100.0),
    ("$/M out tok", "cost_usd_per_m_output_tokens", 1.0),
)


def number(value: float) -> str:
    """A figure with three significant digits or one decimal, whichever is longer."""
    if abs(value) >= 100:
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.2f}"


def with_interval(mean: Any, low: Any, high: Any, scale: float) -> str:
    """``mean`` (scaled), with ``± half-width`` (to the mean's decimals) when the interval is known."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    text = number(mean * scale)
    if low is not None and high is not None and not math.isnan(low) and not math.isnan(high):
        if "e" not in text and abs(mean * scale) < 10:  # keep the third significant digit (0.400, not 0.4)
            text = f"{mean * scale:#.3g}".rstrip(".")
        decimals = len(text.partition(".")[2]) if "e" not in text else 3
        text += f" ± {(high - low) / 2 * scale:.{decimals}f}"
    return text


def stats_markdown(stats: pa.Table, axis_columns: Sequence[str]) -> str:
    """The variants as a Markdown table: axes, seeds that ran, the SLO verdict, the main figures."""
    rows = stats.to_pylist()
    names = set(stats.column_names)
    metrics = [m for m in TABLE_METRICS if f"{m[1]}_mean" in names]
    judged = any(row.get("slo_met_all_seeds") is not None for row in rows)
    header = [*axis_columns, "seeds ok", *(["SLO (all seeds)"] if judged else []), *(m[0] for m in metrics)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [str(row[c]) for c in axis_columns]
        cells.append(f"{row['num_ok']}/{row['num_seeds']}")
        if judged:
            verdict = row.get("slo_met_all_seeds")
            cells.append("-" if verdict is None else "met" if verdict else "missed")
        for _, metric, scale in metrics:
            cells.append(with_interval(row.get(f"{metric}_mean"), row.get(f"{metric}_ci_low"),
                                       row.get(f"{metric}_ci_high"), scale))  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
