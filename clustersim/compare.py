"""``clustersim compare``: a one-line spelling of a sweep, printed as a table a capacity planner reads.

``--vary path=v1,v2`` is one grid axis (several ``--vary`` make the cartesian product); values are
YAML, split on top-level commas, so ``--vary 'scheduler.ordering={kind: fcfs},{kind: priority}'``
works. It runs as a sweep into ``OUT`` (``points.parquet``, ``stats.parquet``, the run folders and
the logs as datasets: see :mod:`clustersim.sweeps.store`), one seed: the scenario's.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clustersim.config.loader import load_scenario
from clustersim.config.yamlsafe import parse_yaml
from clustersim.errors import ConfigError, did_you_mean
from clustersim.outdir import MAX_NAME_CHARS, safe_name, unique_names
from clustersim.sweeps import SweepResult, run_sweep, sweep_from_mapping
from clustersim.sweeps.execute import OnPoint, OnStart
from clustersim.sweeps.spec import RESERVED_NAMES
from clustersim.sweeps.store import run_dir
from clustersim.sweeps.worker import flatten_summary

# (label as printed, column of points.parquet, scale)
COLUMNS: tuple[tuple[str, str, float | None], ...] = (
    ("variant", "variant", None),
    ("completed", "num_requests_completed", None),
    ("rejected", "num_requests_rejected", None),
    ("lost", "num_requests_lost", None),
    ("retried", "faults_num_requests_retried", None),
    ("up %", "faults_availability_frac", 100.0),
    ("replicas", "autoscaler_mean_replicas_provisioned", 1.0),
    ("GPU-h", "autoscaler_provisioned_gpu_hours", 1.0),
    ("GPU-h saved %", "autoscaler_gpu_hours_saved_frac", 100.0),
    ("prefill replicas", "autoscaler_pools_prefill_mean_replicas_provisioned", 1.0),
    ("decode replicas", "autoscaler_pools_decode_mean_replicas_provisioned", 1.0),
    ("decode wait p99 ms", "disaggregation_decode_wait_s_p99", 1e3),
    ("link wait p99 ms", "disaggregation_link_wait_s_p99", 1e3),
    ("KV transfer p99 ms", "disaggregation_transfer_s_p99", 1e3),
    ("prefill busy %", "disaggregation_prefill_pool_mean_busy_frac", 100.0),
    ("decode busy %", "disaggregation_decode_pool_mean_busy_frac", 100.0),
    ("TTFT p50 ms", "ttft_p50_s", 1e3),
    ("TTFT p99 ms", "ttft_p99_s", 1e3),
    ("TPOT p50 ms", "tpot_p50_s", 1e3),
    ("TPOT p99 ms", "tpot_p99_s", 1e3),
    ("ITL p50 ms", "itl_p50_s", 1e3),
    ("ITL p99 ms", "itl_p99_s", 1e3),
    ("ITL max ms", "itl_max_s", 1e3),
    ("max ITL p99 ms", "max_itl_p99_s", 1e3),
    ("E2E p99 s", "e2e_p99_s", 1.0),
    ("out tok/s", "output_tokens_per_s", 1.0),
    ("SLO met %", "slo_attainment_frac", 100.0),
    ("mean batch", "replicas_mean_batch_seqs", 1.0),
    ("busy %", "replicas_mean_busy_frac", 100.0),
    ("preemptions", "replicas_num_preemptions", None),
    ("KV stored %", "kv_stored_frac", 100.0),
    ("KV waste %", "kv_waste_frac", 100.0),
    ("KV stored of used %", "kv_stored_of_used_frac", 100.0),
    ("prefix hit %", "kv_prefix_hit_rate", 100.0),
    ("GPUs", "num_gpus", None),
    ("$/h", "cost_usd_per_hour", 1.0),
    ("$/M out tok", "cost_usd_per_m_output_tokens", 1.0),
)
# with a measurement window (the scenario's metrics): how many requests the row's figures are over
WINDOW_LABEL, WINDOW_KEY = "measured", "window_num_measured"
# shown when asked for by --columns
DEFAULT_HIDDEN = (
    *("lost", "retried", "up %", "replicas", "GPU-h", "GPU-h saved %", "prefill replicas", "decode replicas"),
    *("decode wait p99 ms", "link wait p99 ms", "KV transfer p99 ms", "prefill busy %", "decode busy %"),
    *("GPUs", "$/h", "$/M out tok"),
)


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


def parse_vary(vary: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Each ``path=value1,value2,...`` as (path, the values' texts)."""
    axes = []
    for item in vary:
        path, sep, text = item.partition("=")
        if not sep or not path.strip() or not split_values(text):
            raise ConfigError("--vary", item, "expected path=value1,value2,...")
        axes.append((path.strip(), split_values(text)))
    return axes


def variant_names(axes: list[tuple[str, list[str]]]) -> list[str]:
    """The table's variant names: the values joined by commas, made distinct."""
    combos = itertools.product(*(texts for _, texts in axes))
    return unique_names(
        ",".join(safe_name(value, "value") for value in combo)[:MAX_NAME_CHARS] or "base" for combo in combos
    )


def _axis_names(axes: list[tuple[str, list[str]]]) -> list[str]:
    """Each axis's name: the last part of its path, or as many last parts as tell it from the others
    (``cluster.groups.0.count`` and ``cluster.groups.1.count`` are ``groups_0_count`` and ``groups_1_count``)."""
    paths = [path.split(".") for path, _ in axes]
    depth = [1] * len(paths)

    def stem(index: int) -> str:
        text = "".join(c if c.isalnum() or c == "_" else "_" for c in "_".join(paths[index][-depth[index] :]))
        return (text[:30] if depth[index] == 1 else text[-30:].strip("_")) or "axis"

    while True:
        names = [stem(i) for i in range(len(paths))]
        clashing = [
            i for i, n in enumerate(names) if (names.count(n) > 1 or n[0].isdigit()) and depth[i] < len(paths[i])
        ]
        if not clashing:
            break
        for i in clashing:
            depth[i] += 1
    names = [f"{n}_value" if n[0].isdigit() or n in RESERVED_NAMES else n for n in names]
    return [name.replace("-", "_") for name in unique_names(names)]


def sweep_of(path: Path, vary: Sequence[str], base_overrides: Sequence[str]) -> dict[str, Any]:
    """The sweep ``compare`` runs, as a mapping."""
    axes = parse_vary(vary)
    shared = {}
    for item in base_overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--set", item, "expected path=value")
        shared[key.strip()] = parse_yaml(text, f"--set {key.strip()}")
    return {
        "name": f"compare-{path.stem}",
        "base": str(path),
        "set": shared,
        "axes": [
            {"path": axis_path, "name": name, "values": [parse_yaml(t, f"--vary {axis_path}") for t in texts],
             "labels": texts}
            for (axis_path, texts), name in zip(axes, _axis_names(axes), strict=True)
        ],
    }  # fmt: skip


def compare(
    scenario_path: Path,
    vary: Sequence[str],
    base_overrides: Sequence[str],
    out_dir: Path | None,
    jobs: int | None,
    on_start: OnStart | None = None,
    on_point: OnPoint | None = None,
    tenant: str | None = None,
) -> tuple[list[dict[str, Any]], SweepResult]:
    """Run every variant (``jobs`` at a time) as a sweep into ``out_dir`` (None: a new folder
    ``runs/sweep-compare-<scenario>-<time>``); returns one table row per variant, in order, and the
    sweep (a failed variant's row has only its name and ``error``). With ``tenant``, the request
    counts, latencies and token rates are that tenant's (the summary's ``tenants`` block)."""
    spec = sweep_from_mapping(sweep_of(scenario_path, vary, base_overrides), "--vary")
    if tenant is not None:
        names = [t.name for t in load_scenario(scenario_path, list(base_overrides)).scenario.workload.tenants]
        if tenant not in names:
            raise ConfigError(
                "--tenant", "", f"no tenant '{tenant}'{did_you_mean(tenant, names)}; the tenants: {', '.join(names)}"
            )
    result = run_sweep(spec, scenario_path, out_dir, source="--vary", jobs=jobs, on_start=on_start, on_point=on_point)
    rows = []
    for name, point, row in zip(variant_names(parse_vary(vary)), result.points, result.rows, strict=True):
        out: dict[str, Any] = {"variant": name}
        if row.get("status") != "ok":
            out["error"] = row.get("error") or "not run"
            rows.append(out)
            continue
        if tenant is not None:
            row = {**row, **tenant_columns(run_dir(result.out_dir, point) / "summary.json", tenant)}
        for label, key, scale in COLUMNS[1:]:
            value = row.get(key)
            out[label] = value * scale if value is not None and scale is not None else value
        if WINDOW_KEY in row:
            out[WINDOW_LABEL] = row[WINDOW_KEY]
        rows.append(out)
    return rows, result


def tenant_columns(summary_path: Path, tenant: str) -> dict[str, Any]:
    """One tenant's figures of a run, as the columns of ``points.parquet`` name the run's own."""
    tenants = json.loads(summary_path.read_text(encoding="utf-8")).get("tenants", {})
    return flatten_summary(tenants[tenant]) if tenant in tenants else {}


def select_columns(text: str | None) -> list[str]:
    """The table's columns: the usual ones, or those named (``variant`` always first)."""
    labels = [c[0] for c in COLUMNS]
    if not text:
        return [label for label in labels if label not in DEFAULT_HIDDEN]
    labels.append(WINDOW_LABEL)
    chosen = [label.strip() for label in text.split(",") if label.strip()]
    for label in chosen:
        if label not in labels:
            raise ConfigError("--columns", "", f"unknown column '{label}'{did_you_mean(label, labels)}")
    return ["variant", *(label for label in chosen if label != "variant")]


def format_markdown(rows: list[dict[str, Any]], labels: Sequence[str] | None = None) -> str:
    """The comparison as a Markdown table (the usual columns, or ``labels``)."""
    labels = list(labels) if labels is not None else select_columns(None)
    lines = ["| " + " | ".join(labels) + " |", "|" + "---|" * len(labels)]
    for row in rows:
        cells = []
        for label in labels:
            value = row.get(label)  # None: a column a variant lacks (measured, without a window; a failed one)
            if value is None:
                cells.append("-")
            elif isinstance(value, float):
                cells.append(f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}")
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
