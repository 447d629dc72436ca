"""Which profile fields a calibration fits, within which bounds, and the candidate profiles it builds."""

from __future__ import annotations

import math

import pytest

from clustersim.calibration.parameters import (
    FITTING_SOURCE,
    FRACTION_FLOOR,
    TIME_SCALE_S,
    bounds_of,
    real_fields,
    resolve_parameters,
    with_values,
)
from clustersim.config.catalogue import Catalogue
from clustersim.config.profiles import Cited, EngineProfile, HardwareProfile
from clustersim.errors import ConfigError

CATALOGUE = Catalogue.builtin()
VLLM = CATALOGUE.engine("vllm-v0.6")
GPUS = {"H200": CATALOGUE.hardware("H200"), "A100-80GB": CATALOGUE.hardware("A100-80GB")}


class FutureEngine(EngineProfile):
    """An engine profile with a field added after this module was written."""

    host_overlap_frac: Cited[float] | None = None


def test_real_fields_are_found_on_the_classes() -> None:
    engine = real_fields(EngineProfile)
    assert {"step_overhead_s", "per_seq_overhead_s", "sampling_per_seq_s"} <= set(engine)
    assert "cuda_graph_max_seqs" not in engine and "name" not in engine  # a count and a text
    gpu = real_fields(HardwareProfile)
    assert {"compute_efficiency_frac", "memory_efficiency_frac", "peak_fp8_flops_per_s"} <= set(gpu)
    assert "host_overlap_frac" in real_fields(FutureEngine)


@pytest.mark.parametrize(
    ("name", "start", "bounds"),
    [
        ("step_overhead_s", 1e-3, (0.0, math.inf)),
        ("compute_efficiency_frac", 0.8, (FRACTION_FLOOR, 1.0)),
        ("host_overlap_frac", 0.5, (FRACTION_FLOOR, 1.0)),
        ("roofline_blend_exponent", 2.0, (1.0, math.inf)),
        ("hbm_bandwidth_bytes_per_s", 4e12, (4e6, math.inf)),  # positive: a millionth of the start
        ("decode_attention_half_occupancy_seqs", 1.0, (1e-6, math.inf)),
    ],
)
def test_bounds_follow_the_profiles_physical_rules(name: str, start: float, bounds: tuple[float, float]) -> None:
    assert bounds_of(name, start) == pytest.approx(bounds)


def test_engine_fields_once_and_gpu_fields_per_gpu() -> None:
    fields = ["step_overhead_s", "compute_efficiency_frac", "per_seq_overhead_s"]
    parameters = resolve_parameters(fields, VLLM, GPUS)
    assert [p.label for p in parameters] == [
        "step_overhead_s",
        "per_seq_overhead_s",
        "A100-80GB.compute_efficiency_frac",
        "H200.compute_efficiency_frac",
    ]
    step = parameters[0]
    assert (step.start, step.low, step.high, step.scale) == (1.15e-3, 0.0, math.inf, 1.15e-3)
    assert parameters[3].start == GPUS["H200"].compute_efficiency_frac.value


def test_a_field_the_base_lacks_starts_at_zero_time_or_half_fraction() -> None:
    engine = FutureEngine.model_validate({**VLLM.model_dump(), "per_seq_overhead_s": None})
    by_field = {p.field: p for p in resolve_parameters(["per_seq_overhead_s", "host_overlap_frac"], engine, {})}
    assert (by_field["per_seq_overhead_s"].start, by_field["per_seq_overhead_s"].scale) == (0.0, TIME_SCALE_S)
    assert (by_field["host_overlap_frac"].start, by_field["host_overlap_frac"].high) == (0.5, 1.0)


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        (["step_overhead"], "step_overhead", "unknown profile field (did you mean 'step_overhead_s'?)"),
        (["cuda_graph_max_seqs"], "cuda_graph_max_seqs", "is not a real number"),
        (["name"], "name", "is not a real number"),
        (["step_overhead_s", "step_overhead_s"], "step_overhead_s", "named twice"),
        ([], "", "no field to fit"),
    ],
)
def test_fields_refused(fields: list[str], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_parameters(fields, VLLM, GPUS)
    assert (caught.value.source, caught.value.field_path) == ("--fit", field)
    assert words in caught.value.problem


def test_candidate_profiles_carry_the_values_and_keep_the_rest() -> None:
    engine = FutureEngine.model_validate(VLLM.model_dump())
    parameters = resolve_parameters(["step_overhead_s", "host_overlap_frac", "memory_efficiency_frac"], engine, GPUS)
    new_engine, new_gpus = with_values(parameters, [2e-3, 0.25, 0.7, 0.9], engine, GPUS)
    assert new_engine.step_overhead_s.value == 2e-3
    assert new_engine.step_overhead_s.source == VLLM.step_overhead_s.source  # replaced when written
    assert new_engine.host_overlap_frac is not None and new_engine.host_overlap_frac.value == 0.25
    assert new_engine.host_overlap_frac.source == FITTING_SOURCE
    assert new_engine.per_seq_overhead_s == VLLM.per_seq_overhead_s
    assert new_gpus["A100-80GB"].memory_efficiency_frac.value == 0.7
    assert new_gpus["H200"].memory_efficiency_frac.value == 0.9
    assert new_gpus["H200"].compute_efficiency_frac == GPUS["H200"].compute_efficiency_frac
    assert engine.step_overhead_s.value == 1.15e-3  # the base is untouched


def test_an_engines_efficiency_scales_are_fittable_by_family() -> None:
    (param,) = resolve_parameters(["efficiency.hopper.gemm_compute_scale"], VLLM, GPUS)
    assert (param.field, param.hardware, param.start) == ("efficiency.hopper.gemm_compute_scale", None, 1.0)
    engine, _ = with_values([param], [0.7], VLLM, GPUS)
    assert engine.efficiency is not None
    assert engine.efficiency["hopper"].gemm_compute_scale.value == 0.7  # type: ignore[union-attr]
    assert engine.efficiency["hopper"].gemm_compute_scale.source == FITTING_SOURCE  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=r"efficiency\.hoper\.gemm_compute_scale: unknown profile field"):
        resolve_parameters(["efficiency.hoper.gemm_compute_scale"], VLLM, GPUS)
