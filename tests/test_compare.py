"""``clustersim compare``: the sweep it builds from ``--vary`` (axis names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustersim.compare import sweep_of


@pytest.mark.parametrize(
    ("vary", "names"),
    [
        (["scheduler.policy=a,b"], ["policy"]),
        (["cluster.groups.0.count=1,2", "cluster.groups.1.count=1,2"], ["groups_0_count", "groups_1_count"]),
        (["router.kind=a,b", "disaggregation.decode_router.kind=a,b"], ["router_kind", "decode_router_kind"]),
        (["cluster.num_replicas=1,2", "kv.num_blocks=3,4"], ["num_replicas", "num_blocks"]),
    ],
)
def test_axes_that_share_a_last_part_are_named_by_more_of_their_path(vary: list[str], names: list[str]) -> None:
    sweep = sweep_of(Path("s.yaml"), vary, [])
    assert [axis["name"] for axis in sweep["axes"]] == names
