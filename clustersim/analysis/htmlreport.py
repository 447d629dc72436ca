"""``clustersim report DIR``: the figures of a run, a sweep or a plan, and one self-contained
``report.html`` (the figures embedded as PNG, the tables, the scenario, sweep or plan file).

Every figure that cannot be drawn is named with the reason (a sweep without a rate axis has no
latency-throughput curve); nothing in the page is fetched from elsewhere, and every text is escaped.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from clustersim.analysis.crossrun import CAPTIONS, Plot, plan_figures, sweep_figures
from clustersim.analysis.figures import figures_for
from clustersim.analysis.rundata import RunDirError, load_run
from clustersim.analysis.style import save, theme
from clustersim.analysis.sweepdata import PlanData, SweepData, load_plan_dir, load_sweep_dir
from clustersim.sweeps.printout import stats_markdown


@dataclass
class Report:
    """What a report holds: its title, figures by file name, skipped figures with reasons, tables, a file."""

    title: str
    kind: str
    figures: dict[str, Plot] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    tables: dict[str, str] = field(default_factory=dict)  # caption -> HTML
    source_name: str = ""
    source_text: str = ""


def folder_kind(folder: Path) -> str:
    """``plan``, ``sweep`` or ``run``, by the files the folder holds."""
    if (folder / "plan.parquet").is_file():
        return "plan"
    if (folder / "points.parquet").is_file():
        return "sweep"
    return "run"


def run_report(folder: Path) -> Report:
    run = load_run(folder)
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
    report = Report(f"run {run.title}", "run")
    for name, plot in figures_for(run).items():
        report.figures[name] = lambda plot=plot: plot(run)  # type: ignore[misc]
    if "kv_memory.png" not in report.figures:
        report.skipped["kv_memory.png"] = "the run has no memory.parquet"
    if "requests_gantt.png" not in report.figures:
        report.skipped["requests_gantt.png"] = "more than 60 requests (one bar each would not be readable)"
    report.tables["summary"] = _summary_html(summary)
    metadata = pq.read_schema(folder / "requests.parquet").metadata or {}
    report.source_name, report.source_text = "scenario (resolved, JSON)", _pretty(metadata.get(b"clustersim.scenario"))
    return report


def sweep_report(folder: Path) -> Report:
    data = load_sweep_dir(folder)
    report = Report(f"sweep {data.name}", "sweep", source_name="sweep.yaml", source_text=data.spec_text)
    report.figures, report.skipped = sweep_figures(data)
    report.tables["variants (mean ± half-width of the 95% interval over seeds)"] = _stats_html(data)
    failed = data.points[data.points["status"] != "ok"]
    if len(failed):
        report.tables["points that did not run"] = _frame_html(failed[["label", "status", "error"]])
    return report


def plan_report(folder: Path) -> Report:
    data = load_plan_dir(folder)
    report = Report(f"plan {data.name}", "plan", source_name="plan.yaml", source_text=data.spec_text)
    report.figures, report.skipped = plan_figures(data)
    markdown = folder / "plan.md"
    report.tables["the options, ranked"] = _markdown_table_html(markdown.read_text(encoding="utf-8")) if (
        markdown.is_file()) else _frame_html(data.plan)  # fmt: skip
    report.tables["every evaluation"] = _evaluations_html(data)
    return report


def write_report(folder: Path, figures_dir: Path | None = None) -> tuple[Path, list[Path], dict[str, str]]:
    """Write the folder's figures and ``report.html``; return the page, the figures and the skipped ones."""
    if not folder.is_dir():
        raise RunDirError(folder, "no such folder")
    kind = folder_kind(folder)
    if kind == "run" and not any((folder / name).exists() for name in ("requests.parquet", "INCOMPLETE")):
        hint = " (a sweep that stopped before its tables? run it again: finished points are reused)" if (
            (folder / "runs").is_dir()) else ""  # fmt: skip
        raise RunDirError(
            folder, f"not a run, sweep or plan folder: no requests.parquet, points.parquet or plan.parquet{hint}"
        )
    report = {"plan": plan_report, "sweep": sweep_report, "run": run_report}[kind](folder)
    target = figures_dir if figures_dir is not None else folder / "figures"
    written: list[Path] = []
    with theme():
        for name, plot in report.figures.items():
            written.append(save(plot(), target / name))
    page = folder / "report.html"
    partial = page.with_name(page.name + ".partial")
    partial.write_text(_page(report, written), encoding="utf-8")
    partial.replace(page)
    return page, written, report.skipped


def _page(report: Report, figures: list[Path]) -> str:
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(report.title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;"
        "text-align:right}th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee;margin:8px 0}"
        "pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px}</style></head><body>",
        f"<h1>{html.escape(report.title)}</h1>",
    ]
    for caption, table in report.tables.items():
        parts.append(f"<h2>{html.escape(caption)}</h2>{table}")
    parts.append("<h2>figures</h2>")
    for path in figures:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f"<h3>{html.escape(path.name)}</h3><img src=\"data:image/png;base64,{data}\" "
                     f"alt=\"{html.escape(path.stem)}\">")  # fmt: skip
        if path.name in CAPTIONS:
            parts.append(f"<p>{html.escape(CAPTIONS[path.name])}</p>")
    if report.skipped:
        items = "".join(f"<li>{html.escape(n)}: {html.escape(r)}</li>" for n, r in report.skipped.items())
        parts.append(f"<h2>figures not drawn</h2><ul>{items}</ul>")
    if report.source_text:
        parts.append(f"<h2>{html.escape(report.source_name)}</h2><pre>{html.escape(report.source_text)}</pre>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _frame_html(frame: pd.DataFrame) -> str:
    return str(frame.to_html(index=False, na_rep="-", float_format=lambda v: f"{v:.4g}", escape=True))


def _summary_html(summary: dict[str, object]) -> str:
    rows = [(key, value) for key, value in _flatten(summary) if not isinstance(value, list)]
    return _frame_html(pd.DataFrame(rows, columns=["figure", "value"]))


def _flatten(node: object, prefix: str = "") -> list[tuple[str, object]]:
    if isinstance(node, dict):
        return [item for key, value in node.items() for item in _flatten(value, f"{prefix}.{key}" if prefix else key)]
    return [(prefix, node)]


def _stats_html(data: SweepData) -> str:
    table = pq.read_table(data.folder / "stats.parquet")
    return _markdown_table_html(stats_markdown(table, data.axes))


def _evaluations_html(data: PlanData) -> str:
    wanted = [c for c in ("option", "hardware", "num_replicas", "rate_per_s", "slo_met", "slo_met_seeds_frac",
                          "num_gpus", "cost_usd_per_hour", "error") if c in data.evaluations]  # fmt: skip
    return _frame_html(data.evaluations[wanted])


def _markdown_table_html(markdown: str) -> str:
    """A Markdown pipe table (as the commands print) as an HTML table."""
    lines = [line for line in markdown.strip().splitlines() if line.startswith("|")]
    if len(lines) < 2:
        return f"<pre>{html.escape(markdown)}</pre>"
    cells = [[html.escape(c.strip()) for c in line.strip().strip("|").split("|")] for line in lines]
    head = "".join(f"<th>{c}</th>" for c in cells[0])
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in cells[2:])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pretty(raw: bytes | None) -> str:
    if raw is None:
        return ""
    try:
        return json.dumps(json.loads(raw), indent=2)
    except ValueError:
        return raw.decode("utf-8", errors="replace")
