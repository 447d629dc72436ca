"""The layer-kernel tables (scripts/measure_layer_kernels.py): read, priced, scored and never fitted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO

from clustersim.architecture import GpuSpec, ModelShape
from clustersim.config.catalogue import Catalogue
from clustersim.cost.base import StepBatch
from clustersim.cost.roofline import KERNEL_GROUPS, kernel_time_s, price_step
from clustersim.errors import ConfigError
from clustersim.validation.kernels import SCORED_ONLY, KernelSample, held_out, kernel_engine, measured_samples
from clustersim.validation.layerkernels import layer_samples
from clustersim.validation.report import mape_table, score

LAYERS = REPO / "validation" / "kernels" / "layers"
KERNELS = REPO / "validation" / "kernels"


@pytest.fixture(scope="module")
def catalogue():
    return Catalogue.builtin()


@pytest.fixture(scope="module")
def h100(catalogue):
    return layer_samples(LAYERS / "h100-sxm.csv", catalogue)


def _copy(tmp_path: Path, frame: pd.DataFrame) -> Path:
    path = tmp_path / "h100-sxm.csv"
    frame.to_csv(path, index=False)
    shutil.copy(LAYERS / "h100-sxm.environment.json", tmp_path / "h100-sxm.environment.json")
    return path


def test_every_measured_row_becomes_a_sample(h100):
    counts = pd.Series([s.group for s in h100]).value_counts().to_dict()
    frame = pd.read_csv(LAYERS / "h100-sxm.csv")
    assert counts["elementwise_fused"] == frame["kernel"].str.startswith("ew_").sum()
    assert counts["moe"] == frame["kernel"].str.startswith("moe_").sum() // 2  # up and down make one layer
    steps = frame[frame["kernel"].str.endswith("_step")]
    assert set(steps["backend"]) == {"cuda_graph/cudnn", "cuda_graph/flash"}
    assert counts["step"] == len(steps) // 2  # each step keeps the faster of its two attention kernels
    assert {s.gpu for s in h100} == {"H100-SXM"}


def test_moe_sample_is_the_sum_of_its_two_grouped_gemms(h100):
    frame = pd.read_csv(LAYERS / "h100-sxm.csv")
    pair = frame[(frame["model"] == "mixtral-8x7b") & (frame["m_tokens"] == 64) & frame["kernel"].str.startswith("moe")]
    sample = next(s for s in h100 if s.group == "moe" and s.key == (8.0, 4096.0, 1.0, 64.0, 0.0))
    assert sample.measured_s == pytest.approx(pair["median_s"].sum())


def test_step_is_priced_as_its_layer_kernels_only(catalogue):
    gpu = GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), kernel_engine(catalogue))
    model = ModelShape.from_profile(catalogue.model("llama-3.1-70b"))
    batch = StepBatch(num_decode_seqs=32, decode_context_tokens=32 * 1024)
    cost = price_step(batch, model, gpu, 8)
    kernels = kernel_time_s(batch, model, gpu, 8)
    assert kernels == pytest.approx(sum(op.time_s for op in cost.ops if op.name in KERNEL_GROUPS))
    left_out = {op.name for op in cost.ops if op.time_s > 0} - set(KERNEL_GROUPS)
    assert {"lm_head", "all_reduce", "overhead"} <= left_out
    assert kernels < cost.duration_s
    sample = KernelSample("H100-SXM", "step", (0.0,), 0.01, 32, 8, model, batch=batch)
    assert sample.predict_s(gpu) == kernels


def test_scored_only_groups_leave_the_fitted_halves_as_they_were(h100):
    measured = measured_samples(KERNELS / "h100-sxm.csv")
    alone = held_out(measured)
    together = held_out([*measured, *h100])
    assert {k: v for k, v in together.items() if k[1] not in SCORED_ONLY} == alone
    assert all(together[(s.gpu, s.group, s.key)] for s in h100)  # every scored-only row is scored


def test_whole_decode_steps_on_h100_are_within_a_tenth(h100, catalogue):
    """The layer kernels priced one by one add up to the measured CUDA-graph decode steps."""
    gpus = {"H100-SXM": GpuSpec.from_profiles(catalogue.hardware("H100-SXM"), kernel_engine(catalogue))}
    decode = [s for s in h100 if s.group == "step" and s.key[0] == 0.0]
    row = next(r for r in mape_table(score(decode, gpus)) if r.group == "step")
    assert row.num_samples == len(decode) == 28
    assert row.mape_pct < 10.0


def test_failed_timings_and_half_measured_moe_layers_are_skipped(tmp_path, catalogue):
    frame = pd.read_csv(LAYERS / "h100-sxm.csv")
    up = frame.index[(frame["kernel"] == "moe_up") & (frame["model"] == "qwen3-30b-a3b") & (frame["m_tokens"] == 16)]
    frame.loc[up, "median_s"] = None
    frame.loc[frame.index[frame["kernel"] == "ew_rope"][0], "median_s"] = None
    samples = layer_samples(_copy(tmp_path, frame), catalogue)
    full = layer_samples(LAYERS / "h100-sxm.csv", catalogue)
    assert len(samples) == len(full) - 2
    assert not any(s.group == "moe" and s.key == (128.0, 2048.0, 1.0, 16.0, 0.0) for s in samples)


def test_fp8_expert_layers_are_priced_with_fp8_weights(catalogue):
    fp8 = layer_samples(LAYERS / "h100-sxm-moe-fp8.csv", catalogue)
    frame = pd.read_csv(LAYERS / "h100-sxm-moe-fp8.csv")
    assert len(fp8) == len(frame) // 2 and {s.group for s in fp8} == {"moe"}
    assert all(s.key[-1] == 1.0 and s.model is not None and s.model.weight_precision == "fp8" for s in fp8)


def test_a_table_missing_a_column_names_the_file_and_column(tmp_path, catalogue):
    frame = pd.read_csv(LAYERS / "h100-sxm.csv").drop(columns=["kv_len"])
    path = _copy(tmp_path, frame)
    with pytest.raises(ConfigError, match=r"h100-sxm\.csv.*kv_len.*missing columns"):
        layer_samples(path, catalogue)


def test_a_step_of_unknown_precision_is_refused(tmp_path, catalogue):
    frame = pd.read_csv(LAYERS / "h100-sxm.csv")
    frame.loc[frame["kernel"] == "decode_step", "note"] = "int4"
    with pytest.raises(ConfigError, match=r"note.*'int4' is not a weight precision"):
        layer_samples(_copy(tmp_path, frame), catalogue)
