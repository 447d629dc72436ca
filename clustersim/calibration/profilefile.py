"""Write a calibration's profiles: the base profiles with the fitted fields replaced, citing the data.

The engine profile keeps every field of the base engine with its source; each fitted field's
``source`` says it was fitted by ``clustersim calibrate``, on which file (name and sha256 prefix),
how many rows and values, and the error reached. GPU fields, when fitted, go to one hardware profile
per GPU next to the engine file (``my-engine-h200.yaml`` beside ``my-engine.yaml``). A scenario loads
them as ``cluster.engine: my-engine.yaml`` and ``cluster.hardware: my-engine-h200.yaml`` (paths
relative to the scenario's folder). Each file is checked to load back before it is written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from clustersim.calibration.fit import Calibration
from clustersim.calibration.measurements import MeasurementFile, fitted_values
from clustersim.calibration.report import scores
from clustersim.config.loader import format_validation_error
from clustersim.config.profiles import EngineProfile, HardwareProfile
from clustersim.outdir import safe_name

SHA_PREFIX_CHARS = 12


def citation(measurements: MeasurementFile) -> str:
    """``data.csv (sha256 0123456789ab)``: the file (or files) a fit used, by name and content."""
    return f"{measurements.name} (sha256 {measurements.sha256[:SHA_PREFIX_CHARS]})"


def fit_source(calibration: Calibration, measurements: MeasurementFile) -> str:
    """How the fitted values were made, with their errors: the text every fitted field's source shares."""
    setup, train = calibration.setup, calibration.train
    num_values = sum(len(fitted_values(setup.rows[i])) for i in train)
    rows = f"all {len(train)} rows" if not calibration.test else f"{len(train)} of its {len(setup.rows)} rows"
    fields = ", ".join(p.label for p in setup.parameters)
    errors = []
    for name, score in scores(calibration).items():
        mape = score.mape()
        if mape is not None:
            errors.append(f"{name} MAPE {mape:.1f}% ({score.count()} values)")
    return (
        f"fitted by `clustersim calibrate` on {citation(measurements)}, {rows} ({num_values} measured values): "
        f"bounded least squares on log(predicted / measured) of the simulated benchmarks, fitting {fields}; "
        + ", ".join(errors)
    )


def profile_mapping(profile: BaseModel, name: str, updates: dict[str, tuple[float, str]]) -> dict[str, Any]:
    """``profile`` as a YAML mapping, renamed, without aliases, with ``updates`` (field: value, source)."""
    data: dict[str, Any] = {}
    dumped = profile.model_dump(mode="json")  # nested models and mappings of them too
    for field in type(profile).model_fields:
        if field == "name":
            data[field] = name
        elif field in updates:
            data[field] = {"value": updates[field][0], "source": updates[field][1]}
        elif field != "aliases" and dumped[field] is not None:
            data[field] = dumped[field]
    return data


def profile_text(profile: BaseModel, name: str, updates: dict[str, tuple[float, str]], header: list[str]) -> str:
    """The profile file's text, checked to validate as ``profile``'s class."""
    data = profile_mapping(profile, name, updates)
    text = "".join(f"# {line}\n" for line in header)
    text += yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1_000_000)
    try:
        type(profile).model_validate(yaml.safe_load(text))
    except ValidationError as exc:  # a fitted value the profile refuses: a bug here, but say which field
        raise format_validation_error(exc, name, type(profile)) from None
    return text


def gpu_profile_path(engine_path: Path, hardware: str) -> Path:
    """Where a GPU's fitted profile goes: beside the engine file, named after both."""
    stem = Path(hardware).stem if hardware.endswith((".yaml", ".yml")) else hardware
    return engine_path.with_name(f"{engine_path.stem}-{safe_name(stem).lower()}.yaml")


def _write(path: Path, text: str) -> Path:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
    return path


def write_profiles(calibration: Calibration, measurements: MeasurementFile, out: Path) -> list[Path]:
    """Write the engine profile to ``out`` (and any fitted GPU's profile beside it); returns the paths."""
    setup = calibration.setup
    source = fit_source(calibration, measurements)
    engine_updates: dict[str, tuple[float, str]] = {}
    gpu_updates: dict[str, dict[str, tuple[float, str]]] = {}
    for parameter, value in zip(setup.parameters, calibration.values, strict=True):
        cited = f"{source}; started from {parameter.start:.4g}"
        if parameter.hardware is None:
            engine_updates[parameter.field] = (value, cited)
        else:
            gpu_updates.setdefault(parameter.hardware, {})[parameter.field] = (value, cited)
    made = f"Made by `clustersim calibrate` from {{}} and {citation(measurements)}."
    fitted = (
        f"Fitted fields: {', '.join(p.label for p in setup.parameters)}; every other field and source is the base's."
    )
    engine: EngineProfile = setup.engine
    header = [f"{out.stem}: engine profile calibrated on measurements.", made.format(f"engine '{engine.name}'"), fitted]
    header.append(f"Use it in a scenario as `cluster.engine: {out.name}` (relative to the scenario's folder).")
    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [_write(out, profile_text(engine, out.stem, engine_updates, header))]
    for gpu, updates in sorted(gpu_updates.items()):
        hardware: HardwareProfile = setup.hardware[gpu]
        path = gpu_profile_path(out, gpu)
        header = [f"{hardware.name} calibrated with {out.name}.", made.format(f"GPU '{hardware.name}'"), fitted]
        header.append(f"Use it as `cluster.hardware: {path.name}` together with `cluster.engine: {out.name}`.")
        paths.append(_write(path, profile_text(hardware, f"{hardware.name} ({out.stem})", updates, header)))
    return paths
