"""Capacity plans: the fewest replicas of each option that meet the SLOs across seeds, ranked by price."""

from clustersim.plan.execute import OptionAnswer, PlanResult, run_plan_spec
from clustersim.plan.spec import PlanOption, PlanSpec, load_plan, plan_from_mapping

__all__ = ["OptionAnswer", "PlanOption", "PlanResult", "PlanSpec", "load_plan", "plan_from_mapping", "run_plan_spec"]
