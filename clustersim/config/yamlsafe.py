"""YAML read defensively: no duplicate keys, no alias bombs, no deep nesting, no overlong numbers.

Every scenario, profile file and ``--set`` value goes through :func:`parse_yaml`, which returns
plain data or raises one :class:`~clustersim.errors.ConfigError` that names the place and never
quotes the file's contents beyond a short value.
"""

from __future__ import annotations

from typing import IO, Any

import yaml
from yaml.constructor import ConstructorError

from clustersim.errors import ConfigError, one_line, shown_value

MAX_VALUES = 100_000  # values in a document, counted through aliases (a 1 KB alias bomb is 9**8)
MAX_DEPTH = 50  # nesting of mappings and lists


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base class reports it
                break
            if duplicate:
                raise ConstructorError(
                    None, None, f"duplicate key {shown_value(key)} (each key once per mapping)", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str | IO[str], source: str) -> Any:
    """Parse one YAML document safely (see the module docstring)."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = exc.problem or str(exc)
        raise ConfigError(source, where, f"invalid YAML: {one_line(problem, 160)}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(source, "", f"invalid YAML: {one_line(str(exc), 160)}") from None
    except RecursionError:
        raise ConfigError(source, "", f"nested too deeply (at most {MAX_DEPTH} levels)") from None
    except ValueError:  # Python refuses integers of more than 4,300 digits
        raise ConfigError(source, "", "holds a number too long to read (more than 4,300 digits)") from None
    check_size(data, source)
    return data


def check_size(data: Any, source: str) -> None:
    """Raise :class:`ConfigError` if ``data`` nests deeper than 50 levels or holds more than 100,000
    values counted through shared (aliased) parts."""
    budget = [MAX_VALUES]
    _walk(data, 0, budget, source)


def _walk(node: Any, depth: int, budget: list[int], source: str) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError(source, "", f"holds more than {MAX_VALUES:,} values (YAML aliases expanding?)")
    if depth > MAX_DEPTH:
        raise ConfigError(source, "", f"nested too deeply (at most {MAX_DEPTH} levels)")
    if isinstance(node, dict):
        for value in node.values():
            _walk(value, depth + 1, budget, source)
    elif isinstance(node, list):
        for value in node:
            _walk(value, depth + 1, budget, source)
