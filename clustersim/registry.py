"""Plug-in registries: the YAML ``kind`` (or policy name) is the key; a duplicate registration raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from clustersim.architecture import GpuSpec, ModelShape
from clustersim.config.scenario import RooflineCost, UnitCost
from clustersim.cost.base import CostModel
from clustersim.cost.roofline import RooflineCostModel
from clustersim.cost.unit import UnitCostModel
from clustersim.router import (
    RouterFactory,
    make_affinity,
    make_least_kv,
    make_least_outstanding,
    make_power_of_two,
    make_random,
    make_round_robin,
)

T = TypeVar("T")


class Registry(Generic[T]):
    """Named factories for one plug-in point."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._factories: dict[str, T] = {}

    def register(self, name: str, factory: T) -> None:
        if name in self._factories:
            raise ValueError(f"{self.what} '{name}' is already registered")
        self._factories[name] = factory

    def get(self, name: str) -> T:
        try:
            return self._factories[name]
        except KeyError:
            raise KeyError(f"no {self.what} named '{name}'; known: {', '.join(self._factories)}") from None

    def names(self) -> list[str]:
        return list(self._factories)


CostFactory = Callable[[RooflineCost | UnitCost, ModelShape, GpuSpec, int], CostModel]


def _roofline(config: RooflineCost | UnitCost, model: ModelShape, gpu: GpuSpec, tp: int) -> CostModel:
    return RooflineCostModel(model, gpu, tp)


def _unit(config: RooflineCost | UnitCost, model: ModelShape, gpu: GpuSpec, tp: int) -> CostModel:
    assert isinstance(config, UnitCost)
    return UnitCostModel(config.step_time_s)


def default_registries() -> tuple[Registry[CostFactory], Registry[RouterFactory]]:
    """Fresh registries holding the built-in plug-ins (one set per run: no module-level state)."""
    costs: Registry[CostFactory] = Registry("cost model")
    costs.register("roofline", _roofline)
    costs.register("unit", _unit)
    routers: Registry[RouterFactory] = Registry("router")
    routers.register("round_robin", make_round_robin)
    routers.register("random", make_random)
    routers.register("least_outstanding", make_least_outstanding)
    routers.register("least_kv", make_least_kv)
    routers.register("power_of_two", make_power_of_two)
    routers.register("affinity", make_affinity)
    return costs, routers
