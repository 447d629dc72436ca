"""One registry per plug-in point, keyed exactly by the kinds its scenario config accepts."""

from __future__ import annotations

import typing
from typing import Any, get_args

import pytest

from clustersim.config import scenario as config
from clustersim.config import workload
from clustersim.cost import COST_MODELS
from clustersim.kvcache import ALLOCATORS
from clustersim.registry import Registry
from clustersim.replica.batching import POLICIES
from clustersim.replica.queues import ORDERINGS
from clustersim.router import ROUTERS
from clustersim.workload.arrivals import THINK_TIMES
from clustersim.workload.lengths import LENGTHS
from clustersim.workload.source import ARRIVALS
from clustersim.workload.traces import TRACE_FORMATS


def kinds(union: Any) -> set[str]:
    """The ``kind`` values of a discriminated union of config models."""
    members = get_args(get_args(union)[0]) if typing.get_origin(union) is typing.Annotated else get_args(union)
    return {get_args(member.model_fields["kind"].annotation)[0] for member in members}


@pytest.mark.parametrize(
    ("registry", "accepted"),
    [
        (ARRIVALS, kinds(workload.ArrivalProcess)),
        (LENGTHS, kinds(workload.LengthDistribution)),
        (THINK_TIMES, kinds(workload.ThinkTime)),
        (TRACE_FORMATS, set(get_args(workload.TraceFormat))),
        (ROUTERS, kinds(config.RouterConfig)),
        (ORDERINGS, kinds(config.Ordering)),
        (ALLOCATORS, set(get_args(config.AllocatorKind))),
        (COST_MODELS, kinds(config.CostModel)),
    ],
    ids=lambda v: v.what if isinstance(v, Registry) else "",
)
def test_registry_keys_are_the_config_kinds(registry: Registry[Any], accepted: set[str]) -> None:
    assert set(registry.names()) == accepted


def test_batching_policies_are_what_the_scheduler_accepts() -> None:
    for name in POLICIES.names():
        assert config.Scheduler(policy=name).policy == name
        assert POLICIES.get(name).kind == name
    with pytest.raises(ValueError, match="unknown policy 'vlm' \\(did you mean 'vllm_v1'\\?\\)"):
        config.Scheduler(policy="vlm")


def test_a_registry_refuses_duplicates_and_names_what_it_knows() -> None:
    with pytest.raises(ValueError, match="router 'a' is registered twice"):
        Registry("router", [("a", 1), ("a", 2)])
    with pytest.raises(KeyError, match="no router named 'x'; known: a, b"):
        Registry("router", [("a", 1), ("b", 2)]).get("x")
