"""Profile lookup by name or alias, with a "did you mean" for typos."""

from __future__ import annotations

import re

import pytest

from clustersim.config.catalogue import Catalogue
from clustersim.errors import ConfigError

CATALOGUE = Catalogue.builtin()


@pytest.mark.parametrize("name", ["H100-SXM", "h100", "H100-SXM5-80GB"])
def test_hardware_by_name_or_alias(name):
    assert CATALOGUE.hardware(name).name == "H100-SXM"


def test_unknown_hardware_names_field_and_suggests():
    with pytest.raises(ConfigError) as info:
        CATALOGUE.hardware("A100-80G", "s.yaml")
    assert str(info.value) == (
        "s.yaml: cluster.hardware: unknown hardware 'A100-80G' (did you mean 'A100-80GB'?); known: "
        "A100-40GB, A100-80GB, B200, H100-NVL, H100-PCIe, H100-SXM, H200, L40S, MI300X"
    )


def test_unknown_model_lists_known_models():
    with pytest.raises(ConfigError, match=r"cluster\.model: unknown model 'gpt-5'; known: DeepSeek-V3, Llama-2-13B"):
        CATALOGUE.model("gpt-5", "s.yaml")


def test_broken_profile_file_names_file_and_field(tmp_path):
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "x.yaml").write_text("name: X\nmemory_bytes: {value: 1}\n")
    with pytest.raises(ConfigError, match=r"x\.yaml: memory_bytes\.source: missing \(required\)"):
        Catalogue(tmp_path).hardware("X")


def test_profile_files_resolve_against_the_scenario_folder(tmp_path):
    source = Catalogue.builtin().root / "gpus" / "h100-sxm.yaml"
    (tmp_path / "mine.yaml").write_text(source.read_text().replace("name: H100-SXM", "name: My-GPU"))
    catalogue = Catalogue(Catalogue.builtin().root, base_dir=tmp_path)
    assert catalogue.hardware("mine.yaml").name == "My-GPU"
    with pytest.raises(ConfigError) as info:
        catalogue.hardware("missing.yaml", "s.yaml")
    assert str(info.value) == f"s.yaml: cluster.hardware: no such hardware profile file {tmp_path / 'missing.yaml'}"


def test_a_profile_field_the_schema_does_not_know_is_named_with_the_allowed_ones(tmp_path):
    engines = tmp_path / "engines"
    engines.mkdir()
    builtin = Catalogue.builtin().root / "engines" / "sglang.yaml"
    text = builtin.read_text().replace("launch_overhead_per_kernel_eager_s:", "launch_overhead_per_moe_layer_eager_s:")
    (engines / "sglang.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        Catalogue(tmp_path).engine("sglang")
    message = str(info.value)
    assert message.startswith(f"{engines / 'sglang.yaml'}: launch_overhead_per_moe_layer_eager_s: unknown field")
    assert "launch_overhead_per_kernel_eager_s" in message  # among the allowed ones


def test_a_value_a_gpu_reuses_from_a_measured_one_is_that_gpus_current_value():
    """A field whose source says it reuses another GPU's fitted value holds that GPU's value today (a refit
    of the donor updates every GPU that borrows from it)."""
    catalogue = Catalogue.builtin()
    borrowed = 0
    for name in catalogue.names("hardware"):
        profile = catalogue.hardware(name)
        for field, cited in profile:
            source = getattr(cited, "source", "")
            found = re.search(r"(\S+)'s (fitted )?value reused", source)
            if found is None:
                continue
            donor = found.group(1)
            assert getattr(catalogue.hardware(donor), field).value == cited.value, (name, field, donor)
            borrowed += 1
    assert borrowed >= 20


def test_a_typo_is_answered_with_the_canonical_name_not_an_alias():
    """vllm-v1 has the alias vLLM-V1: the suggestion is the name the catalogue lists, spelled as it lists it."""
    with pytest.raises(ConfigError, match=r"unknown engine 'vllm-v9' \(did you mean 'vllm-v1'\?\)"):
        Catalogue.builtin().engine("vllm-v9", "s.yaml", "cluster.engine")
