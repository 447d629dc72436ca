"""``clustersim compare``: the sweep it builds from ``--vary`` (axis names), one tenant's figures."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_acceptance import two_tenants

from clustersim.compare import compare, sweep_of
from clustersim.errors import ConfigError


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


def test_tenant_shows_one_tenants_figures(tmp_path: Path) -> None:
    # two tenants at different acceptance rates share one replica: each tenant's TPOT is its own
    raw = two_tenants(False)
    scenario = tmp_path / "two.yaml"
    scenario.write_text(yaml.safe_dump(raw), encoding="utf-8")
    vary = ["scheduler.max_num_seqs=2,4"]
    whole, _ = compare(scenario, vary, [], tmp_path / "all", 1)
    a, _ = compare(scenario, vary, [], tmp_path / "a", 1, tenant="a")
    b, _ = compare(scenario, vary, [], tmp_path / "b", 1, tenant="b")
    assert [row["completed"] for row in whole] == [2, 2]
    assert [row["completed"] for row in a] == [row["completed"] for row in b] == [1, 1]
    assert [row["TPOT p50 ms"] for row in a] == pytest.approx([500.0, 500.0])  # a token every half-cycle step
    assert [row["TPOT p50 ms"] for row in b] == pytest.approx([1000.0, 1000.0])  # at half a's share
    assert a[0]["mean batch"] == whole[0]["mean batch"]  # the run's own columns stay the run's


def test_an_unknown_tenant_is_refused_before_anything_runs(tmp_path: Path) -> None:
    scenario = tmp_path / "two.yaml"
    scenario.write_text(yaml.safe_dump(two_tenants(False)), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        compare(scenario, ["scheduler.max_num_seqs=2,4"], [], tmp_path / "x", 1, tenant="bb")
    assert "--tenant: no tenant 'bb' (did you mean 'b'?); the tenants: a, b" in str(caught.value)
    assert not (tmp_path / "x").exists()
