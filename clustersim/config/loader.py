"""Read YAML into frozen configs, with one-line errors naming the file, the field and the problem.

Unknown keys and unknown ``kind`` values are found by walking the raw YAML alongside the
pydantic schema (so each gets a "did you mean"); everything else is pydantic's validation,
reformatted as ``file: field.path: problem (got value)``.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from clustersim.config.base import number_problem, takes_bool
from clustersim.config.scenario import Scenario
from clustersim.config.window import window_problem
from clustersim.config.yamlsafe import check_size, parse_yaml
from clustersim.errors import ConfigError, did_you_mean, one_line, shown_value


@dataclass(frozen=True)
class LoadedScenario:
    """A validated scenario and where it came from."""

    scenario: Scenario
    source: str
    base_dir: Path


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Parse a YAML file that must hold a mapping (safe loader: no arbitrary objects)."""
    if not path.is_file():
        raise ConfigError(str(path), "", "no such file")
    try:
        with path.open(encoding="utf-8") as handle:
            data = parse_yaml(handle, str(path))
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot be read: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", f"must be a YAML mapping of keys to values, not {type(data).__name__}")
    return data


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str], source: str) -> dict[str, Any]:
    """Return a copy of ``raw`` with each ``dotted.path=value`` applied (value parsed as YAML).

    List items are addressed by index: ``workload.tenants.0.arrival.rate_per_s=4``.
    """
    result: dict[str, Any] = _deep_copy(raw)
    for item in overrides:
        path, sep, text = item.partition("=")
        if not sep or not path.strip():
            raise ConfigError("--set", item, "expected dotted.path=value")
        try:
            value = parse_yaml(text, "--set")
        except ConfigError as exc:
            if not exc.problem.startswith("invalid YAML"):
                raise ConfigError("--set", one_line(path.strip(), 60), exc.problem) from None
            value = text  # not YAML: taken as text
        keys = path.strip().split(".")
        node: Any = result
        for depth, key in enumerate(keys[:-1]):
            node = _descend(node, key, ".".join(keys[: depth + 1]), item)
        last = keys[-1]
        if isinstance(node, list):
            index = _list_index(node, last, path, item)
            node[index] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ConfigError("--set", path, f"cannot set a field inside a {type(node).__name__}")
    return result


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def _descend(node: Any, key: str, path: str, item: str) -> Any:
    if isinstance(node, list):
        return node[_list_index(node, key, path, item)]
    if isinstance(node, dict):
        if node.get(key) is None:
            node[key] = {}
        return node[key]
    raise ConfigError("--set", path, f"cannot descend into a {type(node).__name__}")


def _list_index(node: list[Any], key: str, path: str, item: str) -> int:
    if not key.lstrip("-").isdigit() or not -len(node) <= int(key) < len(node):
        raise ConfigError("--set", path, f"'{key}' is not an index of a list of {len(node)} items")
    return int(key)


# ----------------------------------------------------------------------------- schema walking
def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _unwrap(annotation: Any) -> tuple[Any, str | None]:
    """Strip ``Annotated`` and return (inner type, discriminator field name or None)."""
    discriminator = None
    while get_origin(annotation) is Annotated:
        args = get_args(annotation)
        for meta in args[1:]:
            if isinstance(meta, FieldInfo) and isinstance(meta.discriminator, str):
                discriminator = meta.discriminator
        annotation = args[0]
    return annotation, discriminator


def _union_members(annotation: Any) -> list[Any] | None:
    if get_origin(annotation) in (Union, types.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _tags(model: type[BaseModel], field: str) -> tuple[str, ...]:
    return tuple(get_args(model.model_fields[field].annotation)) if field in model.model_fields else ()


def _pick_member(
    raw: dict[str, Any], members: list[type[BaseModel]], field: str, source: str, path: str
) -> type[BaseModel]:
    all_tags = [tag for m in members for tag in _tags(m, field)]
    if field not in raw:
        defaults = [m for m in members if m.model_fields[field].default in _tags(m, field)]
        if len(defaults) == 1:
            return defaults[0]
        raise ConfigError(source, _join(path, field), f"missing; choose one of: {', '.join(all_tags)}")
    tag = raw[field]
    for member in members:
        if tag in _tags(member, field):
            return member
    raise ConfigError(
        source,
        _join(path, field),
        f"unknown {field} '{tag}'{did_you_mean(str(tag), all_tags)}; choose one of: {', '.join(all_tags)}",
    )


def check_unknown_keys(raw: Any, annotation: Any, source: str, path: str = "") -> None:
    """Raise :class:`ConfigError` for the first key or ``kind`` in ``raw`` that the schema does not know."""
    annotation, discriminator = _unwrap(annotation)
    members = _union_members(annotation)
    if members is not None:
        if raw is None:
            return
        if len(members) == 1:  # Optional[X]: X may itself be an Annotated, discriminated union
            check_unknown_keys(raw, members[0], source, path)
            return
        models = [m for m in (_unwrap(m)[0] for m in members) if _is_model(m)]
        if discriminator and isinstance(raw, dict) and models:
            check_unknown_keys(raw, _pick_member(raw, models, discriminator, source, path), source, path)
        elif isinstance(raw, dict) and len(models) == 1:  # a number or a mapping (one model's fields)
            check_unknown_keys(raw, models[0], source, path)
        return
    if _is_model(annotation):
        if not isinstance(raw, dict):
            return  # pydantic reports the type error
        fields = annotation.model_fields
        for key, value in raw.items():
            if key not in fields:
                raise ConfigError(
                    source,
                    _join(path, one_line(str(key), 60)),
                    f"unknown field{did_you_mean(str(key), fields)}; allowed: {', '.join(fields)}",
                )
            if isinstance(value, bool) and not takes_bool(fields[key].annotation):
                raise ConfigError(source, _join(path, key), f"expects a number or text, not {str(value).lower()}")
            check_unknown_keys(value, fields[key].annotation, source, _join(path, key))
            _check_discriminated_field(value, fields[key], source, _join(path, key))
        return
    origin = get_origin(annotation)
    if origin in (tuple, list) and isinstance(raw, list):
        element = get_args(annotation)[0] if get_args(annotation) else Any
        for index, value in enumerate(raw):
            check_unknown_keys(value, element, source, _join(path, index))


def _check_discriminated_field(value: Any, field: FieldInfo, source: str, path: str) -> None:
    """Fields declared ``Annotated[Union, Field(discriminator=...)]`` keep the discriminator on FieldInfo."""
    if not isinstance(field.discriminator, str) or not isinstance(value, dict):
        return
    members = _union_members(field.annotation)
    if members:
        models = [m for m in members if _is_model(m)]
        check_unknown_keys(value, _pick_member(value, models, field.discriminator, source, path), source, path)


def _flat_members(annotation: Any) -> list[Any] | None:
    """Members of a (possibly nested, Optional, Annotated) union, flattened; None if not a union."""
    members = _union_members(_unwrap(annotation)[0])
    if members is None:
        return None
    flat: list[Any] = []
    for member in members:
        inner = _flat_members(member)
        flat.extend(inner if inner is not None else [_unwrap(member)[0]])
    return flat


def _loc_path(loc: tuple[int | str, ...], model: type[BaseModel]) -> str:
    """Turn a pydantic error location into ``a.b[0].c``, dropping the union tags pydantic inserts."""
    path = ""
    annotation: Any = model
    for part in loc:
        members = _flat_members(annotation)
        if members is not None:
            models = [m for m in members if _is_model(m)]
            tagged = [m for m in models if "kind" in m.model_fields and part in _tags(m, "kind")]
            if tagged:
                annotation = tagged[0]
                continue  # the tag pydantic put in the location
            annotation = models[0] if len(models) == 1 else (members[0] if len(members) == 1 else Any)
        annotation = _unwrap(annotation)[0]
        if isinstance(part, int):
            path = _join(path, part)
            args = get_args(annotation)
            annotation = args[0] if args else Any
        elif _is_model(annotation) and part in annotation.model_fields:
            path = _join(path, part)
            annotation = annotation.model_fields[part].annotation
        elif get_origin(annotation) is dict and isinstance(part, str):  # a key of a mapping field
            path = _join(path, part)
            annotation = get_args(annotation)[1]
        elif annotation is Any and isinstance(part, str) and part.isidentifier():
            path = _join(path, part)
        # otherwise: a union-member label such as 'int' or 'function-after[...]'
    return path


def format_validation_error(exc: ValidationError, source: str, model: type[BaseModel]) -> ConfigError:
    """Turn the first pydantic error into a one-line :class:`ConfigError`."""
    error = exc.errors(include_url=False)[0]
    path = _loc_path(tuple(error["loc"]), model)
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    if message[:1].isupper() and not message[1:2].isupper():
        message = message[0].lower() + message[1:]
    context = error.get("ctx", {})
    if error["type"] == "missing":
        message = "missing (required)"
    elif error["type"] == "too_short":
        message = f"needs at least {context['min_length']} item(s), got {context['actual_length']}"
    elif error["type"] not in ("value_error", "assertion_error") and "input" in error:
        shown = error["input"]
        if not isinstance(shown, dict | list):
            message = f"{message} (got {shown_value(shown)})"
    return ConfigError(source, path, message)


def validate_mapping(raw: dict[str, Any], model: type[BaseModel], source: str) -> BaseModel:
    """Validate ``raw`` against ``model``: unknown keys first, then pydantic's checks."""
    check_unknown_keys(raw, model, source)
    try:
        validated = model.model_validate(raw)
    except ValidationError as exc:
        raise format_validation_error(exc, source, model) from None
    check_numbers(validated, source)
    return validated


def check_numbers(value: Any, source: str, path: str = "", field_name: str = "") -> None:
    """Raise :class:`ConfigError` for the first number in a validated config that the arithmetic
    cannot take (see :func:`clustersim.config.base.number_problem`)."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            check_numbers(getattr(value, name), source, _join(path, name), name)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_numbers(item, source, _join(path, index), field_name)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_numbers(item, source, _join(path, str(key)), field_name)
    elif (problem := number_problem(value, field_name)) is not None:
        raise ConfigError(source, path, problem)


def scenario_from_mapping(raw: dict[str, Any], source: str) -> Scenario:
    """Validate a raw mapping into a :class:`Scenario` (its measurement window included)."""
    scenario = validate_mapping(raw, Scenario, source)
    assert isinstance(scenario, Scenario)
    stop = scenario.stop
    problem = window_problem(scenario.metrics, scenario.workload.tenants, stop.max_requests, stop.horizon_s)
    if problem is not None:
        raise ConfigError(source, *problem)
    return scenario


def load_scenario(path: Path, overrides: Sequence[str] = ()) -> LoadedScenario:
    """Read, override and validate a scenario file."""
    raw = read_yaml_mapping(path)
    source = str(path)
    if overrides:
        raw = apply_overrides(raw, overrides, source)
        source = f"{path} (with --set)"
        check_size(raw, source)  # aliases the overrides' copy expanded
    return LoadedScenario(scenario_from_mapping(raw, source), source, path.resolve().parent)


__all__ = [
    "LoadedScenario",
    "apply_overrides",
    "check_unknown_keys",
    "format_validation_error",
    "load_scenario",
    "read_yaml_mapping",
    "scenario_from_mapping",
    "validate_mapping",
]
