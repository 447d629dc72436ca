"""Run one scenario under several variants and tabulate the metrics a capacity planner compares.

``--vary path=v1,v2`` runs every value (and the cartesian product over several ``--vary``); values
are YAML, split on top-level commas, so ``--vary 'scheduler.ordering={kind: fcfs},{kind: priority}'``
works. Runs go to ``OUT/<variant>/`` and can run in parallel processes.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustersim.config.loader import load_scenario
from clustersim.errors import ConfigError, did_you_mean
from clustersim.outdir import MAX_NAME_CHARS, new_default_folder, safe_name, unique_names
from clustersim.runner import run_scenario
from clustersim.runplan import plan_run

COLUMNS = (
    ("variant", "variant", None),
    ("completed", "num_requests.completed", None),
    ("rejected", "num_requests.rejected", None),
    ("TTFT p50 ms", "ttft_s.p50", 1e3),
    ("TTFT p99 ms", "ttft_s.p99", 1e3),
    ("TPOT p50 ms", "tpot_s.p50", 1e3),
    ("TPOT p99 ms", "tpot_s.p99", 1e3),
    ("ITL p50 ms", "itl_s.p50", 1e3),
    ("ITL p99 ms", "itl_s.p99", 1e3),
    ("ITL max ms", "itl_s.max", 1e3),
    ("max ITL p99 ms", "max_itl_s.p99", 1e3),
    ("E2E p99 s", "e2e_s.p99", 1.0),
    ("out tok/s", "output_tokens_per_s", 1.0),
    ("SLO met %", "slo.attainment_frac", 100.0),
    ("mean batch", "replicas.mean_batch_seqs", 1.0),
    ("busy %", "replicas.mean_busy_frac", 100.0),
    ("preemptions", "replicas.num_preemptions", None),
    ("KV stored %", "kv.stored_frac", 100.0),
    ("KV waste %", "kv.waste_frac", 100.0),
    ("KV stored of used %", "kv.stored_of_used_frac", 100.0),
    ("prefix hit %", "kv.prefix_hit_rate", 100.0),
)
# with a measurement window (the scenario's metrics): how many requests the row's figures are over
WINDOW_LABEL, WINDOW_KEY = "measured", "window.num_measured"


@dataclass(frozen=True)
class Variant:
    """One combination of overrides, named after its values."""

    name: str
    overrides: tuple[str, ...]


def split_values(text: str) -> list[str]:
    """Split ``a,b,{c: 1, d: 2}`` on commas outside brackets and braces."""
    values, depth, current = [], 0, ""
    for char in text:
        if char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        if char == "," and depth == 0:
            values.append(current.strip())
            current = ""
        else:
            current += char
    values.append(current.strip())
    return [v for v in values if v]


def variants(vary: Sequence[str]) -> list[Variant]:
    """The cartesian product of every ``path=v1,v2,...`` in ``vary``."""
    axes: list[list[tuple[str, str]]] = []
    for item in vary:
        path, sep, text = item.partition("=")
        if not sep or not path.strip() or not split_values(text):
            raise ConfigError("--vary", item, "expected path=value1,value2,...")
        axes.append([(path.strip(), value) for value in split_values(text)])
    combos = list(itertools.product(*axes))
    names = unique_names(
        ",".join(safe_name(value, "value") for _, value in combo)[:MAX_NAME_CHARS] or "base" for combo in combos
    )
    return [
        Variant(name, tuple(f"{path}={value}" for path, value in combo))
        for name, combo in zip(names, combos, strict=True)
    ]


def _run_variant(scenario_path: Path, overrides: tuple[str, ...], out_dir: Path) -> dict[str, Any]:
    return run_scenario(load_scenario(scenario_path, overrides), out_dir).summary


def _lookup(summary: dict[str, Any], dotted: str) -> Any:
    node: Any = summary
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def compare(
    scenario_path: Path, vary: Sequence[str], base_overrides: Sequence[str], out_dir: Path | None, jobs: int
) -> tuple[list[dict[str, Any]], Path]:
    """Run every variant (``jobs`` at a time) into ``out_dir/<variant>/`` (None: a new folder
    ``runs/compare-<scenario>-<time>``); returns one table row per variant, in order, and the folder."""
    todo = variants(vary)
    for variant in todo:  # validate (and resolve against the catalogue) every variant before running any
        plan_run(load_scenario(scenario_path, (*base_overrides, *variant.overrides)))
    if out_dir is None:
        out_dir = new_default_folder(f"compare-{scenario_path.stem}")
    args = [(scenario_path, (*base_overrides, *v.overrides), out_dir / v.name) for v in todo]
    if jobs > 1 and len(args) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            summaries = list(pool.map(_run_variant, *zip(*args, strict=True)))
    else:
        summaries = [_run_variant(*a) for a in args]
    rows = []
    for variant, summary in zip(todo, summaries, strict=True):
        row: dict[str, Any] = {"variant": variant.name}
        for label, key, scale in COLUMNS[1:]:
            value = _lookup(summary, key)
            row[label] = value * scale if value is not None and scale is not None else value
        if "window" in summary:
            row[WINDOW_LABEL] = _lookup(summary, WINDOW_KEY)
        rows.append(row)
    return rows, out_dir


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """The rows as CSV: every column, and ``measured`` second when a variant has a measurement window."""
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = [c[0] for c in COLUMNS]
    if any(WINDOW_LABEL in row for row in rows):
        labels.insert(1, WINDOW_LABEL)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=labels)
        writer.writeheader()
        writer.writerows(rows)


def select_columns(text: str | None) -> list[str]:
    """The table's columns: all, or those named (``variant`` always first)."""
    labels = [c[0] for c in COLUMNS]
    if not text:
        return labels
    labels.append(WINDOW_LABEL)
    chosen = [label.strip() for label in text.split(",") if label.strip()]
    for label in chosen:
        if label not in labels:
            raise ConfigError("--columns", "", f"unknown column '{label}'{did_you_mean(label, labels)}")
    return ["variant", *(label for label in chosen if label != "variant")]


def format_markdown(rows: list[dict[str, Any]], labels: Sequence[str] | None = None) -> str:
    """The comparison as a Markdown table (all columns, or ``labels``)."""
    labels = list(labels) if labels is not None else [c[0] for c in COLUMNS]
    lines = ["| " + " | ".join(labels) + " |", "|" + "---|" * len(labels)]
    for row in rows:
        cells = []
        for label in labels:
            value = row.get(label)  # None: a column a variant lacks (measured, without a window)
            if value is None:
                cells.append("-")
            elif isinstance(value, float):
                cells.append(f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}")
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
