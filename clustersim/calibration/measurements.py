"""Read a user's serving measurements: the CSV that ``clustersim calibrate`` fits profiles to.

One row per measured setting, with exactly the columns of :data:`COLUMNS` (in any order; a column
missing, repeated or unknown is refused, so that a typo such as ``ttft_ms`` cannot be silently
dropped). Lines whose first non-blank character is ``#`` are comments and blank lines are skipped,
anywhere in the file: a file can cite where each row was measured. Errors name the file, its line
(physical, counting comments) and the column: ``data.csv:7: load: -2 must be positive``.

``load_kind`` says how the load was offered: ``batch`` (``load`` identical requests at once),
``concurrency`` (a closed loop of ``load`` users, each sending its next request when the last one
ends) or ``rate_per_s`` (Poisson arrivals at ``load`` requests per second). The measured columns
``ttft_s`` (mean time to first token), ``itl_s`` (mean inter-token latency over every gap between two
tokens) and ``output_tokens_per_s`` (output tokens over the benchmark's duration, the whole
deployment) may be blank where not measured; each row needs at least one. ``weight_precision`` may
be blank: the model's published precision.

Rows read from a benchmark tool's JSON file (:mod:`.datafiles`) are :class:`Measurement` s too; they
may also carry the p99 of TTFT and ITL (``ttft_p99_s``, ``itl_p99_s``, not CSV columns), the number
of requests the benchmark completed, the coefficient of variation of its inter-arrival times and,
where the file lists them, every request (arrival time or None, prompt and output tokens) so that
the simulation replays the same requests.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from clustersim.config.catalogue import Catalogue
from clustersim.config.scenario import Precision
from clustersim.errors import ConfigError, did_you_mean, shown_value

LoadKind = Literal["batch", "concurrency", "rate_per_s"]
Metric = Literal["ttft_s", "itl_s", "output_tokens_per_s", "ttft_p99_s", "itl_p99_s"]
LOAD_KINDS: tuple[str, ...] = get_args(LoadKind)
METRICS: tuple[Metric, ...] = ("ttft_s", "itl_s", "output_tokens_per_s")  # the CSV's measured columns
TAIL_METRICS: tuple[Metric, ...] = ("ttft_p99_s", "itl_p99_s")  # from benchmark tools' files only
ALL_METRICS: tuple[Metric, ...] = (*METRICS, *TAIL_METRICS)
ReplayedRequest = tuple[float | None, int, int]  # (arrival_s from the first or None, prompt tokens, output tokens)
PRECISIONS: tuple[str, ...] = get_args(Precision)
SETTING_COLUMNS = (
    "hardware",
    "model",
    "tensor_parallel",
    "weight_precision",
    "load_kind",
    "load",
    "prompt_tokens",
    "output_tokens",
)
COLUMNS: tuple[str, ...] = (*SETTING_COLUMNS, *METRICS)
MAX_INTEGER = 2**31 - 1


@dataclass(frozen=True)
class Measurement:
    """One measured setting and what was measured there (seconds, tokens per second).

    ``hardware`` and ``model`` are the catalogue's canonical names (or profile files, as given);
    ``line`` is the row's line in a CSV, or the benchmark's 1-based position in a JSON file, for
    messages. ``prompt_tokens`` and ``output_tokens`` are the fixed lengths of every request, or
    their means when ``requests`` lists each request (then replayed as they are); ``num_requests``
    is how many requests the benchmark completed (None: not known); ``interarrival_cv`` the
    coefficient of variation of a ``rate_per_s`` benchmark's inter-arrival times (1: Poisson,
    0: constant); ``path`` the file the row was read from (None: the file being read).
    """

    line: int
    hardware: str
    model: str
    tensor_parallel: int
    weight_precision: Precision | None
    load_kind: LoadKind
    load: float
    prompt_tokens: int
    output_tokens: int
    measured: dict[Metric, float] = field(default_factory=dict)
    requests: tuple[ReplayedRequest, ...] | None = None
    num_requests: int | None = None
    interarrival_cv: float = 1.0
    path: Path | None = None

    def setting(self) -> str:
        """A short description: ``H200 Llama-3.1-8B TP1 batch 8, 32 in / 128 out``."""
        precision = f" {self.weight_precision}" if self.weight_precision else ""
        load = f"{self.load:g}" if self.load_kind != "rate_per_s" else f"{self.load:g}/s"
        kind = "rate" if self.load_kind == "rate_per_s" else self.load_kind
        lengths = f"{self.prompt_tokens} in / {self.output_tokens} out"
        if self.requests is not None:
            lengths = f"{len(self.requests)} requests, mean {lengths}"
        return f"{self.hardware} {self.model}{precision} TP{self.tensor_parallel} {kind} {load}, {lengths}"


def fitted_values(row: Measurement) -> dict[Metric, float]:
    """The measured values a fit minimises the error of: the means (TTFT, ITL, throughput), not the p99s,
    which depend on what a few requests met and are scored only."""
    return {metric: value for metric, value in row.measured.items() if metric in METRICS}


@dataclass(frozen=True)
class MeasurementFile:
    """The rows of one measurements file, with the file's name and content hash (for citations).

    Rows read from several files together have the first file's ``path``, a hash of every file's
    name and hash, and a ``label`` that names them (a single file is cited by its name).
    """

    path: Path
    sha256: str
    rows: tuple[Measurement, ...]
    label: str = ""

    @property
    def name(self) -> str:
        """How the data is cited: the file's name, or the label of several files."""
        return self.label or self.path.name

    @property
    def num_values(self) -> int:
        """How many measured numbers the rows hold together (p99s included)."""
        return sum(len(row.measured) for row in self.rows)


def _data_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line that is neither blank nor a ``#`` comment."""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield number, line


def _check_header(header: list[str], where: str) -> list[str]:
    names = [name.strip() for name in header]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(where, name, "column appears twice")
        if name not in COLUMNS:
            shown = shown_value(name) if name else "(an empty name)"
            raise ConfigError(
                where,
                "header",
                f"unknown column {shown}{did_you_mean(name, COLUMNS)}; the columns are {', '.join(COLUMNS)}",
            )
    missing = [name for name in COLUMNS if name not in names]
    if missing:
        raise ConfigError(
            where, "header", f"missing column(s) {', '.join(missing)}; the columns are {', '.join(COLUMNS)}"
        )
    return names


def _integer(text: str, where: str, column: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(where, column, f"{shown_value(text)} is not a whole number") from None
    if not 0 < value <= MAX_INTEGER:
        raise ConfigError(where, column, f"{value} must be positive (and at most {MAX_INTEGER:,})")
    return value


def _positive(text: str, where: str, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(where, column, f"{shown_value(text)} is not a number") from None
    if not math.isfinite(value) or value <= 0 or value > 1e100:
        raise ConfigError(where, column, f"{shown_value(text)} must be a positive, finite number")
    return value


def _choice(text: str, choices: tuple[str, ...], where: str, column: str) -> str:
    if text not in choices:
        raise ConfigError(
            where,
            column,
            f"unknown value {shown_value(text)}{did_you_mean(text, choices)}; choose one of: {', '.join(choices)}",
        )
    return text


def _load(kind: str, text: str, where: str) -> float:
    if kind == "rate_per_s":
        return _positive(text, where, "load")
    return float(_integer(text, where, "load"))


def _measured(cells: dict[str, str], output_tokens: int, where: str) -> dict[Metric, float]:
    measured = {metric: _positive(cells[metric], where, metric) for metric in METRICS if cells[metric]}
    if not measured:
        raise ConfigError(where, ", ".join(METRICS), "nothing measured: give at least one of them")
    if "itl_s" in measured and output_tokens < 2:
        raise ConfigError(
            where, "itl_s", f"needs output_tokens of at least 2 (there is no gap in {output_tokens} token)"
        )
    return measured


def parse_row(cells: dict[str, str], line: int, where: str, names: ProfileNames) -> Measurement:
    """One data row (cells by column name, stripped) as a :class:`Measurement`."""
    precision = cells["weight_precision"].lower()
    kind = _choice(cells["load_kind"], LOAD_KINDS, where, "load_kind")
    output_tokens = _integer(cells["output_tokens"], where, "output_tokens")
    return Measurement(
        line=line,
        hardware=names.canonical("hardware", cells["hardware"], where),
        model=names.canonical("model", cells["model"], where),
        tensor_parallel=_integer(cells["tensor_parallel"], where, "tensor_parallel"),
        weight_precision=_choice(precision, PRECISIONS, where, "weight_precision") if precision else None,  # type: ignore[arg-type]
        load_kind=kind,  # type: ignore[arg-type]
        load=_load(kind, cells["load"], where),
        prompt_tokens=_integer(cells["prompt_tokens"], where, "prompt_tokens"),
        output_tokens=output_tokens,
        measured=_measured(cells, output_tokens, where),
    )


@dataclass
class ProfileNames:
    """Hardware and model names looked up in a catalogue, each name once."""

    catalogue: Catalogue
    known: dict[tuple[str, str], str] = field(default_factory=dict)

    def canonical(self, kind: str, name: str, where: str) -> str:
        """The catalogue's name for ``name`` (a profile file's name as given); refused as ``where: kind``."""
        if (kind, name) not in self.known:
            if not name:
                raise ConfigError(where, kind, "empty: give a name from `clustersim profiles` or a profile file")
            lookup = self.catalogue.hardware if kind == "hardware" else self.catalogue.model
            found = lookup(name, where, kind)  # a profile file: it exists and is valid
            self.known[kind, name] = name if name.endswith((".yaml", ".yml")) else found.name
        return self.known[kind, name]


def catalogue_next_to(path: Path, catalogue: Catalogue | None = None) -> Catalogue:
    """The catalogue (the built-in one by default) with profile files resolving in ``path``'s folder."""
    return dataclasses.replace(catalogue or Catalogue.builtin(), base_dir=path.resolve().parent)


def read_file(path: Path) -> tuple[bytes, str]:
    """The bytes of a data file and its UTF-8 text (a byte-order mark dropped); refused in one line."""
    if not path.is_file():
        raise ConfigError(str(path), "", "no such file")
    try:
        data = path.read_bytes()
        return data, data.decode("utf-8-sig")
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), "", "is not UTF-8 text") from None


def csv_rows(path: Path, text: str, catalogue: Catalogue | None = None) -> tuple[Measurement, ...]:
    """The checked rows of a measurements CSV's text (profile files it names resolve next to it).

    Each line is one record (a quoted field cannot span lines).
    """
    names_of = ProfileNames(catalogue_next_to(path, catalogue))
    lines = list(_data_lines(text))
    if not lines:
        raise ConfigError(
            str(path), "header", f"the file is empty; the first line must name the columns {', '.join(COLUMNS)}"
        )
    names = _check_header(next(csv.reader([lines[0][1]])), f"{path}:{lines[0][0]}")
    rows = []
    for number, line in lines[1:]:
        where = f"{path}:{number}"
        record = next(csv.reader([line]))
        if len(record) != len(names):
            raise ConfigError(where, "", f"{len(record)} fields where the header has {len(names)}")
        cells = {name: cell.strip() for name, cell in zip(names, record, strict=True)}
        rows.append(parse_row(cells, number, where, names_of))
    if not rows:
        raise ConfigError(str(path), "", "no data rows after the header")
    return tuple(rows)


def read_measurements(path: Path, catalogue: Catalogue | None = None) -> MeasurementFile:
    """Read and check a measurements CSV (profile files it names resolve next to it)."""
    data, text = read_file(path)
    return MeasurementFile(path, hashlib.sha256(data).hexdigest(), csv_rows(path, text, catalogue))
