"""Typed reads from a benchmark tool's JSON file, each problem one line naming the file and the key path.

A :class:`JsonObject` is one JSON object (a ``dict``) with where it sits: the file and the path of
keys to it (``benchmarks[1].config.strategy``). Every read checks the value's type, so a file a tool
wrote differently than expected is refused as ``report.json: benchmarks[1].duration: expected a
number, got 'fast'`` instead of failing later inside the fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from clustersim.errors import ConfigError, shown_value


def _type_name(value: object) -> str:
    names = {bool: "true/false", int: "a number", float: "a number", str: "text", list: "a list", dict: "an object"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def is_number(value: object) -> bool:
    """Whether ``value`` is a JSON number (``true``/``false`` are not)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class JsonObject:
    """One JSON object of a file, with its key path (empty for the top level)."""

    value: dict[str, Any]
    source: str
    path: str = ""

    def key_path(self, key: str | int) -> str:
        """The path of ``key`` in this object: ``a.b`` or ``a[3]``."""
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str | int, problem: str) -> ConfigError:
        """The one-line error about ``key`` of this object."""
        return ConfigError(self.source, self.key_path(key), problem)

    def has(self, key: str) -> bool:
        """Whether ``key`` is present and not null."""
        return self.value.get(key) is not None

    def _get(self, key: str, expected: str) -> Any:
        if self.value.get(key) is None:
            raise self.error(key, f"missing: expected {expected}")
        return self.value[key]

    def _wrong(self, key: str, expected: str, value: object) -> ConfigError:
        return self.error(key, f"expected {expected}, got {_type_name(value)} {shown_value(value)}")

    def child(self, key: str) -> JsonObject:
        """The object at ``key`` (required)."""
        value = self._get(key, "an object")
        if not isinstance(value, dict):
            raise self._wrong(key, "an object", value)
        return JsonObject(value, self.source, self.key_path(key))

    def optional_child(self, key: str) -> JsonObject | None:
        """The object at ``key``, or None when absent or null."""
        return self.child(key) if self.has(key) else None

    def number(self, key: str) -> float:
        """The finite number at ``key`` (required)."""
        value = self._get(key, "a number")
        if not is_number(value) or not math.isfinite(value):
            raise self._wrong(key, "a finite number", value)
        return float(value)

    def optional_number(self, key: str) -> float | None:
        """The finite number at ``key``, or None when absent or null."""
        return self.number(key) if self.has(key) else None

    def count(self, key: str) -> int:
        """The whole number at least 0 at ``key`` (required; ``12.0`` is accepted as 12)."""
        value = self.number(key)
        if value < 0 or value != int(value):
            raise self.error(key, f"expected a whole number of at least 0, got {shown_value(value)}")
        return int(value)

    def text(self, key: str) -> str:
        """The text at ``key`` (required)."""
        value = self._get(key, "text")
        if not isinstance(value, str):
            raise self._wrong(key, "text", value)
        return value

    def optional_text(self, key: str) -> str | None:
        """The text at ``key``, or None when absent or null."""
        return self.text(key) if self.has(key) else None

    def items(self, key: str) -> list[Any]:
        """The list at ``key`` (required)."""
        value = self._get(key, "a list")
        if not isinstance(value, list):
            raise self._wrong(key, "a list", value)
        return value

    def objects(self, key: str) -> list[JsonObject]:
        """The list of objects at ``key`` (required)."""
        result = []
        for index, item in enumerate(self.items(key)):
            if not isinstance(item, dict):
                raise ConfigError(
                    self.source, f"{self.key_path(key)}[{index}]", f"expected an object, got {_type_name(item)}"
                )
            result.append(JsonObject(item, self.source, f"{self.key_path(key)}[{index}]"))
        return result

    def numbers(self, key: str, length: int | None = None) -> list[float]:
        """The list of finite numbers at ``key`` (required), of ``length`` entries when given."""
        values = self.items(key)
        for index, value in enumerate(values):
            if not is_number(value) or not math.isfinite(value):
                raise ConfigError(
                    self.source, f"{self.key_path(key)}[{index}]", f"expected a finite number, got {_type_name(value)}"
                )
        if length is not None and len(values) != length:
            raise self.error(key, f"has {len(values)} entries where the other per-request lists have {length}")
        return [float(v) for v in values]

    def lookup(self, *keys: str) -> Any:
        """The value at a nested path of keys, or None where any step is missing (no type checks)."""
        node: Any = self.value
        for key in keys:
            if not isinstance(node, dict) or node.get(key) is None:
                return None
            node = node[key]
        return node
