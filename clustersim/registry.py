"""Plug-in registries: one per plug-in point, built beside its implementations, keyed by the YAML ``kind``.

A registry is fixed once built (no module-level state changes while a run goes): a duplicate key
raises, and an unknown one names the known ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Named implementations of one plug-in point."""

    def __init__(self, what: str, entries: Iterable[tuple[str, T]] = ()) -> None:
        self.what = what
        self._entries: dict[str, T] = {}
        for name, entry in entries:
            if name in self._entries:
                raise ValueError(f"{what} '{name}' is registered twice")
            self._entries[name] = entry

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"no {self.what} named '{name}'; known: {', '.join(self._entries)}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)
