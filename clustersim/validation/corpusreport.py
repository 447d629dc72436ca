"""The validation's printed report: error per engine x GPU x metric, the corpus it ran, what it skipped.

Each row counts once per kind of metric (throughput, TTFT, TPOT/ITL, E2E), by the first metric of that
kind it publishes (:data:`clustersim.validation.runcorpus.METRIC_KINDS`: the mean before the median
before p99, output tokens/s before total tokens/s before requests/s; the median first for a run of
under :data:`clustersim.validation.runcorpus.FEW_REQUESTS` requests), so a page that prints three
throughputs of one run does not weigh three times.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from clustersim.validation.corpusfit import FRONTEND_KINDS, FitParam
from clustersim.validation.runcorpus import METRIC_KINDS, Comparison, RowOutcome

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TRT-LLM"}


@dataclass(frozen=True)
class ErrorCell:
    """The error of one group of scored comparisons."""

    num_rows: int
    mape_pct: float
    bias_pct: float
    max_pct: float


def error_cell(found: Iterable[Comparison]) -> ErrorCell:
    errors = [c.error_pct for c in found]
    absolute = [abs(e) for e in errors]
    return ErrorCell(len(errors), sum(absolute) / len(errors), sum(errors) / len(errors), max(absolute))


def grouped(found: Sequence[Comparison], by_gpu: bool) -> dict[tuple[str, str, str], ErrorCell]:
    """Scored comparisons grouped by engine, GPU (or ``all``) and kind of metric."""
    groups: dict[tuple[str, str, str], list[Comparison]] = defaultdict(list)
    for c in found:
        if c.scored:
            groups[(c.row.engine, c.row.gpu if by_gpu else "all", c.kind)].append(c)
    return {key: error_cell(items) for key, items in sorted(groups.items())}


def error_table(found: Sequence[Comparison], by_gpu: bool = True) -> str:
    """A Markdown table: engine, GPU, then rows / MAPE / bias for each kind of metric."""
    cells = grouped(found, by_gpu)
    keys = sorted({(engine, gpu) for engine, gpu, _ in cells})
    header = "| engine | GPU | " + " | ".join(f"{kind} rows | MAPE % | bias %" for kind in METRIC_KINDS) + " |"
    lines = [header, "|" + "---|" * (2 + 3 * len(METRIC_KINDS))]
    for engine, gpu in keys:
        parts = [ENGINE_NAMES.get(engine, engine), gpu]
        for kind in METRIC_KINDS:
            cell = cells.get((engine, gpu, kind))
            parts += (
                ["0", "-", "-"]
                if cell is None
                else [str(cell.num_rows), f"{cell.mape_pct:.1f}", f"{cell.bias_pct:+.1f}"]
            )
        lines.append("| " + " | ".join(parts) + " |")
    return "\n".join(lines)


def moved_table(earlier: Sequence[tuple[str, str, float]], found: Sequence[Comparison]) -> str:
    """A Markdown table per engine and kind of metric: the MAPE of an earlier run's scored comparisons
    (``earlier``: engine, kind, error % of each), this run's, and the change in percentage points (how
    far a fit continued with ``--start-from`` moved the cross-validated error)."""
    errors: dict[tuple[str, str], list[float]] = defaultdict(list)
    for engine, kind, error_pct in earlier:
        errors[(engine, kind)].append(abs(error_pct))
    before = {key: sum(values) / len(values) for key, values in errors.items()}
    lines = ["| engine | metric | rows | earlier MAPE % | MAPE % | change (points) |", "|---|---|---|---|---|---|"]
    for (engine, _, kind), cell in grouped(found, by_gpu=False).items():
        then = before.get((engine, kind))
        shown, change = ("-", "-") if then is None else (f"{then:.1f}", f"{cell.mape_pct - then:+.1f}")
        name = ENGINE_NAMES.get(engine, engine)
        lines.append(f"| {name} | {kind} | {cell.num_rows} | {shown} | {cell.mape_pct:.1f} | {change} |")
    return "\n".join(lines)


def corpus_summary(outcomes: Sequence[RowOutcome]) -> str:
    """One paragraph: rows, publishers, engines, GPUs, models; simulated, skipped, failed."""
    counts = Counter(o.status for o in outcomes)
    simulated = [o.row for o in outcomes if o.status == "simulated"]

    def names(values: Iterable[str]) -> str:
        return ", ".join(sorted(set(values)))

    head = (
        f"{len(outcomes)} rows from {len({o.row.publisher for o in outcomes})} publishers "
        f"({names(o.row.publisher for o in outcomes)}); {counts['simulated']} simulated, "
        f"{counts['skipped']} not simulated, {counts['failed']} failed."
    )
    if not simulated:
        return head
    return (
        f"{head} Simulated: engines {names(ENGINE_NAMES.get(r.engine, r.engine) for r in simulated)}; "
        f"GPUs {names(r.gpu for r in simulated)}; {len({r.model for r in simulated})} models."
    )


def skipped_table(outcomes: Sequence[RowOutcome]) -> str:
    """Why rows were not simulated (or failed), with how many rows each reason covers."""
    reasons = Counter((o.status, o.reason) for o in outcomes if o.status != "simulated")
    if not reasons:
        return "Every row was simulated."
    lines = ["| status | reason | rows |", "|---|---|---|"]
    for (status, reason), count in sorted(reasons.items(), key=lambda item: (-item[1], item[0])):
        lines.append(f"| {status} | {reason.replace('|', '/')} | {count} |")
    return "\n".join(lines)


def rows_table(found: Sequence[Comparison]) -> str:
    """Every scored comparison: row, setting, metric, published, predicted, error (Markdown)."""
    lines = ["| row | setting | metric | published | predicted | error % |", "|---|---|---|---|---|---|"]
    for c in sorted(found, key=lambda c: (c.row.engine, c.row.gpu, c.row.row_id, c.metric)):
        if c.scored:
            lines.append(
                f"| {c.row.row_id} | {c.row.setting()} | {c.metric} | {c.published:.4g} | {c.predicted:.4g} | "
                f"{c.error_pct:+.1f} |"
            )
    return "\n".join(lines)


def fit_table(params: Sequence[FitParam], values: Sequence[float], num_rows: dict[str, int]) -> str:
    """The fitted scales: engine, what they scale, GPU family, value, rows they rest on (Markdown).

    A front-end term is a time (seconds in the profile), written in milliseconds.
    """
    lines = ["| engine | scale | GPU family | value | rows |", "|---|---|---|---|---|"]
    for param, value in zip(params, values, strict=True):
        engine, family = param.engine or "all", param.family or "all"
        shown = f"{value * 1e3:.2f} ms" if param.kind in FRONTEND_KINDS else f"{value:.3f}"
        lines.append(f"| {engine} | {param.kind} | {family} | {shown} | {num_rows[param.label]} |")
    return "\n".join(lines)
