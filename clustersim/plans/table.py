"""A plan's tables: the options ranked by price (``plan.parquet``, ``plan.md``) and every
evaluation the searches ran (``evaluations.parquet``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from clustersim.plans.spec import PlanSpec
from clustersim.sweeps.printout import with_interval

if TYPE_CHECKING:
    from clustersim.plans.execute import OptionAnswer

METRIC_LABELS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "ITL", "e2e_s": "E2E"}


def _percentile_name(metric: str, percentile: float) -> str:
    return f"{metric.removesuffix('_s')}_p{percentile:g}_s"


def _figures(stats: dict[str, Any], spec: PlanSpec) -> dict[str, Any]:
    """The SLO metrics at the percentile and the cost, each as mean and 95% interval."""
    percentile = spec.slo.percentile
    out: dict[str, Any] = {}
    sources = {}
    if percentile is not None:
        sources = {_percentile_name(m, percentile): f"slo_percentile_{m}" for m in spec.slo.targets()}
    sources.update(
        {
            "cost_usd_per_m_output_tokens": "cost_usd_per_m_output_tokens",
            "output_tokens_per_s": "output_tokens_per_s",
            "slo_attainment_frac": "slo_attainment_frac",
        }
    )
    for name, source in sources.items():
        for part in ("mean", "ci_low", "ci_high"):
            out[f"{name}_{part}"] = stats.get(f"{source}_{part}")
    return out


def plan_table(spec: PlanSpec, answers: list[OptionAnswer]) -> pa.Table:
    """One row per option, cheapest answer first (per hour, then per million output tokens, then the
    most headroom: the highest sustained rate); options without an answer last, with the reason."""
    rows = []
    for item in answers:
        stats = item.answer.stats if item.answer is not None else {}
        rows.append(
            {
                "option": item.option.name,
                "hardware": item.hardware,
                "num_replicas": item.replicas.num_replicas,
                "num_prefill_replicas": item.replicas.split[0] if item.replicas.split else None,
                "num_decode_replicas": item.replicas.split[1] if item.replicas.split else None,
                "num_gpus": _int(stats.get("num_gpus_mean")),
                "cost_usd_per_hour": stats.get("cost_usd_per_hour_mean"),
                **_figures(stats, spec),
                "slo_met_seeds_frac": stats.get("slo_met_seeds_frac"),
                "max_rate_per_s": item.max_rate_per_s,
                "num_evaluations": len(item.evaluations),
                "reason": item.replicas.reason,
            }
        )
    rows.sort(key=_rank_key)
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank if row["num_replicas"] is not None else None
    table = pa.Table.from_pylist(rows)
    return table.select(["rank", *(n for n in table.column_names if n != "rank")])


def _int(value: Any) -> int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(value)


def _rank_key(row: dict[str, Any]) -> tuple[int, float, float, float]:
    if row["num_replicas"] is None:
        return (1, 0.0, 0.0, 0.0)
    per_hour = row["cost_usd_per_hour"] if row["cost_usd_per_hour"] is not None else math.inf
    per_token = row["cost_usd_per_m_output_tokens_mean"]
    headroom = -row["max_rate_per_s"] if row["max_rate_per_s"] is not None else 0.0
    return (0, per_hour, per_token if per_token is not None else math.inf, headroom)


def evaluations_table(spec: PlanSpec, answers: list[OptionAnswer], target_rate_per_s: float) -> pa.Table:
    """Every evaluation: option, hardware, replicas, offered rate, verdict, figures (for the frontier)."""
    rows = []
    for item in answers:
        for evaluation in item.evaluations:
            stats = evaluation.stats
            rows.append(
                {
                    "option": item.option.name,
                    "hardware": item.hardware,
                    "num_replicas": evaluation.num_replicas,
                    "num_prefill_replicas": evaluation.split[0] if evaluation.split else None,
                    "num_decode_replicas": evaluation.split[1] if evaluation.split else None,
                    "rate_per_s": target_rate_per_s * evaluation.rate_factor,
                    "slo_met": evaluation.met,
                    "error": evaluation.error,
                    "num_gpus": _int(stats.get("num_gpus_mean")),
                    "cost_usd_per_hour": stats.get("cost_usd_per_hour_mean"),
                    **_figures(stats, spec),
                    "slo_met_seeds_frac": stats.get("slo_met_seeds_frac"),
                }
            )
    return pa.Table.from_pylist(rows) if rows else pa.table({"option": pa.array([], pa.string())})


def format_plan_markdown(spec: PlanSpec, table: pa.Table, target_rate_per_s: float) -> str:
    """The ranked options as a Markdown table."""
    percentile = spec.slo.percentile
    metrics = list(spec.slo.targets()) if percentile is not None else []
    header = ["rank", "option", "replicas", "GPUs", "$/h", "$/M out tok"]
    header += [f"{METRIC_LABELS[m]} p{percentile:g} ms" for m in metrics]
    header += ["SLO met %"] if spec.min_attainment_frac is not None else []
    header += ["seeds met"] + (["max rate req/s"] if spec.max_rate is not None else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table.to_pylist():
        if row["num_replicas"] is None:
            cells = ["-", row["option"], f"none: {row['reason']}"] + ["-"] * (len(header) - 3)
            lines.append("| " + " | ".join(cells) + " |")
            continue
        replicas = str(row["num_replicas"])
        if row.get("num_prefill_replicas") is not None:
            replicas = f"{row['num_prefill_replicas']} prefill + {row['num_decode_replicas']} decode"
        cells = [str(row["rank"]), row["option"], replicas, str(row["num_gpus"])]
        cells.append("-" if row["cost_usd_per_hour"] is None else f"{row['cost_usd_per_hour']:.2f}")
        cells.append(_interval(row, "cost_usd_per_m_output_tokens", 1.0))
        cells += [_interval(row, _percentile_name(m, percentile), 1e3) for m in metrics if percentile is not None]
        if spec.min_attainment_frac is not None:
            cells.append(_interval(row, "slo_attainment_frac", 100.0))
        frac = row["slo_met_seeds_frac"]
        cells.append("-" if frac is None else f"{frac:.0%}")
        if spec.max_rate is not None:
            cells.append("-" if row["max_rate_per_s"] is None else f"{row['max_rate_per_s']:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _interval(row: dict[str, Any], name: str, scale: float) -> str:
    return with_interval(row.get(f"{name}_mean"), row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high"), scale)
