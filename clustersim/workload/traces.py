"""Trace files: read and check request logs (Azure CSV, Mooncake JSON lines, plain CSV or Parquet).

Reading happens when a run starts, before any output is written. Every problem is one
:class:`ConfigError` naming the trace file, the line (the row, for Parquet) and the problem;
a trace file missing on disk names the scenario file and the field that points at it.
"""

from __future__ import annotations

import csv
import json
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from clustersim.config.base import MAX_COUNT, MAX_SECONDS
from clustersim.config.workload import EmpiricalLengths, TraceArrivals, TraceColumns, TraceFile, Workload
from clustersim.errors import ConfigError, did_you_mean, shown_value
from clustersim.registry import Registry

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
_NS_PER_S = 1e9
_MS_PER_S = 1e3


@dataclass(frozen=True)
class TraceTable:
    """One trace's requests, in file order.

    ``arrival_at_s`` counts from 0 (before any time scale); ``line`` is where each request is in the
    file (a line number, or a 1-based row number for Parquet: see ``row_word``). ``names`` are the
    file's own names for the arrival, prompt and output columns (for messages).
    """

    arrival_at_s: NDArray[np.float64]
    prompt_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]
    session_id: NDArray[np.int64] | None
    prefix_hash_ids: tuple[tuple[int, ...], ...] | None
    line: NDArray[np.int64]
    row_word: str
    names: tuple[str, str, str]
    display: str

    @property
    def num_requests(self) -> int:
        return int(self.arrival_at_s.size)

    def take(self, order: NDArray[np.intp]) -> TraceTable:
        """The rows in ``order``."""
        hashes = self.prefix_hash_ids
        return replace(
            self,
            arrival_at_s=self.arrival_at_s[order],
            prompt_tokens=self.prompt_tokens[order],
            output_tokens=self.output_tokens[order],
            session_id=self.session_id[order] if self.session_id is not None else None,
            prefix_hash_ids=tuple(hashes[i] for i in order.tolist()) if hashes is not None else None,
            line=self.line[order],
        )

    def where(self, index: int) -> str:
        return f"{self.row_word} {int(self.line[index])}"


@dataclass(frozen=True)
class TenantData:
    """What a tenant's traffic needs from disk: its replayed trace, observed lengths for ``empirical``."""

    trace: TraceTable | None = None
    observed_prompt_tokens: NDArray[np.int64] | None = None
    observed_output_tokens: NDArray[np.int64] | None = None


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it is below it, else absolute."""
    try:
        return os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------- parsing helpers
def _fail(display: str, where: str, problem: str) -> ConfigError:
    return ConfigError(display, where, problem)


def _parse_column(values: list[str], dtype: str, name: str, lines: list[int], display: str, what: str) -> NDArray[Any]:
    """Convert text to ``dtype`` in one numpy call; on failure find the first bad value and name its line."""
    try:
        return np.array(values, dtype=dtype)
    except ValueError:
        for value, line in zip(values, lines, strict=True):
            try:
                np.array([value], dtype=dtype)
            except ValueError:
                raise _fail(display, f"line {line}", f"{name}: {shown_value(value)} is not {what}") from None
        raise


def _read_csv(path: Path, display: str, wanted: tuple[str | None, ...]) -> tuple[list[list[str]], list[int]]:
    """The ``wanted`` columns (None: skipped) of a CSV file with a header, as text, and each row's line number."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle, strict=True)
            header = next(reader, None)
            if not header:
                raise _fail(display, "", "empty trace: no header and no rows")
            indexes = [_column_index(header, name, display) if name is not None else -1 for name in wanted]
            columns: list[list[str]] = [[] for _ in wanted]
            lines: list[int] = []
            for row in reader:
                if not row:
                    continue  # blank line
                if len(row) != len(header):
                    raise _fail(
                        display, f"line {reader.line_num}", f"{len(row)} fields where the header has {len(header)}"
                    )
                for column, index in zip(columns, indexes, strict=True):
                    if index >= 0:
                        column.append(row[index])
                lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise _fail(display, "", "not a UTF-8 text file") from None
    except csv.Error as exc:
        raise _fail(display, f"line {reader.line_num}", f"malformed CSV: {exc}") from None
    return columns, lines


def _column_index(header: list[str], name: str, display: str) -> int:
    if name not in header:
        raise _fail(display, "line 1", f"no column '{name}'{did_you_mean(name, header)}; columns: {', '.join(header)}")
    return header.index(name)


# ----------------------------------------------------------------------------- formats
def _read_azure(path: Path, display: str) -> TraceTable:
    (stamps, prompts, outputs), lines = _read_csv(path, display, AZURE_COLUMNS)
    when = _azure_times(stamps, lines, display)
    ns = when.astype(np.int64)
    arrival = (ns - ns.min()).astype(np.float64) / _NS_PER_S if ns.size else np.zeros(0)
    return TraceTable(
        arrival,
        _parse_column(prompts, "int64", "ContextTokens", lines, display, "an integer"),
        _parse_column(outputs, "int64", "GeneratedTokens", lines, display, "an integer"),
        None,
        None,
        np.asarray(lines, dtype=np.int64),
        "line",
        AZURE_COLUMNS,
        display,
    )


def _read_plain_csv(path: Path, display: str, columns: TraceColumns) -> TraceTable:
    wanted = (columns.arrival_at_s, columns.prompt_tokens, columns.output_tokens, columns.session_id)
    (arrivals, prompts, outputs, sessions), lines = _read_csv(path, display, wanted)
    session = None
    if columns.session_id is not None:
        session = _parse_column(sessions, "int64", columns.session_id, lines, display, "an integer")
    return TraceTable(
        _parse_column(arrivals, "float64", columns.arrival_at_s, lines, display, "a number"),
        _parse_column(prompts, "int64", columns.prompt_tokens, lines, display, "an integer"),
        _parse_column(outputs, "int64", columns.output_tokens, lines, display, "an integer"),
        session,
        None,
        np.asarray(lines, dtype=np.int64),
        "line",
        (columns.arrival_at_s, columns.prompt_tokens, columns.output_tokens),
        display,
    )


def _azure_times(stamps: list[str], lines: list[int], display: str) -> NDArray[np.datetime64]:
    """The Azure trace's TIMESTAMP column: dates and times (an offset such as +00:00 is taken as
    given, in UTC); numbers (epoch seconds?) and empty values are refused rather than misread."""
    for stamp, line in zip(stamps, lines, strict=True):
        text = stamp.strip()
        if not text or text.lower() == "nat":
            raise _fail(display, f"line {line}", "TIMESTAMP: empty (every row needs a date and time)")
        try:
            float(text)
        except ValueError:
            continue
        raise _fail(
            display,
            f"line {line}",
            f"TIMESTAMP: {shown_value(text)} is a number, not a date and time such as 2023-11-16 18:15:46.68; "
            "for times in seconds use format: csv with an arrival column",
        )
    with warnings.catch_warnings():  # numpy warns that it converts time-zoned stamps to UTC: that is wanted
        warnings.simplefilter("ignore")
        return _parse_column(stamps, "datetime64[ns]", "TIMESTAMP", lines, display, "a date and time")


def _mooncake_value(record: dict[str, Any], key: str, line: int, display: str, number: bool) -> Any:
    if key not in record:
        raise _fail(display, f"line {line}", f"no field '{key}'{did_you_mean(key, record)}")
    value = record[key]
    allowed = (int, float) if number else (int,)
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise _fail(
            display, f"line {line}", f"{key}: {shown_value(value)} is not {'a number' if number else 'an integer'}"
        )
    if isinstance(value, int) and abs(value) > MAX_COUNT:
        raise _fail(display, f"line {line}", f"{key}: {value:.3g} is too large (at most {MAX_COUNT:,})")
    return value


def _read_mooncake(path: Path, display: str) -> TraceTable:
    stamps: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    hashes: list[tuple[int, ...]] = []
    lines: list[int] = []
    try:
        with path.open(encoding="utf-8") as handle:
            for line, text in enumerate(handle, start=1):
                if not text.strip():
                    continue
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise _fail(display, f"line {line}", f"not valid JSON: {exc.msg}") from None
                if not isinstance(record, dict):
                    raise _fail(display, f"line {line}", f"expected a JSON object with {', '.join(MOONCAKE_FIELDS)}")
                stamps.append(_mooncake_value(record, "timestamp", line, display, number=True))
                prompts.append(_mooncake_value(record, "input_length", line, display, number=False))
                outputs.append(_mooncake_value(record, "output_length", line, display, number=False))
                ids = record.get("hash_ids", [])
                if not isinstance(ids, list) or not all(type(h) is int for h in ids):
                    raise _fail(display, f"line {line}", "hash_ids: expected a list of integers")
                hashes.append(tuple(ids))
                lines.append(line)
    except UnicodeDecodeError:
        raise _fail(display, "", "not a UTF-8 text file") from None
    return TraceTable(
        np.asarray(stamps, dtype=np.float64) / _MS_PER_S,
        np.asarray(prompts, dtype=np.int64),
        np.asarray(outputs, dtype=np.int64),
        None,
        tuple(hashes),
        np.asarray(lines, dtype=np.int64),
        "line",
        MOONCAKE_FIELDS,
        display,
    )


def _parquet_column(table: pa.Table, name: str, integer: bool, display: str) -> NDArray[Any]:
    if name not in table.column_names:
        raise _fail(
            display,
            "",
            f"no column '{name}'{did_you_mean(name, table.column_names)}; columns: {', '.join(table.column_names)}",
        )
    column = table.column(name)
    if column.null_count:
        first = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise _fail(display, f"row {first + 1}", f"{name}: missing value (null)")
    kind_ok = pa.types.is_integer(column.type) or (not integer and pa.types.is_floating(column.type))
    if not kind_ok:
        raise _fail(display, "", f"{name}: expected {'integers' if integer else 'numbers'}, found {column.type}")
    values: NDArray[Any] = column.to_numpy().astype(np.int64 if integer else np.float64)
    return values


def _read_parquet(path: Path, display: str, columns: TraceColumns) -> TraceTable:
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise _fail(display, "", f"not a readable Parquet file: {exc}") from None
    session = None
    if columns.session_id is not None:
        session = _parquet_column(table, columns.session_id, True, display)
    return TraceTable(
        _parquet_column(table, columns.arrival_at_s, False, display),
        _parquet_column(table, columns.prompt_tokens, True, display),
        _parquet_column(table, columns.output_tokens, True, display),
        session,
        None,
        np.arange(1, table.num_rows + 1, dtype=np.int64),
        "row",
        (columns.arrival_at_s, columns.prompt_tokens, columns.output_tokens),
        display,
    )


# ----------------------------------------------------------------------------- checks
def _check(table: TraceTable) -> TraceTable:
    """Refuse an empty trace, negative or zero lengths, and arrival times that are not finite or negative."""
    display = table.display
    if table.num_requests == 0:
        raise _fail(display, "", "empty trace: no requests")
    arrival_name, prompt_name, output_name = table.names
    for name, values in ((prompt_name, table.prompt_tokens), (output_name, table.output_tokens)):
        bad = np.flatnonzero((values < 1) | (values > MAX_COUNT))
        if bad.size:
            value = int(values[bad[0]])
            problem = (
                "is negative"
                if value < 0
                else "tokens: every request needs at least 1"
                if value == 0
                else f"is too large (at most {MAX_COUNT:,})"
            )
            raise _fail(display, table.where(int(bad[0])), f"{name}: {value} {problem}")
    arrival = table.arrival_at_s
    bad = np.flatnonzero(~np.isfinite(arrival) | (arrival < 0) | (arrival > MAX_SECONDS))
    if bad.size:
        time = float(arrival[bad[0]])
        problem = (
            "is not a finite number"
            if not np.isfinite(time)
            else "is negative (times count from 0)"
            if time < 0
            else f"is too late (at most {MAX_SECONDS:.0e} s)"
        )
        raise _fail(display, table.where(int(bad[0])), f"{arrival_name}: {time:g} {problem}")
    return table


def in_time_order(table: TraceTable, out_of_order: str) -> TraceTable:
    """The trace sorted by arrival (stable), or refused at the first row earlier than the one before it."""
    backwards = np.flatnonzero(np.diff(table.arrival_at_s) < 0)
    if not backwards.size:
        return table
    if out_of_order == "sort":
        return table.take(np.argsort(table.arrival_at_s, kind="stable"))
    i = int(backwards[0])
    earlier, later = table.arrival_at_s[i + 1], table.arrival_at_s[i]
    raise _fail(
        table.display,
        table.where(i + 1),
        f"{table.names[0]} is {later - earlier:.6g} s before {table.where(i)}'s; the trace is out of time order "
        "(set out_of_order: sort to sort it)",
    )


TraceReader = Callable[[Path, str, TraceColumns], TraceTable]  # (path, path as shown, columns) -> table

TRACE_FORMATS: Registry[TraceReader] = Registry(
    "trace format",
    [
        ("azure", lambda path, display, columns: _read_azure(path, display)),
        ("mooncake", lambda path, display, columns: _read_mooncake(path, display)),
        ("csv", _read_plain_csv),
        ("parquet", _read_parquet),
    ],
)


def read_trace(path: Path, trace: TraceFile) -> TraceTable:
    """Read and check one trace file (rows in file order)."""
    display = display_path(path)
    columns = trace.columns if trace.columns is not None else TraceColumns()
    return _check(TRACE_FORMATS.get(trace.format)(path, display, columns))


# ----------------------------------------------------------------------------- a scenario's traces
def _resolve(trace: TraceFile, base_dir: Path, source: str, field_path: str) -> Path:
    given = Path(trace.path).expanduser()
    path = given if given.is_absolute() else Path(os.path.normpath(base_dir / given))
    if not path.is_file():
        siblings = [p.name for p in path.parent.iterdir()] if path.parent.is_dir() else []
        hint = did_you_mean(path.name, siblings)
        if not hint:  # how to give another (a relative path resolves against the scenario's folder)
            setting = re.sub(r"\[(\d+)\]", r".\1", field_path)
            hint = f"; point at the file with --set {setting}=FILE"
        raise ConfigError(source, field_path, f"no such file: {display_path(path)}{hint}")
    return path


def load_workload_data(workload: Workload, base_dir: Path, source: str) -> dict[str, TenantData]:
    """Read every trace the tenants replay or sample lengths from (each file once); keyed by tenant name.

    Relative paths resolve against ``base_dir`` (the scenario file's folder); ``source`` names the
    scenario in errors about missing files.
    """
    cache: dict[tuple[Path, str, TraceColumns | None], TraceTable] = {}

    def table(trace: TraceFile, field_path: str) -> TraceTable:
        path = _resolve(trace, base_dir, source, field_path)
        key = (path.resolve(), trace.format, trace.columns)
        if key not in cache:
            cache[key] = read_trace(path, trace)
        return cache[key]

    data: dict[str, TenantData] = {}
    for i, tenant in enumerate(workload.tenants):
        where = f"workload.tenants[{i}]"
        replayed = None
        if isinstance(tenant.arrival, TraceArrivals):
            replayed = in_time_order(table(tenant.arrival.file, f"{where}.arrival.path"), tenant.arrival.out_of_order)
        observed: dict[str, NDArray[np.int64] | None] = {"prompt": None, "output": None}
        for purpose, dist in (("prompt", tenant.prompt_tokens), ("output", tenant.output_tokens)):
            if isinstance(dist, EmpiricalLengths) and dist.trace is not None:
                lengths = table(dist.trace, f"{where}.{purpose}_tokens.trace.path")
                column = dist.lengths_of or purpose
                observed[purpose] = lengths.prompt_tokens if column == "prompt" else lengths.output_tokens
        if replayed is not None or observed["prompt"] is not None or observed["output"] is not None:
            data[tenant.name] = TenantData(replayed, observed["prompt"], observed["output"])
    return data
