"""Capacity plans: the fewest replicas of each option that meet the SLOs across seeds, ranked by price."""

from clustersim.plans.execute import OptionAnswer, PlanResult, run_plan_spec
from clustersim.plans.spec import PlanOption, PlanSpec, load_plan, plan_from_mapping

__all__ = ["OptionAnswer", "PlanOption", "PlanResult", "PlanSpec", "load_plan", "plan_from_mapping", "run_plan_spec"]
