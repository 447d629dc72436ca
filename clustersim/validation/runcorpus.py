"""Run the validation corpus: every simulable row's benchmark, in parallel, resumable, then compare.

.. code-block:: text

    OUT/scenarios/<row id>.yaml   the scenario each row ran (what to rerun by hand: ``clustersim run``)
    OUT/runs/<row id>/            its run (logs, summary.json, point.json)
    OUT/rows.parquet, .csv        one row per corpus row: simulated, skipped (why) or failed (the error)
    OUT/comparisons.parquet, .csv one row per published metric: published, predicted, signed error

A row whose run folder holds a finished run of the same scenario with the same profiles (the hashes
in its ``point.json``) is not run again, so an interrupted validation started again runs only what
is missing, and a changed profile re-runs every row.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from clustersim.config.catalogue import Catalogue
from clustersim.errors import ClusterSimError, one_line
from clustersim.outdir import claimed_folder
from clustersim.sweeps.backends import make_backend
from clustersim.sweeps.store import write_csv_atomically, write_table_atomically
from clustersim.sweeps.worker import POINT_FILE, PointTask, plan_point, scenario_sha256, write_point_file
from clustersim.validation.corpus import CorpusRow
from clustersim.validation.measure import measure_run, run_facts
from clustersim.validation.predict import RowTask, bounded_factor, task_of
from clustersim.validation.rowscenario import RowScenario, row_scenario, with_rate_factor

METRIC_KINDS: dict[str, tuple[str, ...]] = {  # kind -> metrics, the first published one scores the row
    "throughput": ("output_tok_per_s", "total_tok_per_s", "req_per_s"),
    "TTFT": ("ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms"),
    "TPOT/ITL": ("tpot_mean_ms", "itl_mean_ms", "tpot_p50_ms", "itl_p50_ms", "tpot_p99_ms", "itl_p99_ms"),
    "E2E": ("e2e_mean_ms", "e2e_p50_ms", "e2e_p99_ms"),
}
KIND_OF = {metric: kind for kind, metrics in METRIC_KINDS.items() for metric in metrics}
# A run of this few requests is scored on its medians: a mean over a handful of requests carries the first
# request's one-off warm-up. The SGLang cookbook's one-client rows (10 requests each) show it: on MI300X
# its chat and reasoning runs draw prompts from the same 1K distribution, yet their mean TTFTs are 558 and
# 157 ms and their medians 214 and 156 ms (chat's p99, its slowest request, 1,625 ms).
FEW_REQUESTS = 20


def metric_order(row: CorpusRow, kind: str) -> tuple[str, ...]:
    """The metrics of ``kind`` in the order they score ``row``: the first published one scores it."""
    metrics = METRIC_KINDS[kind]
    if kind == "throughput" or row.num_requests is None or row.num_requests >= FEW_REQUESTS:
        return metrics
    medians = tuple(m for m in metrics if "_p50_" in m)
    return medians + tuple(m for m in metrics if m not in medians)


OnRow = Callable[[CorpusRow, str], None]
SEARCH_VERSION = "2"  # part of a stored search's key: bump when the search itself changes


@dataclass(frozen=True)
class RowOutcome:
    """One corpus row after the run: ``status`` simulated, skipped or failed, and its figures."""

    row: CorpusRow
    status: str
    reason: str
    predicted: dict[str, float]
    facts: dict[str, Any]
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """Predicted vs published for one metric of one row (signed error: positive over-predicts)."""

    row: CorpusRow
    metric: str
    published: float
    predicted: float
    scored: bool  # the row's first published metric of its kind

    @property
    def kind(self) -> str:
        return KIND_OF[self.metric]

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.published) / self.published


def profiles_sha256(root: Path) -> str:
    """A hash of every profile file under ``root`` (a hardware_profiles folder)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.yaml")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _finished(run_dir: Path, sha: str) -> bool:
    try:
        record = json.loads((run_dir / POINT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    row = record.get("row") if isinstance(record, dict) else None
    return (
        isinstance(row, dict)
        and record.get("scenario_sha256") == sha
        and row.get("status") == "ok"
        and (run_dir / "summary.json").is_file()
        and (run_dir / "requests.parquet").is_file()
        and not (run_dir / "INCOMPLETE").exists()
    )


def _write_scenario(folder: Path, built: RowScenario) -> Path:
    assert built.mapping is not None
    path = folder / f"{built.row.row_id}.yaml"
    header = (
        f"# {built.row.row_id}: {built.row.setting()}\n# source: {built.row.source_url} ({built.row.source_where})\n"
    )
    header += "".join(f"# assumed: {a}\n" for a in built.assumptions)
    text = header + yaml.safe_dump(built.mapping, sort_keys=False)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def run_corpus(
    rows: Sequence[CorpusRow],
    out_dir: Path,
    *,
    jobs: int | None = None,
    catalogue_root: Path | None = None,
    on_row: OnRow | None = None,
) -> list[RowOutcome]:
    """Simulate every row (reusing finished runs) and return each row's outcome, in ``rows``' order."""
    root = catalogue_root or Catalogue.builtin().root
    catalogue = Catalogue(root)
    profiles_hash = profiles_sha256(root)
    outcomes: dict[int, RowOutcome] = {}
    with claimed_folder(out_dir):
        scenarios_dir, runs_dir = out_dir / "scenarios", out_dir / "runs"
        scenarios_dir.mkdir(exist_ok=True)
        tasks: list[PointTask] = []
        task_rows: list[tuple[int, RowScenario]] = []
        built_rows = [row_scenario(row, catalogue) for row in rows]
        factors = bounded_factors(built_rows, root, profiles_hash, out_dir / "searches", jobs)
        for index, row in enumerate(rows):
            built = at_bounded_rate(built_rows[index], factors.get(row.row_id))
            if built.mapping is None:
                outcomes[index] = RowOutcome(row, "skipped", built.skip_reason or "", {}, {})
                continue
            path = _write_scenario(scenarios_dir, built)
            run_dir = runs_dir / row.row_id
            try:
                plan = plan_point(str(path), (), str(root))
            except ClusterSimError as exc:
                outcomes[index] = RowOutcome(row, "failed", one_line(str(exc)), {}, {}, built.assumptions)
                continue
            sha = hashlib.sha256((scenario_sha256(plan) + profiles_hash).encode()).hexdigest()
            if _finished(run_dir, sha):
                outcomes[index] = _outcome(row, run_dir, built)
                continue
            task = PointTask(str(path), (), str(run_dir.resolve()), row.row_id, row.row_id, sha, {}, str(root))
            tasks.append(task)
            task_rows.append((index, built))
        for index, outcome in outcomes.items():
            if on_row is not None:
                on_row(rows[index], outcome.status)
        backend = make_backend("local", jobs, None, len(tasks))
        for task_index, point_row in backend.run(tasks):
            index, built = task_rows[task_index]
            run_dir = Path(tasks[task_index].run_dir)
            if point_row.get("status") == "ok":
                outcomes[index] = _outcome(built.row, run_dir, built)
            else:
                write_point_file(run_dir, tasks[task_index], point_row)
                error = str(point_row.get("error") or "failed")
                outcomes[index] = RowOutcome(built.row, "failed", error, {}, {}, built.assumptions)
            if on_row is not None:
                on_row(built.row, outcomes[index].status)
        ordered = [outcomes[i] for i in range(len(rows))]
        write_tables(ordered, out_dir)
    return ordered


def bounded_factors(built: Sequence[RowScenario], root: Path, profiles_hash: str, folder: Path,
                    jobs: int | None) -> dict[str, tuple[float, bool]]:  # fmt: skip
    """The rate factor of every row with p99 bounds (:mod:`clustersim.validation.boundrate`), searched in
    parallel; a search of the same scenario with the same profiles is read back from ``folder``."""
    found: dict[str, tuple[float, bool]] = {}
    todo: list[tuple[RowTask, Path, str]] = []
    for b in built:
        if b.mapping is None or b.row.p99_bounds_ms is None:
            continue
        text = json.dumps(b.mapping, sort_keys=True) + profiles_hash + SEARCH_VERSION
        key = hashlib.sha256(text.encode()).hexdigest()
        path = folder / f"{b.row.row_id}.json"
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            if record.get("key") == key:
                found[b.row.row_id] = float(record["factor"]), bool(record["met"])
                continue
        except (OSError, ValueError, KeyError, TypeError):
            pass
        todo.append((task_of(b), path, key))
    if not todo:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=min(len(todo), jobs or os.cpu_count() or 1)) as pool:
        futures = [pool.submit(bounded_factor, task, str(root)) for task, _, _ in todo]
        for (task, path, key), future in zip(todo, futures, strict=True):
            found[task.row_id] = factor, met = future.result()
            path.write_text(json.dumps({"key": key, "factor": factor, "met": met}), encoding="utf-8")
    return found


def at_bounded_rate(built: RowScenario, found: tuple[float, bool] | None) -> RowScenario:
    """``built`` run at the rate its search ``found`` (a row with p99 bounds), saying so in its assumptions."""
    if found is None or built.mapping is None or built.row.p99_bounds_ms is None:
        return built
    (factor, met), (ttft_ms, tpot_ms) = found, built.row.p99_bounds_ms
    bounds = f"p99 TTFT <= {ttft_ms:g} ms and p99 TPOT <= {tpot_ms:g} ms"
    said = (
        f"rate x{factor:.3f} of the published one: the highest at which the simulated {bounds}, as the "
        "publisher raised its own"
        if met
        else f"the published rate: no rate tried met the simulated {bounds}"
    )
    return dataclasses.replace(built, mapping=with_rate_factor(built.mapping, factor),
                               assumptions=(*built.assumptions, said))  # fmt: skip


def _outcome(row: CorpusRow, run_dir: Path, built: RowScenario) -> RowOutcome:
    facts = run_facts(run_dir)
    status, reason = "simulated", ""
    if facts["num_completed"] != facts["num_arrived"]:
        reason = f"only {facts['num_completed']} of {facts['num_arrived']} requests completed"
    measured = measure_run(run_dir, built.steady, built.replicas_per_run)
    if row.p99_bounds_ms is not None and built.mapping is not None and row.load:  # the rate it was run at
        measured["rate_factor"] = built.mapping["workload"]["tenants"][0]["arrival"]["rate_per_s"] / row.load
    return RowOutcome(row, status, reason, measured, facts, built.assumptions)


def comparisons(outcomes: Sequence[RowOutcome]) -> list[Comparison]:
    """Every published metric of every simulated row with its prediction."""
    found = []
    for outcome in outcomes:
        if outcome.status != "simulated":
            continue
        for kind in METRIC_KINDS:
            first = True
            for metric in metric_order(outcome.row, kind):
                published = outcome.row.comparable_metrics.get(metric)
                predicted = outcome.predicted.get(metric)
                if published is None or predicted is None:
                    continue
                found.append(Comparison(outcome.row, metric, published, predicted, first))
                first = False
    return found


def write_tables(outcomes: Sequence[RowOutcome], out_dir: Path) -> None:
    """``rows.parquet``/``.csv`` and ``comparisons.parquet``/``.csv`` (written atomically)."""
    rows = pa.table(
        {
            "row_id": [o.row.row_id for o in outcomes],
            "publisher": [o.row.publisher for o in outcomes],
            "engine": [o.row.engine for o in outcomes],
            "engine_version": [o.row.engine_version for o in outcomes],
            "gpu": [o.row.gpu for o in outcomes],
            "model": [o.row.model for o in outcomes],
            "setting": [o.row.setting() for o in outcomes],
            "status": [o.status for o in outcomes],
            "reason": [o.reason for o in outcomes],
            "kv_blocks_per_replica": [o.facts.get("kv_blocks_per_replica") for o in outcomes],
            # a row with p99 bounds: the factor of the published rate at which the simulation met them
            "rate_factor": pa.array([o.predicted.get("rate_factor") for o in outcomes], pa.float64()),
            "source_url": [o.row.source_url for o in outcomes],
        }
    )
    write_table_atomically(rows, out_dir / "rows.parquet")
    write_csv_atomically(rows, out_dir / "rows.csv")
    found = comparisons(outcomes)
    table = pa.table(
        {
            "row_id": [c.row.row_id for c in found],
            "publisher": [c.row.publisher for c in found],
            "engine": [c.row.engine for c in found],
            "gpu": [c.row.gpu for c in found],
            "model": [c.row.model for c in found],
            "load_kind": [c.row.load_kind for c in found],
            "metric": [c.metric for c in found],
            "kind": [c.kind for c in found],
            "scored": [c.scored for c in found],
            "published": pa.array([c.published for c in found], pa.float64()),
            "predicted": pa.array([c.predicted for c in found], pa.float64()),
            "error_pct": pa.array([c.error_pct for c in found], pa.float64()),
        }
    )
    write_table_atomically(table, out_dir / "comparisons.parquet")
    write_csv_atomically(table, out_dir / "comparisons.csv")
