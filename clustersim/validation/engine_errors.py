"""Published end-to-end rows summarised per engine and kind of metric (pure).

Capacity planners ask "how far off is the model for the engine I run?", per figure they plan on:
throughput, time to first token, time per output token (or inter-token latency) and end-to-end
latency. Rows outside their scored set (the MLPerf logs' mean TTFT/TPOT, marked ``info``) count in
the "all" column only.
"""

from __future__ import annotations

from collections.abc import Sequence

from clustersim.validation.published import Comparison

METRIC_KINDS = {
    "tokens_per_s": "throughput",
    "completed_tokens_per_s": "throughput",
    "output_tokens_per_s": "throughput",
    "request_throughput": "throughput",
    "ttft": "TTFT",
    "mean_ttft": "TTFT",
    "mean_tpot": "TPOT/ITL",
    "mean_e2e_latency": "E2E latency",
}


def engine_family(engine: str) -> str:
    """The engine a published row ran, as the table groups it (TensorRT-LLM, vLLM, vLLM-ROCm ...)."""
    return engine.replace(" static", "")


def format_engine_errors(comparisons: Sequence[Comparison]) -> str:
    """Mean absolute percentage error per engine and kind of metric: scored rows, and all rows."""
    groups: dict[tuple[str, str], list[Comparison]] = {}
    for c in comparisons:
        kind = METRIC_KINDS.get(c.row.metric, c.row.metric)
        groups.setdefault((engine_family(c.row.engine), kind), []).append(c)
    lines = [f"{'engine':<14} {'metric':<12} {'rows':>4} {'MAPE %':>7} {'max %':>6}  {'all rows':>8} {'MAPE %':>7}"]
    for (engine, kind), members in sorted(groups.items()):
        scored = [c for c in members if "/" not in c.row.row_id]
        every = [abs(c.error_pct) for c in members]
        if scored:
            errors = [abs(c.error_pct) for c in scored]
            head = f"{len(scored):>4} {sum(errors) / len(errors):>7.1f} {max(errors):>6.1f}"
        else:
            head = f"{0:>4} {'-':>7} {'-':>6}"
        lines.append(f"{engine:<14} {kind:<12} {head}  {len(every):>8} {sum(every) / len(every):>7.1f}")
    return "\n".join(lines)
