"""The DATA of ``clustersim calibrate``: measurements CSVs and benchmark tools' JSON files, one or
several, or folders of them, as one :class:`~clustersim.calibration.measurements.MeasurementFile`.

The format is told by content. Text that starts with ``{`` or ``[`` is JSON (or JSON lines, one
object per line, as ``vllm bench serve --append-result`` writes): a GuideLLM report (a list of
``benchmarks``, :mod:`.guidellmreport`), a GenAI-Perf or AIPerf profile export (``input_config`` and
metric blocks, :mod:`.profileexport`) or a vLLM ``--save-result`` object (``completed``,
``request_rate`` and the mean latencies, :mod:`.vllmresult`). Other text whose first line has a
comma is a measurements CSV (:mod:`.measurements`). Anything else is refused in one line naming the
file and the formats expected.

A JSON file does not say which GPU or parallelism it ran on: :class:`FileOptions` (``--hardware``,
required for JSON files; ``--tensor-parallel``, default 1; ``--weight-precision``, default the
model's) apply to every row read from one, and ``--model`` names its model (default: the model id
the file records, looked up among the catalogue's names and aliases, which include Hugging Face
ids). The options are refused when every file is a CSV: a CSV row names its own GPU and model.
A folder stands for its ``.csv``, ``.json`` and ``.jsonl`` files, in name order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from clustersim.calibration.benchruns import BenchmarkRun
from clustersim.calibration.guidellmreport import guidellm_run, is_guidellm_report
from clustersim.calibration.jsonfields import JsonObject
from clustersim.calibration.measurements import (
    METRICS,
    PRECISIONS,
    Measurement,
    MeasurementFile,
    ProfileNames,
    catalogue_next_to,
    csv_rows,
    read_file,
)
from clustersim.calibration.profileexport import is_profile_export, profile_export_run
from clustersim.calibration.vllmresult import is_vllm_result, vllm_run
from clustersim.config.catalogue import Catalogue
from clustersim.config.scenario import Precision
from clustersim.errors import ConfigError, did_you_mean, shown_value

SUFFIXES = (".csv", ".json", ".jsonl")
FORMATS = (
    "a measurements CSV, a `vllm bench serve --save-result` JSON, a GuideLLM report (benchmarks) "
    "or a GenAI-Perf/AIPerf profile export (input_config)"
)
MAX_LISTED_FILES = 3


@dataclass(frozen=True)
class FileOptions:
    """What the command's options add to every row of a JSON file (None: not given)."""

    hardware: str | None = None
    model: str | None = None
    tensor_parallel: int | None = None
    weight_precision: str | None = None

    def given(self) -> list[str]:
        """The options given, as their flags."""
        flags = ("--hardware", "--model", "--tensor-parallel", "--weight-precision")
        return [flag for flag, value in zip(flags, dataclasses.astuple(self), strict=True) if value is not None]


def _profile_name(name: str) -> str:
    """A profile file named in an option resolves from the current folder; a catalogue name stays."""
    return str(Path(name).resolve()) if name.endswith((".yaml", ".yml")) else name


def checked_options(options: FileOptions, catalogue: Catalogue | None = None) -> FileOptions:
    """The options with catalogue names for the GPU and model (refused in one line if unknown)."""
    catalogue = catalogue or Catalogue.builtin()
    hardware, model, precision = options.hardware, options.model, options.weight_precision
    if hardware is not None:
        hardware = _profile_name(hardware)
        found = catalogue.hardware(hardware, "--hardware", "")
        hardware = hardware if hardware.endswith((".yaml", ".yml")) else found.name
    if model is not None:
        model = _profile_name(model)
        found_model = catalogue.model(model, "--model", "")
        model = model if model.endswith((".yaml", ".yml")) else found_model.name
    if precision is not None and precision.lower() not in PRECISIONS:
        choices = ", ".join(PRECISIONS)
        raise ConfigError(
            "--weight-precision",
            "",
            f"unknown value {shown_value(precision)}{did_you_mean(precision, PRECISIONS)}; choose one of: {choices}",
        )
    return FileOptions(hardware, model, options.tensor_parallel, precision.lower() if precision else None)


def data_files(paths: Sequence[Path]) -> list[Path]:
    """The files the DATA arguments name: each file, and each folder's data files in name order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)
            if not found:
                raise ConfigError(str(path), "", f"no {', '.join(SUFFIXES)} files in this folder")
            files.extend(found)
        else:
            files.append(path)
    return files


def _json_documents(path: Path, text: str) -> list[tuple[str, dict[str, Any]]]:
    """The JSON objects of a file, each with how messages name it (the file, or ``file:line``)."""
    try:
        value = json.loads(text)
        pairs: list[tuple[str, Any]] = (
            [(str(path), value)]
            if not isinstance(value, list)
            else [(f"{path}[{i}]", item) for i, item in enumerate(value)]
        )
    except json.JSONDecodeError as whole:
        lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
        try:
            pairs = [(f"{path}:{number}", json.loads(line)) for number, line in lines]
        except json.JSONDecodeError:
            raise ConfigError(str(path), "", f"is not valid JSON (line {whole.lineno}: {whole.msg})") from None
    for source, item in pairs:
        if not isinstance(item, dict):
            raise ConfigError(source, "", f"not a recognised format: a JSON {type(item).__name__}; expected {FORMATS}")
    return pairs


def _runs(source: str, value: dict[str, Any], number: int) -> list[BenchmarkRun]:
    """The benchmarks of one JSON object, by its format (``number``: its 1-based place in the file)."""
    root = JsonObject(value, source)
    if is_guidellm_report(value):
        return [guidellm_run(bench, root, i) for i, bench in enumerate(root.objects("benchmarks"), start=1)]
    if is_profile_export(value):
        return [profile_export_run(root)]
    if is_vllm_result(value):
        return [vllm_run(root, number)]
    keys = ", ".join(list(value)[:6]) or "none"
    raise ConfigError(source, "", f"not a recognised format (a JSON object with keys {keys}); expected {FORMATS}")


def _model(run: BenchmarkRun, source: str, options: FileOptions, names: ProfileNames) -> str:
    if options.model is not None:
        return options.model
    if run.model_id is None:
        raise ConfigError(source, "model", "the file names no model: give --model NAME (from `clustersim profiles`)")
    try:
        return names.canonical("model", run.model_id, source)
    except ConfigError:
        raise ConfigError(
            source,
            "model",
            f"{shown_value(run.model_id)} is not in the catalogue: give --model NAME "
            "(a name or alias from `clustersim profiles`, or a model profile .yaml file)",
        ) from None


def _measurement(run: BenchmarkRun, path: Path, source: str, options: FileOptions, names: ProfileNames) -> Measurement:
    if options.hardware is None:
        raise ConfigError(
            source,
            "",
            "a benchmark tool's JSON does not say which GPU it ran on: give --hardware NAME "
            "(a GPU from `clustersim profiles`, or a hardware profile .yaml file)",
        )
    measured = dict(run.measured)
    if run.output_tokens < 2 and run.requests is None:  # fixed one-token outputs have no gap to predict
        measured = {k: v for k, v in measured.items() if k not in ("itl_s", "itl_p99_s")}
    if not any(metric in METRICS for metric in measured):
        raise ConfigError(source, "", "nothing measured but ITL, and the outputs are single tokens")
    return Measurement(
        line=run.index,
        hardware=options.hardware,
        model=_model(run, source, options, names),
        tensor_parallel=options.tensor_parallel or 1,
        weight_precision=cast(Precision | None, options.weight_precision),  # checked in checked_options
        load_kind=run.load_kind,
        load=run.load,
        prompt_tokens=run.prompt_tokens,
        output_tokens=run.output_tokens,
        measured=measured,
        requests=run.requests,
        num_requests=run.num_requests,
        interarrival_cv=run.interarrival_cv,
        path=path,
    )


def read_one(path: Path, options: FileOptions, catalogue: Catalogue | None = None) -> tuple[MeasurementFile, bool]:
    """One data file's rows (each with its ``path``) and whether it was JSON (else a CSV)."""
    data, text = read_file(path)
    sha256 = hashlib.sha256(data).hexdigest()
    start = text.lstrip()[:1]
    if start in ("{", "["):
        names = ProfileNames(catalogue_next_to(path, catalogue))
        rows = []
        for number, (source, value) in enumerate(_json_documents(path, text), start=1):
            rows += [_measurement(run, path, source, options, names) for run in _runs(source, value, number)]
        return MeasurementFile(path, sha256, tuple(rows)), True
    first = next((line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")), "")
    if first and "," not in first:
        raise ConfigError(str(path), "", f"not a recognised format: expected {FORMATS}")
    rows_csv = tuple(dataclasses.replace(row, path=path) for row in csv_rows(path, text, catalogue))
    return MeasurementFile(path, sha256, rows_csv), False


def _label(paths: Sequence[Path], files: Sequence[Path]) -> str:
    if len(paths) == 1 and paths[0].is_dir():
        return f"{paths[0].name}/ ({len(files)} files)"
    if len(files) <= MAX_LISTED_FILES:
        return ", ".join(f.name for f in files)
    return f"{files[0].name}, {files[1].name} and {len(files) - 2} more files"


def read_data(
    paths: Sequence[Path], options: FileOptions | None = None, catalogue: Catalogue | None = None
) -> MeasurementFile:
    """Read every file that ``paths`` name (mixed formats allowed) as one set of rows, in order."""
    options = checked_options(options or FileOptions(), catalogue)
    files = data_files(paths)
    read = [read_one(path, options, catalogue) for path in files]
    if options.given() and not any(is_json for _, is_json in read):
        raise ConfigError(
            options.given()[0], "", "applies to benchmark tools' JSON files only: a CSV row names its own GPU and model"
        )
    if len(read) == 1 and not (len(paths) == 1 and paths[0].is_dir()):
        return read[0][0]
    rows = tuple(row for part, _ in read for row in part.rows)
    digest = hashlib.sha256("".join(f"{part.sha256}  {part.path.name}\n" for part, _ in read).encode()).hexdigest()
    return MeasurementFile(files[0], digest, rows, _label(paths, files))
