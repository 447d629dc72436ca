"""Step-time models: pure functions from a batch's shape to seconds (no simpy here)."""

from clustersim.cost.base import CostModel, DecodeStepShape, StepBatch
from clustersim.cost.roofline import OpCost, RooflineCostModel, StepCost, price_step
from clustersim.cost.unit import UnitCostModel

__all__ = [
    "CostModel",
    "DecodeStepShape",
    "OpCost",
    "RooflineCostModel",
    "StepBatch",
    "StepCost",
    "UnitCostModel",
    "price_step",
]
