"""An engine's host time overlapped with its GPU steps only where its release, or the deployment, schedules
asynchronously (vLLM's async scheduling: a flag from 0.10.0, the default from 0.14.0)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import explicit_scenario

from clustersim.architecture import EngineSpec, GpuSpec, overlaps_host
from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario, scenario_from_mapping
from clustersim.config.profiles import Cited
from clustersim.errors import ConfigError
from clustersim.runplan import plan_run

CATALOGUE = Catalogue.builtin()


def _vllm(since: str | None = "0.14.0"):
    engine = CATALOGUE.engine("vllm-v1")
    cited = None if since is None else Cited[str](value=since, source="a test: async scheduling on by default")
    return engine.model_copy(update={"host_overlap_since_version": cited})


def test_a_release_before_the_default_runs_its_host_time_in_series():
    engine = _vllm()
    frac = engine.host_overlap_frac.value
    assert 0.0 < frac < 1.0
    assert EngineSpec.from_profile(engine, "0.11.0").host_overlap_frac == 0.0
    assert EngineSpec.from_profile(engine, "0.14.0").host_overlap_frac == frac
    assert EngineSpec.from_profile(engine, None).host_overlap_frac == frac  # the profile's current release
    assert EngineSpec.from_profile(_vllm(None), "0.11.0").host_overlap_frac == frac  # no release named: always
    # the deployment's flag wins either way
    assert overlaps_host(engine, "0.11.0", True) and not overlaps_host(engine, "0.19.0", False)
    # GpuSpec prices a run of that release
    h100 = CATALOGUE.hardware("H100-SXM")
    assert GpuSpec.from_profiles(h100, engine, "0.10.2").engine.host_overlap_frac == 0.0


def _plan(tmp_path: Path, cluster: dict, engine=None) -> float:
    if engine is not None:
        data = engine.model_dump(mode="json", exclude_none=True)
        data.update(name="vllm-test", aliases=[])
        (tmp_path / "vllm-test.yaml").write_text(yaml.safe_dump(data))
    raw = {**explicit_scenario([(0.0, 4, 2)], cluster=cluster), "cost": {"kind": "roofline"}}  # the engine's costs
    loaded = LoadedScenario(scenario_from_mapping(raw, "t.yaml"), "t.yaml", tmp_path)
    return plan_run(loaded, CATALOGUE).groups[0].gpu.engine.host_overlap_frac


@pytest.mark.parametrize(
    ("cluster", "overlapped"),
    [
        ({"engine_version": "0.11.0"}, False),
        ({"engine_version": "0.11.0", "async_scheduling": True}, True),  # --async-scheduling before the default
        ({"engine_version": "0.19.0"}, True),
        ({"engine_version": "0.19.0", "async_scheduling": False}, False),
        ({}, True),
    ],
)
def test_a_scenario_runs_the_releases_default_unless_it_says(tmp_path, cluster, overlapped):
    engine = _vllm()
    found = _plan(tmp_path, {"engine": "vllm-test.yaml", **cluster}, engine)
    assert found == (engine.host_overlap_frac.value if overlapped else 0.0)


def test_an_engine_that_overlaps_nothing_cannot_be_asked_to(tmp_path):
    with pytest.raises(ConfigError, match=r"cluster\.async_scheduling.*overlaps none of its host time"):
        _plan(tmp_path, {"engine": "trtllm", "async_scheduling": True})
    assert _plan(tmp_path, {"engine": "trtllm", "async_scheduling": False}) == 0.0
