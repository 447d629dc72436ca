"""What ``clustersim validate-cost`` does, as a function returning the text it prints."""

from __future__ import annotations

from pathlib import Path

from clustersim.architecture import GpuSpec
from clustersim.config.catalogue import Catalogue
from clustersim.validation.fit import apply
from clustersim.validation.kernels import files_by_gpu_and_group, kernel_engine, load_samples
from clustersim.validation.report import (
    calibrate,
    calibration_sources,
    fitted_samples,
    format_mape_table,
    mape_table,
    published_keys,
    score,
    unfitted_files,
    write_scored,
)
from clustersim.validation.sustained import format_sustained, load_sustained

TARGETS_PCT = {"linear": 10.0, "linear_fp8": 10.0, "attention_decode": 20.0, "all_reduce": 20.0}


def profiles_dir_of(data_dir: Path) -> Path:
    """``DATA_DIR/profiles`` if it exists (a ground-truth folder), else ``DATA_DIR`` itself."""
    nested = data_dir / "profiles"
    return nested if nested.is_dir() else data_dir


def run_validate_cost(
    data_dir: Path,
    out_dir: Path | None,
    fit: bool,
    catalogue: Catalogue | None = None,
    kernels_dir: Path | None = None,
) -> str:
    """Score the catalogue's calibration on held-out samples; with ``fit``, refit and show YAML entries too."""
    catalogue = catalogue or Catalogue.builtin()
    profiles = profiles_dir_of(data_dir)
    samples = load_samples(profiles, kernels_dir)
    names = sorted({s.gpu for s in samples})
    engine = kernel_engine(catalogue)
    gpus = {name: GpuSpec.from_profiles(catalogue.hardware(name), engine) for name in names}
    lines = ["held-out mean absolute percentage error per GPU and op group (catalogue calibration):"]
    scored = score(samples, gpus)
    unfitted = unfitted_files(samples)
    lines.append(format_mape_table(mape_table(scored), TARGETS_PCT, unfitted))
    sustained = load_sustained(kernels_dir) if kernels_dir is not None else []
    if sustained:
        lines.extend(("", format_sustained(sustained)))
    if fit:
        keep = {name: published_keys(catalogue.hardware(name)) for name in names}
        calibration = calibrate(samples, gpus, keep)
        fitted = {name: apply(gpus[name], c.values) for name, c in calibration.items()}
        refit_table = mape_table(score(samples, fitted))
        lines.append("\nrefitted on the training half; held-out error with the refitted values:")
        lines.append(format_mape_table(refit_table, TARGETS_PCT, unfitted))
        files = files_by_gpu_and_group(fitted_samples(samples))
        for name, result in calibration.items():
            lines.append(f"\n# hardware_profiles/gpus/ entries for {name}")
            for key, (value, source) in calibration_sources(result, refit_table, files).items():
                lines.extend((f"{key}:", f"  value: {value:.4g}", f'  source: "{source}"'))
    if out_dir is not None:
        path = write_scored(scored, out_dir / "cost_validation.parquet")
        lines.append(f"wrote {path}")
    return "\n".join(lines)
