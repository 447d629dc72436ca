"""Step-time models: pure functions from a batch's shape to seconds (no simpy here)."""

from typing import Protocol

from clustersim.architecture import GpuSpec, ModelShape
from clustersim.config.scenario import RooflineCost, UnitCost
from clustersim.cost.base import CostModel, DecodeStepShape, StepBatch
from clustersim.cost.roofline import OpCost, RooflineCostModel, StepCost, price_step
from clustersim.cost.unit import UnitCostModel
from clustersim.registry import Registry

CostConfig = RooflineCost | UnitCost


class CostFactory(Protocol):
    """Builds a replica's cost model from its ``cost`` config, model, GPU and parallelism."""

    def __call__(
        self,
        config: RooflineCost | UnitCost,
        model: ModelShape,
        gpu: GpuSpec,
        tensor_parallel: int,
        pipeline_parallel: int,
    ) -> CostModel: ...


def _roofline(
    config: CostConfig, model: ModelShape, gpu: GpuSpec, tensor_parallel: int, pipeline_parallel: int
) -> CostModel:
    return RooflineCostModel(model, gpu, tensor_parallel, pipeline_parallel)


def _unit(
    config: CostConfig, model: ModelShape, gpu: GpuSpec, tensor_parallel: int, pipeline_parallel: int
) -> CostModel:
    assert isinstance(config, UnitCost)
    return UnitCostModel(config.step_time_s)


COST_MODELS: Registry[CostFactory] = Registry("cost model", [("roofline", _roofline), ("unit", _unit)])

__all__ = [
    "COST_MODELS",
    "CostFactory",
    "CostModel",
    "DecodeStepShape",
    "OpCost",
    "RooflineCostModel",
    "StepBatch",
    "StepCost",
    "UnitCostModel",
    "price_step",
]
