"""What a calibration fits: profile fields, their bounds and starting points, and candidate profiles.

Any real-valued field of :class:`EngineProfile` can be fitted (one value for the engine), and any
real-valued field of :class:`HardwareProfile` (one value per GPU among the rows). The fields are
found on the classes at run time, so a field added to a profile later is fittable without a change
here. Bounds follow the profiles' own physical rules (:func:`clustersim.config.profiles.check_physical`):
fractions (``*_frac``) in (0, 1] (fitted no lower than 0.001), times (``*_s``) at least 0, the blend
exponent at least 1, anything else positive.

The solver works on scaled values (each field divided by its starting value, or by 1 ms for a time
that starts at 0), so every parameter it moves is of order one.
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from clustersim.config.profiles import (
    AT_LEAST_ONE,
    MAY_BE_ZERO,
    Cited,
    EfficiencyScales,
    EngineProfile,
    GpuFamily,
    HardwareProfile,
)
from clustersim.errors import ConfigError, did_you_mean

DEFAULT_ENGINE_FIELDS = ("step_overhead_s", "per_seq_overhead_s")
GPU_FIELDS = ("compute_efficiency_frac", "memory_efficiency_frac")
FRACTION_FLOOR = 1e-3
ABSENT_FRACTION_START = 0.5
TIME_SCALE_S = 1e-3  # the scale of a time that starts at 0
POSITIVE_FLOOR_REL = 1e-6  # a positive quantity is fitted no lower than this fraction of its start
FITTING_SOURCE = "being fitted by clustersim calibrate"


def _cited_value_type(annotation: Any) -> Any:
    """``T`` of a ``Cited[T]`` field (``Cited[T] | None`` too), or None for any other field."""
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    for member in members:
        if isinstance(member, type) and issubclass(member, Cited):
            args = member.__pydantic_generic_metadata__["args"]
            return args[0] if args else None
    return None


def _is_real(value_type: Any) -> bool:
    members = get_args(value_type) if get_origin(value_type) in (Union, types.UnionType) else (value_type,)
    return float in members and bool not in members


def real_fields(profile_cls: type[EngineProfile] | type[HardwareProfile]) -> tuple[str, ...]:
    """The fields of a profile class that hold a cited real number (what can be fitted)."""
    return tuple(
        name for name, info in profile_cls.model_fields.items() if _is_real(_cited_value_type(info.annotation))
    )


def _is_time(name: str) -> bool:
    return name.endswith("_s") and not name.endswith("_per_s")


def bounds_of(name: str, start: float) -> tuple[float, float]:
    """The range a field may be fitted in, by ``check_physical``'s rules (a positive quantity: no
    lower than a millionth of its start)."""
    if name.endswith("_frac"):
        return (0.0 if name in MAY_BE_ZERO else FRACTION_FLOOR), 1.0
    if _is_time(name) or name in MAY_BE_ZERO:
        return 0.0, math.inf
    if name in AT_LEAST_ONE:
        return 1.0, math.inf
    return start * POSITIVE_FLOOR_REL, math.inf


@dataclass(frozen=True)
class FitParameter:
    """One fitted number: an engine field (``hardware`` None) or one GPU's field.

    ``start``, ``low`` and ``high`` are in the field's own units; ``scale`` converts to the
    solver's (value / scale).
    """

    field: str
    hardware: str | None
    start: float
    low: float
    high: float
    scale: float

    @property
    def label(self) -> str:
        """``step_overhead_s`` for an engine field, ``H200.compute_efficiency_frac`` for a GPU's."""
        return self.field if self.hardware is None else f"{self.hardware}.{self.field}"


def _start(name: str, cited: Any, owner: str, where: str) -> float:
    """The value a field starts from: its profile's, else 0 for a time and 0.5 for a fraction."""
    value = getattr(cited, "value", None)
    if value is not None:
        return float(value)
    if _is_time(name):
        return 0.0
    if name.endswith("_frac"):
        return ABSENT_FRACTION_START
    if name.endswith("_scale"):  # an efficiency scale the engine does not set is 1
        return 1.0
    raise ConfigError(where, name, f"{owner} gives no value to start the fit from")


def _parameter(name: str, hardware: str | None, cited: Any, where: str) -> FitParameter:
    start = _start(name, cited, "the engine" if hardware is None else hardware, where)
    low, high = bounds_of(name, start)
    start = min(max(start, low), high)
    scale = start if start > 0 else (TIME_SCALE_S if _is_time(name) else 1.0)
    return FitParameter(name, hardware, start, low, high, scale)


def efficiency_fields() -> tuple[str, ...]:
    """The engine's efficiency scales, named ``efficiency.<GPU family>.<scale>`` (fitted once for the engine)."""
    families = get_args(GpuFamily)
    return tuple(f"efficiency.{family}.{name}" for family in families for name in EfficiencyScales.model_fields)


def _efficiency_start(engine: EngineProfile, name: str) -> Cited[float] | None:
    _, family, field = name.split(".")
    scales = (engine.efficiency or {}).get(family)  # type: ignore[call-overload]
    return getattr(scales, field) if scales is not None else None


def resolve_parameters(
    names: Sequence[str], engine: EngineProfile, hardware: Mapping[str, HardwareProfile], where: str = "--fit"
) -> tuple[FitParameter, ...]:
    """The parameters for the fields ``names``: engine fields once (its efficiency scales as
    ``efficiency.hopper.gemm_compute_scale``), GPU fields once per GPU (by name)."""
    engine_fields = (*real_fields(type(engine)), *efficiency_fields())
    gpu_fields = real_fields(HardwareProfile)
    fittable = (*real_fields(type(engine)), *gpu_fields, "efficiency.<family>.<scale>")
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(where, name, "named twice")
        if name in engine_fields or name in gpu_fields:
            continue
        if name in type(engine).model_fields or name in HardwareProfile.model_fields:
            raise ConfigError(where, name, f"is not a real number (only these are fitted: {', '.join(fittable)})")
        raise ConfigError(
            where, name, f"unknown profile field{did_you_mean(name, fittable)}; fittable: {', '.join(fittable)}"
        )
    if not names:
        raise ConfigError(where, "", "no field to fit")
    gpu_only = [name for name in gpu_fields if name not in engine_fields]
    parameters = [
        _parameter(
            name,
            None,
            _efficiency_start(engine, name) if name.startswith("efficiency.") else getattr(engine, name),
            where,
        )
        for name in names
        if name in engine_fields
    ]
    for gpu in sorted(hardware):
        parameters += [_parameter(name, gpu, getattr(hardware[gpu], name), where) for name in names if name in gpu_only]
    return tuple(parameters)


def _cited(old: Any, value: float) -> Cited[float]:
    if isinstance(old, Cited):
        return old.model_copy(update={"value": value})
    return Cited[float](value=value, source=FITTING_SOURCE)


def with_values(
    parameters: Sequence[FitParameter],
    values: Sequence[float],
    engine: EngineProfile,
    hardware: Mapping[str, HardwareProfile],
) -> tuple[EngineProfile, dict[str, HardwareProfile]]:
    """The engine and GPU profiles with the parameters set to ``values`` (their own units)."""
    engine_updates: dict[str, Any] = {}
    gpu_updates: dict[str, dict[str, Any]] = {name: {} for name in hardware}
    efficiency: dict[str, dict[str, Any]] = {
        family: dict(scales) for family, scales in (engine.efficiency or {}).items()
    }
    for parameter, value in zip(parameters, values, strict=True):
        if parameter.field.startswith("efficiency."):
            _, family, field = parameter.field.split(".")
            efficiency.setdefault(family, {})[field] = _cited(_efficiency_start(engine, parameter.field), value)
            engine_updates["efficiency"] = {f: EfficiencyScales(**scales) for f, scales in efficiency.items()}
        elif parameter.hardware is None:
            engine_updates[parameter.field] = _cited(getattr(engine, parameter.field), value)
        else:
            old = getattr(hardware[parameter.hardware], parameter.field)
            gpu_updates[parameter.hardware][parameter.field] = _cited(old, value)
    new_engine = engine.model_copy(update=engine_updates) if engine_updates else engine
    new_hardware = {
        name: p.model_copy(update=gpu_updates[name]) if gpu_updates[name] else p for name, p in hardware.items()
    }
    return new_engine, new_hardware
