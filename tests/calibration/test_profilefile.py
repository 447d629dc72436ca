"""Profile files a calibration writes: the base's fields kept, fitted ones replaced, loadable back."""

from __future__ import annotations

from pathlib import Path

import yaml

from clustersim.calibration.profilefile import gpu_profile_path, profile_mapping, profile_text
from clustersim.config.catalogue import Catalogue
from clustersim.config.profiles import EngineProfile, HardwareProfile

CATALOGUE = Catalogue.builtin()


def test_mapping_renames_drops_aliases_and_keeps_cited_nulls() -> None:
    h100 = CATALOGUE.hardware("H100-SXM")
    mapping = profile_mapping(h100, "H100-SXM (mine)", {"compute_efficiency_frac": (0.7, "fitted on my data")})
    assert mapping["name"] == "H100-SXM (mine)" and "aliases" not in mapping
    assert mapping["compute_efficiency_frac"] == {"value": 0.7, "source": "fitted on my data"}
    assert mapping["peak_fp4_flops_per_s"] == {"value": None, "source": h100.peak_fp4_flops_per_s.source}  # type: ignore[union-attr]
    assert mapping["memory_efficiency_frac"] == h100.memory_efficiency_frac.model_dump()
    assert list(mapping)[:5] == [
        "name",
        "family",
        "memory_bytes",
        "memory_reported_bytes",
        "hbm_bandwidth_bytes_per_s",
    ]  # the class's order


def test_text_round_trips_with_its_header() -> None:
    vllm = CATALOGUE.engine("vllm-v0.6")
    text = profile_text(vllm, "mine", {"step_overhead_s": (2e-3, "fitted: a 'quoted' source")}, ["line one", "two"])
    assert text.startswith("# line one\n# two\nname: mine\n")
    loaded = EngineProfile.model_validate(yaml.safe_load(text))
    assert loaded.step_overhead_s.value == 2e-3 and loaded.step_overhead_s.source == "fitted: a 'quoted' source"
    assert loaded.model_dump(exclude={"name", "aliases", "step_overhead_s"}) == vllm.model_dump(
        exclude={"name", "aliases", "step_overhead_s"}
    )
    gpu = HardwareProfile.model_validate(yaml.safe_load(profile_text(CATALOGUE.hardware("H200"), "x", {}, [])))
    assert gpu.model_dump(exclude={"name", "aliases"}) == CATALOGUE.hardware("H200").model_dump(
        exclude={"name", "aliases"}
    )


def test_gpu_profiles_are_named_after_the_engine_file_and_the_gpu() -> None:
    assert gpu_profile_path(Path("out/my-engine.yaml"), "A100-80GB") == Path("out/my-engine-a100-80gb.yaml")
    assert gpu_profile_path(Path("my-engine.yml"), "H200") == Path("my-engine-h200.yaml")
    assert gpu_profile_path(Path("e.yaml"), "gpus/My GPU.yaml") == Path("e-my-gpu.yaml")


def test_an_engine_with_efficiency_scales_per_family_is_written_and_loads_back() -> None:
    engine = CATALOGUE.engine("trtllm")
    assert engine.efficiency  # the corpus-fitted scales: a mapping of family to scales
    text = profile_text(engine, "trtllm (mine)", {}, ["test"])
    loaded = EngineProfile.model_validate(yaml.safe_load(text))
    assert loaded.efficiency == engine.efficiency
