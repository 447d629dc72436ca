"""Calibration and validation on the public kernel profiles: the issue's error targets on held-out rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, SHARED

from clustersim.architecture import GpuSpec
from clustersim.config.catalogue import Catalogue
from clustersim.validation.kernels import held_out, kernel_engine, load_samples
from clustersim.validation.report import calibrate, fitted_samples, mape_table, published_keys, score

PROFILES = SHARED / "profiles"
KERNELS = REPO / "validation" / "kernels"
pytestmark = pytest.mark.skipif(not PROFILES.is_dir(), reason=f"{PROFILES} is absent (shared ground truth not mounted)")
TARGETS = {"linear": 10.0, "attention_decode": 20.0, "all_reduce": 20.0}
# kernels measured in this repository: FP8 GEMMs are scored with the BF16 fit, never fitted
MEASURED_TARGETS = {"linear": 10.0, "linear_fp8": 10.0, "attention_decode": 15.0, "attention_prefill": 20.0}
# vidur's 2024 H100 GEMM timings only score the H100 fit (its GEMMs are fitted on this repository's timings, of
# today's cuBLAS): they run 20-45% slower around the roofline ridge; the bound guards against regressions
SCORED_ONLY_TARGETS = {("H100-SXM", "linear"): 20.0}


@pytest.fixture(scope="module")
def samples():
    return load_samples(PROFILES, KERNELS)


@pytest.fixture(scope="module")
def gpus():
    catalogue = Catalogue.builtin()
    engine = kernel_engine(catalogue)
    return {n: GpuSpec.from_profiles(catalogue.hardware(n), engine) for n in ("H100-SXM", "A100-80GB", "H200")}


def test_split_is_half_of_each_groups_shapes_and_keeps_repeats_together(samples):
    split = held_out(samples)
    for gpu in ("H100-SXM", "A100-80GB"):
        keys = {k for k in split if k[0] == gpu and k[1] == "linear"}
        held = sum(split[k] for k in keys)
        assert abs(2 * held - len(keys)) <= 1
    assert held_out(samples) == split  # seeded: the same split every time


def test_catalogue_calibration_meets_targets_on_held_out_rows(samples, gpus):
    rows = mape_table(score(samples, gpus))
    seen = set()
    for row in rows:
        targets = MEASURED_TARGETS if row.source.startswith("validation/") else TARGETS
        if (row.gpu, row.group) in SCORED_ONLY_TARGETS and not row.source.startswith("validation/"):
            assert row.mape_pct <= SCORED_ONLY_TARGETS[(row.gpu, row.group)], row
        elif row.group in targets:
            assert row.mape_pct <= targets[row.group], row
            seen.add((row.gpu, row.group))
    assert {("H100-SXM", "linear"), ("A100-80GB", "linear"), ("A100-80GB", "attention_decode")} <= seen
    assert {("H100-SXM", "all_reduce"), ("A100-80GB", "all_reduce")} <= seen
    assert {("H200", "linear_fp8"), ("H200", "attention_prefill"), ("H100-SXM", "attention_decode")} <= seen


def test_gemm_fit_uses_the_timings_measured_here_where_a_gpu_has_them(samples):
    fitted = fitted_samples(samples)
    sources = {(s.gpu, s.source.startswith("validation/")) for s in fitted if s.group == "linear"}
    assert ("H100-SXM", True) in sources and ("H100-SXM", False) not in sources  # vidur's H100 GEMMs only score
    assert ("A100-80GB", False) in sources  # no A100 GEMMs measured here: vidur's fit it
    assert len([s for s in fitted if s.group != "linear"]) == len([s for s in samples if s.group != "linear"])


def test_refit_reproduces_catalogue_values(samples, gpus):
    """The values in the YAML are what the fit gives (to the 4 digits written there)."""
    catalogue = Catalogue.builtin()
    calibration = calibrate(samples, gpus, {name: published_keys(catalogue.hardware(name)) for name in gpus})
    # A100 prefill attention is FlashAttention-2's published rate: vidur's A100 timings do not refit it; H100's is
    # fitted on the kernels measured here (validation/kernels), which outrank the paper's headline bars
    assert "prefill_attention_compute_efficiency_frac" not in calibration["A100-80GB"].values
    assert calibration["H100-SXM"].fits["prefill_attention_half_efficiency_tokens"][0] == "H100-SXM"
    for name, result in calibration.items():
        spec = gpus[name]
        for key, value in result.values.items():
            assert getattr(spec, key) == pytest.approx(value, rel=1e-3), (name, key)


def test_validate_cost_command_prints_table_and_writes_figure(tmp_path: Path):
    from click.testing import CliRunner

    from clustersim.cli import main

    result = CliRunner().invoke(main, ["validate-cost", str(SHARED), "--out", str(tmp_path), "--kernels", str(KERNELS)])
    assert result.exit_code == 0, result.output
    assert "H100-SXM   linear" in result.output
    assert "H200       linear_fp8" in result.output
    vidur_rows = [line for line in result.output.splitlines() if "vidur_" in line]
    assert vidur_rows and not any("MISSED" in line for line in vidur_rows)
    assert (tmp_path / "cost_validation.parquet").exists()
    assert (tmp_path / "cost-validation.png").stat().st_size > 10_000


def test_validate_cost_on_missing_folder_is_one_line_error(tmp_path: Path):
    from click.testing import CliRunner

    from clustersim.cli import main

    result = CliRunner().invoke(main, ["validate-cost", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such folder of measured profiles" in result.output
