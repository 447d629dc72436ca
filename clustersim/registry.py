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


def default_registries():  # type: ignore[no-untyped-def]
    """The cost-model and router registries (transitional)."""
    from clustersim import router as r
    from clustersim.cost.roofline import RooflineCostModel
    from clustersim.cost.unit import UnitCostModel

    costs = Registry(
        "cost model",
        [
            ("roofline", lambda config, model, gpu, tp: RooflineCostModel(model, gpu, tp)),
            ("unit", lambda config, model, gpu, tp: UnitCostModel(config.step_time_s)),
        ],
    )
    routers = Registry(
        "router",
        [
            ("round_robin", r.make_round_robin),
            ("random", r.make_random),
            ("least_outstanding", r.make_least_outstanding),
            ("least_kv", r.make_least_kv),
            ("power_of_two", r.make_power_of_two),
            ("affinity", r.make_affinity),
        ],
    )
    return costs, routers
