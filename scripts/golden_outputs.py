"""Record or check hashes of every shipped scenario's outputs (the refactoring guard).

For each scenario under ``scenarios/`` (the published replays included) and each benchmark case
at 10k requests, in both simulation modes (fast forward and step by step), this hashes the data
of ``requests.parquet``, ``steps.parquet``, ``memory.parquet`` and ``itl.parquet`` (and ``lifecycle.parquet``
and ``transfers.parquet`` where a run writes them) column by column (Arrow IPC
bytes, file metadata left out) and keeps the summary figures (``summary.json`` without the event
count, which measures the simulator rather than the system).

    python scripts/golden_outputs.py record [--out scripts/golden_outputs.json]
    python scripts/golden_outputs.py check  [--against scripts/golden_outputs.json] [--only NAME ...]

``check`` prints every table, column and summary figure that moved and exits 1 if any did.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = ROOT / "scripts" / "golden_outputs.json"
TABLES = ("requests", "steps", "memory", "itl")
OPTIONAL_TABLES = ("lifecycle", "transfers")  # written by scenarios with faults or an autoscaler, or disaggregated
BENCH_REQUESTS = 10_000


def _column_hash(column: pa.ChunkedArray) -> str:
    table = pa.table({"c": column.combine_chunks()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()[:16]


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _flatten(item, f"{prefix}[{index}]")
    else:
        yield prefix, value


def _cases() -> list[tuple[str, str]]:
    """(case id, what to run): scenario files by path, benchmark cases by name."""
    files = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "scenarios" / "published").glob("*.yaml"))
    cases = [(str(p.relative_to(ROOT / "scenarios")), str(p)) for p in files]
    cases += [(f"bench:{name}", f"bench:{name}") for name in ("1-replica", "8-replicas", "64-replicas")]
    return cases


def _run(case: tuple[str, str, bool]) -> tuple[str, dict[str, Any]]:
    case_id, target, fast = case
    from clustersim.config.loader import LoadedScenario, load_scenario, scenario_from_mapping
    from clustersim.runner import run_scenario

    if target.startswith("bench:"):
        from clustersim.bench import CASES, bench_scenario

        raw = bench_scenario(CASES[target[6:]], BENCH_REQUESTS, fast)
        loaded = LoadedScenario(scenario_from_mapping(raw, target), target, ROOT)
    else:
        loaded = load_scenario(Path(target), [f"simulation.fast_forward={str(fast).lower()}"])
    key = f"{case_id} [{'fast' if fast else 'step'}]"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = run_scenario(loaded, Path(tmp) / "run")
        except Exception as exc:  # recorded: a scenario that fails is a figure too
            return key, {"error": f"{type(exc).__name__}: {exc}"}
        record: dict[str, Any] = {}
        present = [name for name in OPTIONAL_TABLES if (Path(tmp) / "run" / f"{name}.parquet").exists()]
        for name in (*TABLES, *present):
            table = pq.read_table(Path(tmp) / "run" / f"{name}.parquet")
            record[name] = {"num_rows": table.num_rows}
            record[name].update({col: _column_hash(table.column(col)) for col in table.column_names})
        summary = dict(result.summary)
        summary.get("simulator", {}).pop("num_events", None)
        record["summary"] = dict(_flatten(summary))
    return key, record


def collect(only: list[str], jobs: int) -> dict[str, Any]:
    todo = [(cid, target, fast) for cid, target in _cases() for fast in (True, False)]
    if only:
        todo = [t for t in todo if any(o in t[0] for o in only)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return dict(sorted(pool.map(_run, todo)))


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    moved: list[str] = []
    for key, now in new.items():
        before = old.get(key)
        if before is None:
            moved.append(f"{key}: not recorded before")
            continue
        for part in sorted(set(before) | set(now)):
            a, b = before.get(part), now.get(part)
            if a == b:
                continue
            if not isinstance(a, dict) or not isinstance(b, dict):
                moved.append(f"{key} {part}: {a!r} -> {b!r}")
                continue
            for field in sorted(set(a) | set(b)):
                if a.get(field) != b.get(field):
                    moved.append(f"{key} {part}.{field}: {a.get(field)!r} -> {b.get(field)!r}")
    return moved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["record", "check"])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    results = collect(args.only, args.jobs)
    if args.action == "record":
        # --only re-records those runs and keeps every other recorded one
        kept = json.loads(args.file.read_text(encoding="utf-8")) if args.only and args.file.is_file() else {}
        merged = {**kept, **results}
        args.file.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"recorded {len(results)} runs in {args.file} ({len(merged)} in all)")
        return
    moved = compare(json.loads(args.file.read_text(encoding="utf-8")), results)
    print("\n".join(moved) if moved else f"all {len(results)} runs identical")
    sys.exit(1 if moved else 0)


if __name__ == "__main__":
    main()
